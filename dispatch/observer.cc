#include "dispatch/observer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace pvemu::dispatch {
namespace {

// Membership and activity change rarely (a watcher comes or goes, a capture
// starts or stops); one mutex for all of them keeps the counts exact.
absl::Mutex& ObserverMutex() {
  static absl::Mutex mu(absl::kConstInit);
  return mu;
}

}  // namespace

TrapObserver::~TrapObserver() {
  std::vector<ObserverSet*> sets;
  {
    absl::MutexLock lock(&ObserverMutex());
    sets = sets_;
  }
  for (ObserverSet* set : sets) set->Remove(this);
}

void TrapObserver::SetActive(bool on) {
  absl::MutexLock lock(&ObserverMutex());
  if (active_.load(std::memory_order_relaxed) == on) return;
  active_.store(on, std::memory_order_release);
  for (ObserverSet* set : sets_) set->active_members_.fetch_add(on ? 1 : -1, std::memory_order_relaxed);
}

ObserverSet::~ObserverSet() {
  for (auto& slot : slots_) {
    if (TrapObserver* observer = slot.load(std::memory_order_relaxed)) Remove(observer);
  }
}

absl::Status ObserverSet::Add(TrapObserver* observer) {
  absl::MutexLock lock(&ObserverMutex());
  std::atomic<TrapObserver*>* free_slot = nullptr;
  for (auto& slot : slots_) {
    TrapObserver* member = slot.load(std::memory_order_relaxed);
    if (member == observer) return absl::OkStatus();
    if (member == nullptr && free_slot == nullptr) free_slot = &slot;
  }
  if (free_slot == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a dispatcher takes at most ", kMaxObservers, " trap observers; remove one first"));
  }
  free_slot->store(observer, std::memory_order_release);
  observer->sets_.push_back(this);
  if (observer->active_.load(std::memory_order_relaxed)) {
    active_members_.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void ObserverSet::Remove(TrapObserver* observer) {
  absl::MutexLock lock(&ObserverMutex());
  for (auto& slot : slots_) {
    if (slot.load(std::memory_order_relaxed) != observer) continue;
    slot.store(nullptr, std::memory_order_release);
    auto& sets = observer->sets_;
    sets.erase(std::remove(sets.begin(), sets.end(), this), sets.end());
    if (observer->active_.load(std::memory_order_relaxed)) {
      active_members_.fetch_sub(1, std::memory_order_relaxed);
    }
    return;
  }
}

void ObserverSet::Notify(const emulator::Trap& trap, const emulator::Outcome& outcome,
                         const emulator::Instruction& insn, emulator::DecodeError error) const {
  for (const auto& slot : slots_) {
    TrapObserver* observer = slot.load(std::memory_order_acquire);
    if (observer != nullptr && observer->active()) observer->OnTrap(trap, outcome, insn, error);
  }
}

}  // namespace pvemu::dispatch
