// Who may do what: the peer of each RPC mapped to a role.
//
// Unix-socket peers are identified by SO_PEERCRED, read when the connection is
// accepted (server/listener.h) and looked up here by the connection's fd.
// TLS peers have presented a client certificate signed by --tls-client-ca;
// the CA is their allow list and they are editors.
#ifndef PVEMU_SERVER_AUTH_H_
#define PVEMU_SERVER_AUTH_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/peer_limits.h"

namespace grpc {
class ServerContext;
}

namespace pvemu::server {

enum class Role { kNone, kReader, kEditor };

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// An allow list: uids and gids.
struct AllowList {
  std::vector<uid_t> uids;
  std::vector<gid_t> gids;
  bool Contains(const PeerCred& cred) const;
};

// Parses "uid:0,gid:100,alice,@wheel" (numbers, user names, @group names).
// InvalidArgument names the entry that does not resolve.
absl::StatusOr<AllowList> ParseAllowList(absl::string_view spec,
                                         absl::string_view flag_name);

// Credentials of live Unix-socket connections, by fd. Thread-safe.
class PeerTable {
 public:
  void Set(int fd, const PeerCred& cred);
  // The credentials for a gRPC peer string "fd:N"; false if unknown.
  bool Lookup(absl::string_view peer, PeerCred* cred) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, PeerCred> by_fd_ ABSL_GUARDED_BY(mu_);
};

// Decides roles. Root is always an editor; editors may also read.
class Authorizer {
 public:
  Authorizer(const PeerTable* peers, AllowList readers, AllowList editors,
             int max_streams_per_peer = PeerStreamLimit::kDefault)
      : peers_(peers),
        readers_(std::move(readers)),
        editors_(std::move(editors)),
        streams_(max_streams_per_peer) {}

  Role RoleOf(const grpc::ServerContext& context) const;
  // "uid=0 gid=0 pid=12" or "tls:ipv4:127.0.0.1:5000" for audit records.
  std::string Describe(const grpc::ServerContext& context) const;
  // The peer's process, for a Unix-socket peer (0 for TLS peers).
  pid_t PeerPid(const grpc::ServerContext& context) const;
  // Who the stream limit counts against: "uid N" for a Unix-socket peer,
  // "TLS client CN" for a certificate (its address if it names nobody).
  std::string PeerKey(const grpc::ServerContext& context) const;
  // The first line of a long-lived stream after the role check: one place
  // among the peer's --max-streams-per-peer, held until the stream ends.
  absl::StatusOr<StreamHold> HoldStream(const grpc::ServerContext& context,
                                        absl::string_view rpc) const;

 private:
  const PeerTable* peers_;
  AllowList readers_;
  AllowList editors_;
  mutable PeerStreamLimit streams_;
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_AUTH_H_
