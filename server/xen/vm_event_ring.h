// Reading requests from and writing answers to one domain's vm_event ring,
// for the monitor's channel (xen_vm_event_libxc.cc) and for xen_ring_fuzz,
// which drives the same code on a ring of its own: what a request says and
// how an answer is put are decided here once, so the fuzzed code is the
// shipped code (as server/xen/ioreq_slot.h is for the ioreq page).
//
// Needs Xen's public <xen/vm_event.h> with __XEN_TOOLS__ (its ring types
// are for tools only) and xen_wmb, as <xenctrl.h> provides them.
#ifndef PVEMU_SERVER_XEN_VM_EVENT_RING_H_
#define PVEMU_SERVER_XEN_VM_EVENT_RING_H_

#include <cstdint>
#include <cstring>

#include "emulator/trap.h"
#include "server/xen/xen_vm_event.h"

namespace pvemu::server {

// The guest's mode from the registers Xen sends: the selector's compressed
// attribute bits (vm_event_x86_selector_reg.ar) are type 0-3, S 4, DPL 5-6,
// P 7, AVL 8, L 9, D/B 10, G 11.
inline emulator::Mode VmEventMode(const vm_event_regs_x86& r) {
  if ((r.cr0 & 1) == 0) return emulator::Mode::kReal;
  const bool lma = (r.msr_efer >> 10) & 1;
  const uint32_t ar = r.cs.ar;
  if (lma && ((ar >> 9) & 1)) return emulator::Mode::k64;
  return ((ar >> 10) & 1) ? emulator::Mode::k32 : emulator::Mode::k16;
}

enum class VmEventTake {
  kTaken,     // *req holds the next request; answer it before taking another
  kEmpty,     // nothing new on the ring
  kOverflow,  // the producer index is more than a ring ahead of the answers
};

// Takes the next request off `ring` into *req. A producer index more than a
// ring ahead of our responses is a lie (the page is Xen's, but a corrupted
// one must not make the monitor decide 2^32 stale slots): nothing is read
// until it is sane again (found reading the ring for xen_ring_fuzz).
inline VmEventTake TakeVmEventRequest(vm_event_back_ring_t* ring, vm_event_request_t* req) {
  if (!RING_HAS_UNCONSUMED_REQUESTS(ring)) return VmEventTake::kEmpty;
  if (RING_REQUEST_PROD_OVERFLOW(ring, ring->sring->req_prod)) return VmEventTake::kOverflow;
  RING_IDX cons = ring->req_cons;
  std::memcpy(req, RING_GET_REQUEST(ring, cons), sizeof(*req));
  ++cons;
  ring->req_cons = cons;
  ring->sring->req_event = cons + 1;
  return VmEventTake::kTaken;
}

// What `req` of `domain` asks, for XenMonitor. A request in another
// interface version, or for a reason the monitor does not decide, is kOther
// (answered by releasing the vCPU, nothing more).
inline VmEvent VmEventOfRequest(const vm_event_request_t& req, uint32_t domain) {
  VmEvent event;
  event.domain = domain;
  event.vcpu = req.vcpu_id;
  event.vcpu_paused = (req.flags & VM_EVENT_FLAG_VCPU_PAUSED) != 0;
  event.raw_reason = req.reason;
  event.raw_altp2m_idx = req.altp2m_idx;
  event.raw_version = req.version;
  if (req.version != VM_EVENT_INTERFACE_VERSION) {
    event.kind = VmEvent::Kind::kOther;
    return event;
  }
  switch (req.reason) {
    case VM_EVENT_REASON_MOV_TO_MSR:
      event.kind = VmEvent::Kind::kMsrWrite;
      event.msr = static_cast<uint32_t>(req.u.mov_to_msr.msr);
      event.new_value = req.u.mov_to_msr.new_value;
      event.old_value = req.u.mov_to_msr.old_value;
      break;
    case VM_EVENT_REASON_CPUID:
      event.kind = VmEvent::Kind::kCpuid;
      event.leaf = req.u.cpuid.leaf;
      event.subleaf = req.u.cpuid.subleaf;
      event.insn_length = req.u.cpuid.insn_length;
      break;
    default:
      event.kind = VmEvent::Kind::kOther;
      return event;
  }
  const vm_event_regs_x86& r = req.data.regs.x86;
  event.mode = VmEventMode(r);
  event.cpl = static_cast<uint8_t>((r.ss.ar >> 5) & 3);
  const uint64_t gpr[16] = {r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi,
                            r.r8,  r.r9,  r.r10, r.r11, r.r12, r.r13, r.r14, r.r15};
  for (int i = 0; i < 16; ++i) event.regs.gpr[i] = gpr[i];
  event.regs.rip = r.rip;
  event.regs.rflags = r.rflags;
  return event;
}

// The answer Xen reads for `response`.
inline vm_event_response_t VmEventResponseOf(const VmEventResponse& response) {
  vm_event_response_t rsp;
  std::memset(&rsp, 0, sizeof(rsp));
  rsp.version = VM_EVENT_INTERFACE_VERSION;
  rsp.vcpu_id = response.vcpu;
  rsp.reason = response.raw_reason;
  rsp.altp2m_idx = static_cast<uint16_t>(response.raw_altp2m_idx);
  if (response.release_vcpu) rsp.flags |= VM_EVENT_FLAG_VCPU_PAUSED;
  if (response.deny) rsp.flags |= VM_EVENT_FLAG_DENY;
  if (response.set_registers) {
    // Xen copies the whole x86 register block and applies the general
    // registers, RIP and RFLAGS from it (hvm/vm_event.c,
    // hvm_vm_event_set_registers); the rest is not read.
    rsp.flags |= VM_EVENT_FLAG_SET_REGISTERS;
    vm_event_regs_x86& r = rsp.data.regs.x86;
    const uint64_t* g = response.regs.gpr;
    r.rax = g[0], r.rcx = g[1], r.rdx = g[2], r.rbx = g[3];
    r.rsp = g[4], r.rbp = g[5], r.rsi = g[6], r.rdi = g[7];
    r.r8 = g[8], r.r9 = g[9], r.r10 = g[10], r.r11 = g[11];
    r.r12 = g[12], r.r13 = g[13], r.r14 = g[14], r.r15 = g[15];
    r.rip = response.regs.rip;
    r.rflags = response.regs.rflags;
  }
  return rsp;
}

// Puts `rsp` in the next response slot and publishes it (the caller then
// notifies Xen's event channel).
inline void PutVmEventResponse(vm_event_back_ring_t* ring, const vm_event_response_t& rsp) {
  RING_IDX prod = ring->rsp_prod_pvt;
  std::memcpy(RING_GET_RESPONSE(ring, prod), &rsp, sizeof(rsp));
  ++prod;
  ring->rsp_prod_pvt = prod;
  RING_PUSH_RESPONSES(ring);
}

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_XEN_VM_EVENT_RING_H_
