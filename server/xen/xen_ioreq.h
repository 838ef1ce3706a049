// The port I/O a Xen ioreq server receives for one HVM domain, as
// XenPortServer (server/xen/xen_port_server.h) sees it: plain structs,
// no Xen headers, so the server is testable against a fake. The
// libxendevicemodel/libxenforeignmemory implementation is
// server/xen/xen_ioreq_libxc.cc.
//
// Why an ioreq server: Xen 4.17 has no vm_event for I/O instructions
// (VM_EVENT_REASON_IO_INSTRUCTION came in 4.18; 4.17's public/vm_event.h
// stops at VM_EVENT_REASON_VMEXIT, 15). What Xen does offer a dom0 helper is
// the device-model interface QEMU itself uses: an ioreq server claims port
// ranges (XEN_DMOP_map_io_range_to_ioreq_server), and a guest IN/OUT to a
// claimed port that Xen does not handle internally waits, vCPU blocked, for
// the server's answer. So on the claimed ports pvemu decides the value.
#ifndef PVEMU_SERVER_XEN_XEN_IOREQ_H_
#define PVEMU_SERVER_XEN_XEN_IOREQ_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "x86/port_span.h"

namespace pvemu::server {

// One port access from one vCPU (an ioreq_t of type IOREQ_TYPE_PIO).
struct PortAccess {
  uint32_t domain = 0;
  uint32_t vcpu = 0;
  uint16_t port = 0;
  uint8_t size = 1;     // bytes: 1, 2 or 4
  bool write = false;   // OUT (IOREQ_WRITE); else IN
  uint32_t value = 0;   // OUT: the value written (low `size` bytes)
  // INS/OUTS: the data is in guest memory (ioreq data_is_ptr), `count`
  // elements. pvemu does not map guest memory: decided and counted, the
  // memory is left as it is.
  bool string = false;
  uint32_t count = 1;
};

// An inclusive port range to claim.
using PortSpan = x86::PortSpan;

// Thread-safety: used by one thread at a time (XenPortServer's loop, or Stop).
class IoreqChannel {
 public:
  virtual ~IoreqChannel() = default;
  // The domain whose port I/O this is.
  virtual uint32_t domain() const = 0;
  // Blocks until Xen signals one of the vCPUs' event channels or
  // `timeout_ms` passes. OK in both cases; an error when the channel broke.
  virtual absl::Status Wait(int timeout_ms) = 0;
  // Takes the next pending port access; false when none is pending. Other
  // request types (Xen's mapcache invalidation, ...) are completed inside.
  virtual bool Next(PortAccess* access) = 0;
  // Completes the vCPU's pending access; for an IN, `value` is what the
  // guest reads (low `size` bytes), then notifies Xen.
  virtual void Respond(uint32_t vcpu, uint32_t value) = 0;
};

#ifdef PVEMU_HAVE_XEN
// Creates an ioreq server for `domain` (an HVM or PVH domain, not the
// caller), maps its ioreq page, claims `ports`, enables it and binds every
// vCPU's event channel. The destructor disables and destroys the server, so
// the ports go back to whoever had them. FailedPrecondition naming the failed
// call. In server/xen/xen_ioreq_libxc.cc.
absl::StatusOr<std::unique_ptr<IoreqChannel>> OpenXenIoreqChannel(
    uint32_t domain, absl::Span<const PortSpan> ports);
#endif

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_XEN_XEN_IOREQ_H_
