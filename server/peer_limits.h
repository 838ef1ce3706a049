// How many long-lived streams (AuditService.Watch, EmulateStream,
// SubscribePolicy, ReportTraps) one peer may hold open at once.
//
// A sync gRPC server gives every open stream a thread of its own, and a
// watcher its share of the audit queue budget; without a limit one reader
// could open streams until pvemud runs out of threads or memory. A peer is
// what the allow lists name: a uid on the Unix socket, a client certificate
// over TLS. Unary calls are not counted: they end on their own.
#ifndef PVEMU_SERVER_PEER_LIMITS_H_
#define PVEMU_SERVER_PEER_LIMITS_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace pvemu::server {

class PeerStreamLimit;

// One admitted stream; gives its place back when destroyed. Move-only.
class StreamHold {
 public:
  StreamHold(StreamHold&& other) noexcept : limit_(other.limit_), peer_(std::move(other.peer_)) {
    other.limit_ = nullptr;
  }
  StreamHold& operator=(StreamHold&&) = delete;
  StreamHold(const StreamHold&) = delete;
  ~StreamHold();

 private:
  friend class PeerStreamLimit;
  StreamHold(PeerStreamLimit* limit, std::string peer) : limit_(limit), peer_(std::move(peer)) {}
  PeerStreamLimit* limit_;
  std::string peer_;
};

class PeerStreamLimit {
 public:
  static constexpr int kDefault = 256;

  explicit PeerStreamLimit(int per_peer) : per_peer_(per_peer) {}

  // Admits one more stream for `peer` (a key such as "uid 1000"), or
  // ResourceExhausted naming the peer, the RPC, the limit and the flag.
  absl::StatusOr<StreamHold> Admit(const std::string& peer, absl::string_view rpc);
  // Streams `peer` holds now.
  int Open(const std::string& peer);

 private:
  friend class StreamHold;
  void Release(const std::string& peer);

  const int per_peer_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_PEER_LIMITS_H_
