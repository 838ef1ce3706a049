// Fleet mode's watcher: keeps this host's layer set in step with etcd.
//
// List then watch (Kubernetes' reflector, etcd's clientv3 watch): the host
// reads exactly its keys (FleetKeys::HostKeys) at one revision and applies
// them (Applier), then watches the fleet's policy prefix from the next
// revision and keeps its keys' values from each event (a watch cache). One
// watch over the prefix, not one per key, because etcd never splits one
// revision's events across the responses of one watcher: a response leaves
// the cache at a whole revision, so what the host applies is always one
// whole revision, even when one Txn changed several keys. Keys that are not
// this host's (other hosts' and classes' layers) are dropped as they come.
// After a disconnect the watch resumes from the revision after the last one
// seen, so no revision is skipped; when etcd has compacted past it, the host
// reads everything anew at the current revision and watches from there.
//
// The cache also serves an edit's read of one of this host's keys
// (Cached): the edit's Txn compares the mod_revision it read, so a cache a
// little behind costs a retry, never a lost update (Editor).
//
// Thread-safety: Start and Stop from one thread; the work runs on its own
// threads, never on a trap path (traps read the Store's snapshot only);
// Cached from any thread.
#ifndef PVEMU_FLEET_WATCHER_H_
#define PVEMU_FLEET_WATCHER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
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

  // Reads this host's keys at `revision` (0: the current one) into the
  // cache and applies them; returns the revision read. OUT_OF_RANGE if it
  // was compacted.
  absl::StatusOr<int64_t> Sync(int64_t revision);

  // One of this host's keys as the watch last saw it: `kv` nullopt when the
  // key does not exist. nullopt when the cache cannot answer: `key` is not
  // this host's, or the watch is not running (read etcd then).
  struct CachedValue {
    std::optional<KeyValue> kv;
  };
  std::optional<CachedValue> Cached(const std::string& key) const;

 private:
  void Run();
  // Watches from `start` until the stream fails, etcd compacted past
  // `start` (OUT_OF_RANGE) or Stop.
  absl::Status WatchFrom(int64_t start);
  // Takes one watch response into the cache (the reader thread).
  void TakeEvents(const etcdserverpb::WatchResponse& response);
  bool stopping() const;
  // Sleeps for `d` unless stopped first.
  void Pause(absl::Duration d);

  const EtcdClient& etcd_;
  Applier& applier_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;  // the watch stream's

  // The watch cache: this host's keys as of `revision`, filled by a list
  // (Sync) and kept by the watch's reader thread; the watcher thread applies
  // it when `changed` passes what it applied.
  mutable absl::Mutex cache_mu_;
  std::map<std::string, KeyValue> cache_ ABSL_GUARDED_BY(cache_mu_);
  int64_t cache_revision_ ABSL_GUARDED_BY(cache_mu_) = 0;  // every event up to here is in
  int64_t changed_ ABSL_GUARDED_BY(cache_mu_) = 0;  // the newest revision that changed a key
  bool live_ ABSL_GUARDED_BY(cache_mu_) = false;    // a watch is created and reading
  bool ended_ ABSL_GUARDED_BY(cache_mu_) = false;   // the watch stream ended ...
  absl::Status why_ ABSL_GUARDED_BY(cache_mu_);     // ... for this reason (OK: it just ended)
};

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_WATCHER_H_
