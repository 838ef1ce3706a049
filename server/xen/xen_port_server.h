// XenPortServer: a trap source for port I/O on Xen: the ioreq server
// (server/xen/xen_ioreq.h) of one HVM domain claims the ports given to
// `pvemud --monitor-ports`, and each IN/OUT a vCPU makes to them becomes an
// IN/OUT trap through the Dispatcher, decided by the domain's io_port policy
// on the same path as every other trap:
// - a port the policy does not grant: IN reads all ones, OUT is dropped;
// - a port it grants: the host's device there, and Xen's host models none,
//   so the same, but counted and audited as allowed. The ports claimed are
//   taken from whatever device model had them (QEMU), so claim only ports
//   pvemu should own.
// Ports Xen emulates itself (the PIT, PIC, RTC, ACPI PM timer, the 0xe9
// debug console, ...) never reach an ioreq server: Xen's own handlers run
// first (xen/arch/x86/hvm/intercept.c, hvm_io_intercept), so there a pvemu
// decision is advisory.
#ifndef PVEMU_SERVER_XEN_XEN_PORT_SERVER_H_
#define PVEMU_SERVER_XEN_XEN_PORT_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "dispatch/dispatch.h"
#include "emulator/trap.h"
#include "server/xen/event_loop.h"
#include "server/xen/xen_ioreq.h"

namespace pvemu::server {

// The IN/OUT trap a port access stands for: IN AL/AX/EAX,DX or OUT DX,... in
// 32-bit mode at CPL 0 (an ioreq carries no vCPU state; the device-model
// interface only sees accesses Xen already let through, so the privilege
// checks are done), RDX = the port, RAX = the value written.
emulator::Trap TrapFromPortAccess(const PortAccess& access);

// What an IN reads after `outcome`, the answer to `trap` (low `size` bytes; all ones when the
// access was not completed by a device).
uint32_t PortReadValue(const PortAccess& access, const emulator::Trap& trap,
                       const emulator::Outcome& outcome);

struct XenPortServerStats {
  uint64_t accesses = 0;  // answered
  uint64_t denied = 0;    // outside the domain's io_port ranges
  uint64_t strings = 0;   // INS/OUTS: decided, guest memory untouched
};

// Thread-safety: Start/Stop/Poll from one controlling thread; stats() from
// any thread.
class XenPortServer {
 public:
  // `dispatcher` must outlive the server.
  XenPortServer(dispatch::Dispatcher& dispatcher, std::unique_ptr<IoreqChannel> channel);
  ~XenPortServer();  // Stop()
  XenPortServer(const XenPortServer&) = delete;
  XenPortServer& operator=(const XenPortServer&) = delete;

  // Answers every pending access now; returns how many.
  int Poll();
  void Start();
  // Stops the loop and answers what is pending, so no vCPU stays blocked.
  void Stop();
  absl::Status loop_status() const { return loop_.status(); }
  XenPortServerStats stats() const;

 private:
  std::unique_ptr<dispatch::Dispatcher::Session> session_;
  std::unique_ptr<IoreqChannel> channel_;
  EventLoop loop_;
  std::atomic<uint64_t> accesses_{0}, denied_{0}, strings_{0};
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_XEN_XEN_PORT_SERVER_H_
