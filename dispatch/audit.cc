#include "dispatch/audit.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace pvemu::dispatch {

bool AuditSubscription::Wants(const v1::AuditEvent& event) const {
  const bool all = !filter_.edits() && !filter_.traps() && !filter_.unknown_msrs();
  if (all) return true;
  if (event.has_edit()) return filter_.edits();
  if (event.trap().reason() == "unknown-msr") return filter_.unknown_msrs();
  return filter_.traps();
}

bool AuditSubscription::Next(v1::AuditEvent* event, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || closed_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (queue_.empty()) return false;
  *event = std::move(queue_.front());
  queue_.pop_front();
  // Trap events this watcher lost to a full queue are told with the next
  // trap event it does get.
  if (event->has_trap() && dropped_ > 0) {
    event->mutable_trap()->set_suppressed(event->trap().suppressed() + dropped_);
    dropped_ = 0;
  }
  return true;
}

bool AuditSubscription::closed() {
  absl::MutexLock lock(&mu_);
  return closed_;
}

std::shared_ptr<AuditSubscription> AuditHub::Subscribe(const v1::WatchRequest& filter) {
  std::shared_ptr<AuditSubscription> sub(new AuditSubscription(filter));
  absl::MutexLock lock(&mu_);
  subs_.push_back(sub);
  SetActive(true);
  return sub;
}

void AuditHub::Unsubscribe(const std::shared_ptr<AuditSubscription>& sub) {
  absl::MutexLock lock(&mu_);
  subs_.erase(std::remove(subs_.begin(), subs_.end(), sub), subs_.end());
  SetActive(!subs_.empty());
}

void AuditHub::OnTrap(const emulator::Trap& trap, const emulator::Outcome& out,
                      const emulator::Instruction& insn, emulator::DecodeError error) {
  if (!out.audit && !out.unknown_msr) return;
  v1::TrapEvent event;
  event.set_domain(trap.domain);
  event.set_vcpu(trap.vcpu);
  event.set_reason(out.audit ? "audit-rule" : "unknown-msr");
  if (error == emulator::DecodeError::kOk) {
    event.set_mnemonic(std::string(emulator::Mnemonic(insn)));
  }
  event.set_msr(out.msr_or_port);
  event.set_outcome(static_cast<v1::Outcome::Kind>(out.kind));
  PublishTrap(std::move(event), !out.audit);
}

void AuditHub::Shutdown() {
  absl::MutexLock lock(&mu_);
  for (auto& sub : subs_) {
    absl::MutexLock sub_lock(&sub->mu_);
    sub->closed_ = true;
  }
}

void AuditHub::Deliver(v1::AuditEvent event) {
  event.set_sequence(++sequence_);
  event.set_unix_nanos(absl::ToUnixNanos(absl::Now()));
  const size_t limit = std::max(kQueueFloor, kQueueBudget / std::max<size_t>(subs_.size(), 1));
  for (auto& sub : subs_) {
    if (!sub->Wants(event)) continue;
    absl::MutexLock sub_lock(&sub->mu_);
    if (event.has_trap() && sub->queue_.size() >= limit) {
      ++sub->dropped_;  // a slow watcher loses trap events, never edits
      ++dropped_;
      continue;
    }
    sub->queue_.push_back(event);
  }
}

AuditHub::Stats AuditHub::stats() {
  absl::MutexLock lock(&mu_);
  return Stats{subs_.size(), rate_limited_, dropped_};
}

void AuditHub::PublishEdit(v1::EditEvent edit) {
  v1::AuditEvent event;
  *event.mutable_edit() = std::move(edit);
  absl::MutexLock lock(&mu_);
  Deliver(std::move(event));
}

void AuditHub::CountLost(uint64_t audited, uint64_t unknown) {
  absl::MutexLock lock(&mu_);
  rate_limited_ += unknown;
  dropped_ += audited;
  if (audited == 0) return;
  for (auto& sub : subs_) {
    absl::MutexLock sub_lock(&sub->mu_);
    sub->dropped_ += audited;
  }
}

void AuditHub::PublishTrap(v1::TrapEvent trap, bool unknown) {
  absl::MutexLock lock(&mu_);
  if (subs_.empty()) return;
  if (unknown) {
    // A guest probing MSRs in a loop must not flood the watchers.
    RateState& rate = unknown_rate_[uint64_t{trap.domain()} << 32 | trap.msr()];
    absl::Time now = absl::Now();
    if (now - rate.last < kUnknownMsrInterval) {
      ++rate.suppressed;
      ++rate_limited_;
      return;
    }
    rate.last = now;
    trap.set_suppressed(rate.suppressed);
    rate.suppressed = 0;
    if (unknown_rate_.size() > 65536) unknown_rate_.clear();  // bound memory
  }
  v1::AuditEvent event;
  *event.mutable_trap() = std::move(trap);
  Deliver(std::move(event));
}

}  // namespace pvemu::dispatch
