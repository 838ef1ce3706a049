// XenMonitor: a trap source on Xen's monitor interface (vm_event), for HVM
// guests. Xen puts each event on the domain's vm_event ring with the vCPU
// paused; XenMonitor turns it into a trap through the Dispatcher (the same
// policy/emulator path as every other trap source) and answers on the ring.
// Every request is answered and its vCPU released, also on errors and when
// the monitor stops.
//
// - WRMSR to a monitored MSR (VM_EVENT_REASON_MOV_TO_MSR): VM_EVENT_FLAG_DENY
//   when the outcome is an exception or an ignored write (Xen then drops the
//   write), else allow (Xen commits it to the guest's MSR state).
// - CPUID (VM_EVENT_REASON_CPUID): the trap's outcome is the answer, EAX..EDX
//   and RIP past the instruction, loaded with VM_EVENT_FLAG_SET_REGISTERS.
//   The "host" value a CPUID rule starts from is Xen's own answer for the
//   guest, which the request carries: a leaf the policy does not mention
//   gets exactly Xen's answer, a HOST rule masks Xen's answer, a CONST rule
//   replaces it.
//
// What Xen does not report stays Xen's: RDMSR (there is no read event in
// Xen 4.17), MSRs not monitored. README.md, "Real Xen", says who enforces
// what.
//
// The ring is behind the VmEventChannel seam (hosts/xen_vm_event.h):
// the libxenctrl/libxenevtchn implementation
// (hosts/xen_vm_event_libxc.cc) is the only code that sees Xen's
// headers; tests drive XenMonitor with a fake ring
// (tests/xen/xen_monitor_test.cc).
#ifndef PVEMU_SERVER_XEN_XEN_MONITOR_H_
#define PVEMU_SERVER_XEN_XEN_MONITOR_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "emulator/trap.h"
#include "dispatch/dispatch.h"
#include "server/xen/event_loop.h"
#include "server/xen/xen_vm_event.h"

namespace pvemu::server {

// The WRMSR trap a MOV_TO_MSR event stands for: instruction bytes 0f 30,
// RCX = the MSR, EDX:EAX = the new value, the rest of the registers, mode and
// CPL as Xen reported them.
emulator::Trap TrapFromMsrWrite(const VmEvent& event);

// The CPUID trap a CPUID event stands for: instruction bytes 0f a2, EAX/ECX
// = the event's leaf/subleaf (the request's RAX..RDX hold Xen's answer by
// then), the rest of the registers as Xen reported them.
emulator::Trap TrapFromCpuid(const VmEvent& event);

// Whether the write was ignored, not done: the policy's write action for
// `msr` in the snapshot is IGNORE, or it drops writes that change bits
// outside its writable mask and this one does (judged against the value Xen
// reports as the old one).
bool WriteIgnored(const policy::Snapshot& snapshot, const VmEvent& event);

struct XenMonitorStats {
  uint64_t events = 0;    // requests answered
  uint64_t msr_writes = 0;
  uint64_t denied = 0;
  uint64_t cpuid = 0;     // CPUID events answered from the policy
  uint64_t other = 0;     // requests of other reasons (answered, not decided)
};

// Thread-safety: Start/Stop/Poll from one controlling thread; stats() from
// any thread.
class XenMonitor {
 public:
  // `dispatcher` must outlive the monitor.
  XenMonitor(dispatch::Dispatcher& dispatcher, std::unique_ptr<VmEventChannel> channel);
  ~XenMonitor();  // Stop()
  XenMonitor(const XenMonitor&) = delete;
  XenMonitor& operator=(const XenMonitor&) = delete;

  // Answers every request on the ring now; returns how many. For tests and
  // for the loop.
  int Poll();
  // Runs the loop on a thread of its own: Wait, then Poll, until Stop.
  void Start();
  // Stops the loop, then answers whatever is still on the ring, so no vCPU
  // stays paused. Idempotent.
  void Stop();
  // The first error the loop met (the loop ends on it), or OK.
  absl::Status loop_status() const { return loop_.status(); }

  XenMonitorStats stats() const;

 private:
  class XenAnswerHost;  // the dispatcher's host, but CPUID is Xen's answer
  VmEventResponse Decide(const VmEvent& event);
  void DecideCpuid(const VmEvent& event, VmEventResponse* response);

  std::unique_ptr<XenAnswerHost> host_;
  std::unique_ptr<dispatch::Dispatcher::Session> session_;
  std::unique_ptr<VmEventChannel> channel_;
  EventLoop loop_;
  std::atomic<uint64_t> events_{0}, msr_writes_{0}, denied_{0}, cpuid_{0}, other_{0};
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_XEN_XEN_MONITOR_H_
