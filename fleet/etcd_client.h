// pvemud's client of etcd's v3 gRPC API (proto/etcd/): one channel over
// every endpoint of the --fleet URL (round robin over the members that
// answer), reconnecting with a backoff capped at 5 s, and every call marked
// "hasleader" so that a member cut off from its cluster's quorum refuses
// at once instead of waiting out its election.
//
// Errors name etcd, the endpoints and the call, so that an operator reading
// "pvemuctl: ..." knows which cluster did not answer.
//
// Thread-safety: every method may be called from any thread.
#ifndef PVEMU_FLEET_ETCD_CLIENT_H_
#define PVEMU_FLEET_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace pvemu::fleet {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // HOST:PORT
  // Client TLS: given a CA, the channel uses TLS (with the certificate and
  // key as the client's identity when given).
  std::string ca_file, cert_file, key_file;
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
  int64_t create_revision = 0;
  int64_t lease = 0;

  // etcd's own key-value (a Range answer, a watch event, a Txn's failure
  // branch) as pvemu keeps it.
  static KeyValue From(const mvccpb::KeyValue& kv) {
    return KeyValue{kv.key(), kv.value(), kv.mod_revision(), kv.create_revision(), kv.lease()};
  }
};

struct RangeResult {
  int64_t revision = 0;  // the store's revision the read saw
  std::vector<KeyValue> kvs;
};

class EtcdClient {
 public:
  // Reads the TLS files; the connection itself is made lazily (etcd may be
  // down when pvemud starts).
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(const EtcdOptions& options);

  // The key (range_end "") or the range [key, range_end) at `revision`
  // (0: now; linearizable). A compacted revision fails with OUT_OF_RANGE.
  absl::StatusOr<RangeResult> Get(const std::string& key, const std::string& range_end,
                                  int64_t revision, absl::Duration timeout) const;
  // The same linearizable read of one key, started now and waited for
  // later, so that a caller can work beside it without a thread of its own:
  // the first attempt runs on gRPC's own threads, and Wait() answers as Get
  // would, retrying within `timeout` as Get does. Destroying it unwaited
  // cancels the read.
  class PendingGet {
   public:
    ~PendingGet();
    PendingGet(const PendingGet&) = delete;
    PendingGet& operator=(const PendingGet&) = delete;
    absl::StatusOr<RangeResult> Wait();

   private:
    friend class EtcdClient;
    PendingGet(const EtcdClient& client, std::string key, absl::Duration timeout);
    const EtcdClient& client_;
    const std::string key_;
    const absl::Time deadline_;
    etcdserverpb::RangeRequest request_;
    etcdserverpb::RangeResponse response_;
    grpc::ClientContext context_;
    grpc::Status status_;
    absl::Notification done_;
    bool waited_ = false;
  };
  std::unique_ptr<PendingGet> StartGet(const std::string& key, absl::Duration timeout) const;
  // Several reads at one revision (0: the current one) in one round trip (a
  // transaction of reads), one result each, in order.
  struct KeyRange {
    std::string key;
    std::string range_end;  // "": the key alone
  };
  absl::StatusOr<std::vector<RangeResult>> GetAll(const std::vector<KeyRange>& ranges,
                                                  int64_t revision, absl::Duration timeout) const;
  // A Txn. Its failures come back with the gRPC code (DEADLINE_EXCEEDED,
  // UNAVAILABLE, ...): the caller decides what an unanswered write means.
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request,
                                                absl::Duration timeout) const;
  // A Put; returns the revision.
  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value, int64_t lease,
                              absl::Duration timeout) const;
  absl::StatusOr<int64_t> LeaseGrant(int64_t ttl_seconds, absl::Duration timeout) const;
  // One keep-alive; returns the lease's remaining TTL (<= 0: it expired).
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t id, absl::Duration timeout) const;
  absl::Status LeaseRevoke(int64_t id, absl::Duration timeout) const;

  // For the watcher, which keeps its own stream.
  etcdserverpb::Watch::Stub& watch() const { return *watch_; }
  // Sets what every call to etcd carries ("hasleader") and the deadline.
  static void Prepare(grpc::ClientContext* context, absl::Duration timeout);

  // "etcd at 127.0.0.1:2379,127.0.0.1:2380"
  const std::string& name() const { return name_; }
  // `what` failed: the status, with etcd and its endpoints named.
  absl::Status Error(const grpc::Status& status, absl::string_view what) const;

 private:
  EtcdClient() = default;
  // One unary call to etcd under `timeout`; its failure named as `what`.
  template <typename Stub, typename Request, typename Response>
  absl::Status Unary(Stub& stub,
                     grpc::Status (Stub::*call)(grpc::ClientContext*, const Request&, Response*),
                     const Request& request, Response* response, absl::Duration timeout,
                     absl::string_view what) const;

  std::string name_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
};

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_ETCD_CLIENT_H_
