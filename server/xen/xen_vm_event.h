// The vm_event ring of one domain, as XenMonitor (server/xen_monitor.h) sees
// it: plain structs for requests and responses, no Xen headers, so XenMonitor
// is testable against a fake ring. The libxenctrl/libxenevtchn
// implementation is hosts/xen_vm_event_libxc.cc.
#ifndef PVEMU_SERVER_XEN_XEN_VM_EVENT_H_
#define PVEMU_SERVER_XEN_XEN_VM_EVENT_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "emulator/trap.h"

namespace pvemu::server {

// One vm_event request, in pvemu's terms. The libxc channel fills it from a
// vm_event_request_t; `raw_*` are carried back unchanged in the response.
struct VmEvent {
  enum class Kind : uint8_t {
    kMsrWrite,  // VM_EVENT_REASON_MOV_TO_MSR
    kCpuid,     // VM_EVENT_REASON_CPUID
    kOther,     // any other reason: answered without a decision
  };
  Kind kind = Kind::kOther;
  uint32_t domain = 0;
  uint32_t vcpu = 0;
  bool vcpu_paused = false;  // VM_EVENT_FLAG_VCPU_PAUSED: must be released
  // MOV_TO_MSR.
  uint32_t msr = 0;
  uint64_t new_value = 0;
  uint64_t old_value = 0;
  // CPUID. Xen sends the event after it computed its own answer from the
  // domain's CPU policy and put it in the request's RAX..RDX, with RIP still
  // at the instruction (xen/arch/x86/hvm/hvm.c, hvm_vmexit_cpuid, then
  // hvm/monitor.c, hvm_monitor_cpuid: a sync event, so Xen does not advance
  // RIP; the answer must).
  uint32_t leaf = 0;
  uint32_t subleaf = 0;
  uint32_t insn_length = 0;
  // The vCPU's state at the event (from the request's x86 registers).
  emulator::Mode mode = emulator::Mode::k64;
  uint8_t cpl = 0;
  emulator::Regs regs;  // rip, rflags and the general registers
  // Copied back into the response (reason, altp2m view, version).
  uint32_t raw_reason = 0;
  uint32_t raw_altp2m_idx = 0;
  uint32_t raw_version = 0;
};

// The answer to one VmEvent.
struct VmEventResponse {
  uint32_t vcpu = 0;
  bool release_vcpu = false;  // VM_EVENT_FLAG_VCPU_PAUSED (unpause the vCPU)
  bool deny = false;          // VM_EVENT_FLAG_DENY (Xen drops the write)
  // VM_EVENT_FLAG_SET_REGISTERS: Xen loads the general registers, RIP and
  // RFLAGS from `regs` before the vCPU resumes (xen/arch/x86/vm_event.c,
  // vm_event_set_registers; hvm/vm_event.c applies them).
  bool set_registers = false;
  emulator::Regs regs;
  uint32_t raw_reason = 0;
  uint32_t raw_altp2m_idx = 0;
  uint32_t raw_version = 0;
};

// The vm_event ring of one domain and its event channel.
// Thread-safety: used by one thread at a time (XenMonitor's loop, or Stop()).
class VmEventChannel {
 public:
  virtual ~VmEventChannel() = default;
  // The domain whose ring this is.
  virtual uint32_t domain() const = 0;
  // Blocks until Xen signals the event channel or `timeout_ms` passes. OK in
  // both cases; an error when the channel broke (the domain went away).
  virtual absl::Status Wait(int timeout_ms) = 0;
  // Takes the next request off the ring; false when it is empty.
  virtual bool Next(VmEvent* event) = 0;
  // Puts one response on the ring and notifies Xen.
  virtual void Respond(const VmEventResponse& response) = 0;
};

#ifdef PVEMU_HAVE_XEN
// Enables Xen's monitor on `domain` (xc_monitor_enable), binds its event
// channel (libxenevtchn), subscribes to writes of `msrs`
// (xc_monitor_mov_to_msr) and, with `cpuid`, to every CPUID the domain
// executes (xc_monitor_cpuid). The channel's destructor unsubscribes,
// disables the monitor and unbinds. FailedPrecondition naming the failed call (the
// domain is PV, unknown, already monitored, ...). In
// hosts/xen_vm_event_libxc.cc.
absl::StatusOr<std::unique_ptr<VmEventChannel>> OpenXenMonitorChannel(
    uint32_t domain, absl::Span<const uint32_t> msrs, bool cpuid);
#endif

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_XEN_XEN_VM_EVENT_H_
