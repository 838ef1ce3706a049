// The audited traps of a subscribed data plane on their way to pvemud: the
// traps whose rule asks for auditing and the unknown-MSR accesses, which
// `pvemuctl watch` on the daemon shows. vCPU threads push, the report thread
// drains into the next batch. Pushing is lock-free and allocation-free (a
// bounded multi-producer ring: each slot's sequence number says whose turn
// it is); a full ring drops the event and counts it, and never blocks a vCPU.
#ifndef PVEMU_KVM_AUDIT_RING_H_
#define PVEMU_KVM_AUDIT_RING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "dispatch/observer.h"
#include "pvemu/v1/service.pb.h"

namespace pvemu::kvm {

class AuditRing final : public dispatch::TrapObserver {
 public:
  static constexpr size_t kCapacity = 4096;  // a power of two

  AuditRing();
  // Delivery starts when the ring is added to a dispatcher and activated.
  void Activate() { SetActive(true); }

  void OnTrap(const emulator::Trap& trap, const emulator::Outcome& outcome,
              const emulator::Instruction& insn, emulator::DecodeError error) override;

  // Moves every waiting event into `batch` (one consumer at a time), and
  // the numbers dropped since the last Drain (events_dropped: audited
  // traps; unknown_events_dropped: unknown-MSR accesses).
  void Drain(v1::KvmTrapBatch* batch);

 private:
  struct Event {
    uint32_t domain, vcpu, msr_or_port;
    uint8_t outcome;
    bool unknown;
    absl::string_view mnemonic;  // a static string (emulator::Mnemonic)
  };
  struct Slot {
    std::atomic<uint64_t> sequence;
    Event event;
  };
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<uint64_t> enqueue_{0};
  alignas(64) uint64_t dequeue_ = 0;  // the consumer's alone
  uint64_t dropped_reported_ = 0;          // the consumer's alone
  uint64_t dropped_unknown_reported_ = 0;  // the consumer's alone
  std::atomic<uint64_t> dropped_{0};       // audited traps
  std::atomic<uint64_t> dropped_unknown_{0};
};

}  // namespace pvemu::kvm

#endif  // PVEMU_KVM_AUDIT_RING_H_
