// Fleet mode's watcher: keeps this host's layer set in step with etcd.
//
// List then watch (Kubernetes' reflector, etcd's clientv3 watch): the host
// reads exactly its keys (FleetKeys::HostKeys) at one revision and applies
// them (Applier), then watches those keys from the next revision. Each event
// makes it read its keys again at the event's revision, so what it applies
// is always one whole revision, even when one Txn changed several keys.
// After a disconnect the watch resumes from the revision after the last one
// seen, so no revision is skipped; when etcd has compacted past it, the host
// reads everything anew at the current revision and watches from there.
//
// Thread-safety: Start and Stop from one thread; the work runs on its own
// thread, never on a trap path (traps read the Store's snapshot only).
#ifndef PVEMU_FLEET_WATCHER_H_
#define PVEMU_FLEET_WATCHER_H_

#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/client_context.h"
#include "fleet/applier.h"
#include "fleet/etcd_client.h"

namespace pvemu::fleet {

class Watcher {
 public:
  Watcher(const EtcdClient& etcd, Applier& applier) : etcd_(etcd), applier_(applier) {}
  ~Watcher() { Stop(); }

  void Start();
  // Ends the watch and joins the thread (bounded by one call's timeout).
  void Stop();

  // Reads this host's keys at `revision` (0: the current one) and applies
  // them; returns the revision read. OUT_OF_RANGE if it was compacted.
  absl::StatusOr<int64_t> Sync(int64_t revision);

 private:
  void Run();
  // Watches from `start` until the stream fails, etcd compacted past
  // `start` (OUT_OF_RANGE) or Stop.
  absl::Status WatchFrom(int64_t start);
  bool stopping() const;
  // Sleeps for `d` unless stopped first.
  void Pause(absl::Duration d);

  const EtcdClient& etcd_;
  Applier& applier_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;  // the watch stream's
};

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_WATCHER_H_
