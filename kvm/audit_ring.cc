#include "kvm/audit_ring.h"

#include <string>

#include "emulator/decoder.h"

namespace pvemu::kvm {

static_assert((AuditRing::kCapacity & (AuditRing::kCapacity - 1)) == 0);

AuditRing::AuditRing() : slots_(new Slot[kCapacity]) {
  for (size_t i = 0; i < kCapacity; ++i) slots_[i].sequence.store(i, std::memory_order_relaxed);
}

void AuditRing::OnTrap(const emulator::Trap& trap, const emulator::Outcome& out,
                       const emulator::Instruction& insn, emulator::DecodeError error) {
  if (!out.audit && !out.unknown_msr) return;
  uint64_t pos = enqueue_.load(std::memory_order_relaxed);
  Slot* slot;
  for (;;) {
    slot = &slots_[pos & (kCapacity - 1)];
    const uint64_t seq = slot->sequence.load(std::memory_order_acquire);
    const int64_t turn = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
    if (turn == 0) {
      if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
    } else if (turn < 0) {
      // Full: the consumer is behind. An audited trap's loss is told to the
      // watchers; an unknown-MSR one is as if rate-limited.
      (out.audit ? dropped_ : dropped_unknown_).fetch_add(1, std::memory_order_relaxed);
      return;
    } else {
      pos = enqueue_.load(std::memory_order_relaxed);
    }
  }
  slot->event = Event{trap.domain,
                      trap.vcpu,
                      out.msr_or_port,
                      static_cast<uint8_t>(out.kind),
                      !out.audit,
                      error == emulator::DecodeError::kOk ? emulator::Mnemonic(insn)
                                                          : absl::string_view()};
  slot->sequence.store(pos + 1, std::memory_order_release);
}

void AuditRing::Drain(v1::KvmTrapBatch* batch) {
  const uint64_t dropped = dropped_.load(std::memory_order_relaxed);
  batch->set_events_dropped(batch->events_dropped() + (dropped - dropped_reported_));
  dropped_reported_ = dropped;
  const uint64_t unknown = dropped_unknown_.load(std::memory_order_relaxed);
  batch->set_unknown_events_dropped(batch->unknown_events_dropped() +
                                    (unknown - dropped_unknown_reported_));
  dropped_unknown_reported_ = unknown;
  for (;;) {
    Slot& slot = slots_[dequeue_ & (kCapacity - 1)];
    if (slot.sequence.load(std::memory_order_acquire) != dequeue_ + 1) return;
    const Event& e = slot.event;
    v1::TrapEvent* event = batch->add_events();
    event->set_domain(e.domain);
    event->set_vcpu(e.vcpu);
    event->set_reason(e.unknown ? "unknown-msr" : "audit-rule");
    event->set_mnemonic(std::string(e.mnemonic));
    event->set_msr(e.msr_or_port);
    event->set_outcome(static_cast<v1::Outcome::Kind>(e.outcome));
    slot.sequence.store(dequeue_ + kCapacity, std::memory_order_release);
    ++dequeue_;
  }
}

}  // namespace pvemu::kvm
