// Fleet mode's registration and liveness in etcd:
//   PREFIX/hosts/ID   (no lease) what the host is: classes, vendor, pvemu's
//                     version, first seen (kept across restarts);
//   PREFIX/status/ID  (a ~10 s lease, kept alive) what it serves: applied
//                     revision, last error, stale_since.
// A host that stops (or loses etcd) lets its lease expire, and `fleet
// status` shows it as not alive.
//
// Thread-safety: Start and Stop from one thread; the work runs on its own.
#ifndef PVEMU_FLEET_STATUS_KEEPER_H_
#define PVEMU_FLEET_STATUS_KEEPER_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "pvemu/v1/fleet.pb.h"
#include "fleet/applier.h"
#include "fleet/etcd_client.h"

namespace pvemu::fleet {

inline constexpr int64_t kStatusLeaseSeconds = 10;

class StatusKeeper {
 public:
  StatusKeeper(const EtcdClient& etcd, const Applier& applier, v1::FleetRegistration self)
      : etcd_(etcd), applier_(applier), self_(std::move(self)) {}
  ~StatusKeeper() { Stop(); }

  void Start();
  // Stops and revokes the lease (best effort, bounded), so the host shows
  // as gone at once rather than after its TTL.
  void Stop();

  // The status the host would write now.
  v1::FleetHostStatus CurrentStatus() const;

 private:
  void Run();
  // One round: register if not yet, keep the lease, write the status if it
  // changed. Errors are retried next round.
  absl::Status Round();

  const EtcdClient& etcd_;
  const Applier& applier_;
  v1::FleetRegistration self_;
  bool registered_ = false;
  int64_t lease_ = 0;
  std::string written_;  // the status value last written under lease_
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

// JSON for the registration and status values (protobuf's JSON mapping,
// with the proto field names).
std::string ToJson(const google::protobuf::Message& message);
absl::Status FromJson(absl::string_view json, google::protobuf::Message* message);

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_STATUS_KEEPER_H_
