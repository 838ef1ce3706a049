// Audit events: accepted edits, traps whose rule asks for auditing, and
// unknown-MSR accesses (rate-limited per domain and MSR), fanned out to the
// AuditService.Watch streams.
//
// The hub is a TrapObserver, active while someone watches: with no
// subscriber the trap path pays its observer set's one relaxed load, and
// nothing is built or locked.
#ifndef PVEMU_DISPATCH_AUDIT_H_
#define PVEMU_DISPATCH_AUDIT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dispatch/observer.h"
#include "pvemu/v1/service.pb.h"

namespace pvemu::dispatch {

class AuditHub;

// One Watch stream's queue. Thread-safe.
class AuditSubscription {
 public:
  // Waits until an event is queued, the hub shuts down, or `deadline`.
  // Returns false on shutdown or timeout with nothing queued.
  bool Next(v1::AuditEvent* event, absl::Time deadline);
  // Whether the hub shut down (no more events will come).
  bool closed();

 private:
  friend class AuditHub;
  AuditSubscription(const v1::WatchRequest& filter) : filter_(filter) {}
  bool Wants(const v1::AuditEvent& event) const;

  const v1::WatchRequest filter_;
  absl::Mutex mu_;
  std::deque<v1::AuditEvent> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class AuditHub final : public TrapObserver {
 public:
  // Trap events all subscribers together may have waiting: each may hold its
  // share, kQueueBudget / subscribers, but at least kQueueFloor; beyond it a
  // slow watcher loses trap events (edits are never dropped). Without a
  // shared budget, every stream a reader opens (server/auth.h caps them per
  // peer) would add its own 65,536 events, about 10 MiB.
  static constexpr size_t kQueueBudget = 1 << 18;
  static constexpr size_t kQueueFloor = 1 << 10;
  // At most one unknown-MSR event per (domain, MSR) per this interval.
  static constexpr absl::Duration kUnknownMsrInterval = absl::Seconds(1);

  std::shared_ptr<AuditSubscription> Subscribe(const v1::WatchRequest& filter);
  void Unsubscribe(const std::shared_ptr<AuditSubscription>& sub);
  // Wakes every subscriber with "closed" (daemon shutdown).
  void Shutdown();

  // Publishes the traps whose rule asks for auditing and unknown-MSR
  // accesses (rate-limited); active while anyone watches.
  void OnTrap(const emulator::Trap& trap, const emulator::Outcome& outcome,
              const emulator::Instruction& insn, emulator::DecodeError error) override;

  // For /metrics: watchers now, and trap events not delivered since start.
  struct Stats {
    size_t watchers = 0;
    uint64_t rate_limited = 0;  // unknown-MSR events over kUnknownMsrInterval
    uint64_t dropped = 0;       // trap events lost to a slow watcher's full queue
  };
  Stats stats();

  void PublishEdit(v1::EditEvent edit);
  // `unknown` events are rate-limited per (domain, msr).
  void PublishTrap(v1::TrapEvent trap, bool unknown);
  // Trap events a trap source lost before they reached the hub (a KVM data
  // plane's full ring): `audited` ones every watcher's next trap event says
  // were suppressed (stats().dropped); `unknown` (unknown-MSR accesses)
  // count as rate-limited, which they would mostly have been.
  void CountLost(uint64_t audited, uint64_t unknown);

 private:
  void Deliver(v1::AuditEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<AuditSubscription>> subs_ ABSL_GUARDED_BY(mu_);
  struct RateState {
    absl::Time last;
    uint64_t suppressed = 0;
  };
  absl::flat_hash_map<uint64_t, RateState> unknown_rate_ ABSL_GUARDED_BY(mu_);
  uint64_t rate_limited_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_AUDIT_H_
