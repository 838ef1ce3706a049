// Trap observers: whatever wants to see handled traps besides the trap
// source (the audit hub, a capture file). The trap path pays one relaxed load
// (active_count), OR-ed with its other switches into one branch that predicts
// while no observer is active; everything else happens out of line, only for
// active observers.
#ifndef PVEMU_DISPATCH_OBSERVER_H_
#define PVEMU_DISPATCH_OBSERVER_H_

#include <atomic>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "emulator/decoder.h"
#include "emulator/instruction.h"
#include "emulator/trap.h"

namespace pvemu::dispatch {

class ObserverSet;

// Thread-safety: OnTrap runs on trap-source threads, concurrently; SetActive,
// and membership changes, from any thread.
class TrapObserver {
 public:
  TrapObserver() = default;
  TrapObserver(const TrapObserver&) = delete;
  TrapObserver& operator=(const TrapObserver&) = delete;
  // Leaves every set it is in. Traps in flight may still be reporting to it,
  // so an observer must outlive the traps of any dispatcher it was added to.
  virtual ~TrapObserver();

  // One handled trap, while this observer is active. Off the fast path: may
  // lock and allocate.
  virtual void OnTrap(const emulator::Trap& trap, const emulator::Outcome& outcome,
                      const emulator::Instruction& insn, emulator::DecodeError error) = 0;

  bool active() const { return active_.load(std::memory_order_acquire); }

 protected:
  // Turns delivery on (a watcher subscribed, a capture opened) or off.
  void SetActive(bool on);

 private:
  friend class ObserverSet;
  std::atomic<bool> active_{false};
  std::vector<ObserverSet*> sets_;  // guarded by the observer mutex (observer.cc)
};

// A dispatcher's observers: a few fixed slots, and the number of active
// members, which is all the trap path reads.
class ObserverSet {
 public:
  static constexpr int kMaxObservers = 4;

  ObserverSet() = default;
  ObserverSet(const ObserverSet&) = delete;
  ObserverSet& operator=(const ObserverSet&) = delete;
  ~ObserverSet();  // removes every member

  // Adds `observer`; adding a member again does nothing. ResourceExhausted
  // when all kMaxObservers slots are taken.
  absl::Status Add(TrapObserver* observer);
  void Remove(TrapObserver* observer);

  // The trap path's test: how many members are active (never negative), so
  // that it ORs with the session's other switches into one branch.
  int active_count() const { return active_members_.load(std::memory_order_relaxed); }

  // Reports one trap to every active member (none: nothing). Out of line:
  // the trap path calls it only after active_count() said some were.
  ABSL_ATTRIBUTE_NOINLINE void Notify(const emulator::Trap& trap, const emulator::Outcome& outcome,
                                      const emulator::Instruction& insn,
                                      emulator::DecodeError error) const;

 private:
  friend class TrapObserver;
  std::atomic<TrapObserver*> slots_[kMaxObservers] = {};
  std::atomic<int> active_members_{0};
};

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_OBSERVER_H_
