// Reading one ioreq slot that Xen marked READY, for the ioreq server
// (xen_ioreq_libxc.cc) and for xen_ring_fuzz, which drives the same code on a
// page of its own: what a slot says is decided here once, so the fuzzed code
// is the shipped code. Needs Xen's public header <xen/hvm/ioreq.h>.
#ifndef PVEMU_SERVER_XEN_IOREQ_SLOT_H_
#define PVEMU_SERVER_XEN_IOREQ_SLOT_H_

#include <xen/hvm/ioreq.h>

#include <atomic>
#include <cstdint>

#include "server/xen/xen_ioreq.h"

namespace pvemu::server {

enum class IoreqSlot {
  kPortAccess,  // *access holds it: decide, then Respond
  kDone,        // not a port access to decide: answered here, complete it
};

// Takes the READY slot `req` of `vcpu` (state to INPROCESS) and says what it
// is. A request that is not port I/O (a mapcache invalidation, ...) is not
// ours; a port access Xen never makes (a port above 0xffff, a size other
// than 1, 2 or 4) is not decided as whatever it would truncate to: a read
// gets all ones, as from no device.
inline IoreqSlot TakeIoreqSlot(volatile ioreq_t* req, uint32_t domain, uint32_t vcpu,
                               PortAccess* access) {
  // Read the request only after seeing READY (Xen wrote it before).
  std::atomic_thread_fence(std::memory_order_acquire);
  req->state = STATE_IOREQ_INPROCESS;
  if (req->type != IOREQ_TYPE_PIO) return IoreqSlot::kDone;
  if ((req->size != 1 && req->size != 2 && req->size != 4) || req->addr > 0xffff) {
    if (req->dir == IOREQ_READ && !req->data_is_ptr) req->data = ~uint64_t{0};
    return IoreqSlot::kDone;
  }
  *access = PortAccess();
  access->domain = domain;
  access->vcpu = vcpu;
  access->port = static_cast<uint16_t>(req->addr);
  access->size = static_cast<uint8_t>(req->size);
  access->write = req->dir == IOREQ_WRITE;
  access->string = req->data_is_ptr != 0;
  access->count = req->count;
  access->value = access->string ? 0 : static_cast<uint32_t>(req->data);
  return IoreqSlot::kPortAccess;
}

// The answer to a taken port access: an IN's value, then the state Xen
// resumes the vCPU on (the data before the state: Xen reads the data once
// it sees the state). `access` is what TakeIoreqSlot read, not the slot's
// fields again: the page is shared.
inline void AnswerIoreqSlot(volatile ioreq_t* req, const PortAccess& access, uint32_t value) {
  if (!access.write && !access.string) req->data = value;
}
inline void CompleteIoreqSlot(volatile ioreq_t* req) {
  std::atomic_thread_fence(std::memory_order_release);
  req->state = STATE_IORESP_READY;
}

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_XEN_IOREQ_SLOT_H_
