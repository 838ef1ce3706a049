// xen-monitor-probe: exercises pvemu's vm_event ring code
// (server/xen/xen_vm_event_libxc.cc, OpenXenMonitorChannel) against the real
// hypervisor in the e2e VM (tests/xen/run-e2e.sh). There is no toolstack
// there, so it makes the smallest domain Xen will monitor: an empty HVM
// (PVH-style) domain with one page for the vm_event ring and no code to run.
// Then: the channel opens (xc_monitor_enable, event channel bound, MOV_TO_MSR
// subscribed for 0x1b0 and 0xc0000080), Wait times out with no event, Next
// finds the ring empty, the channel closes (unsubscribe, xc_monitor_disable,
// unbind) and reopens subscribed to IA32_SYSENTER_CS (0x174). Then the domain
// runs 50 bytes of 32-bit code: WRMSR 0x174 <- 0x1234, RDMSR, store;
// WRMSR 0x174 <- 0x5678, RDMSR, store; HLT. The probe answers the first
// MOV_TO_MSR event with allow and the second with VM_EVENT_FLAG_DENY; it
// requires both events with the right MSR, values, RIP, mode and CPL, the
// vCPU released each time, and the allowed value read back; it reports
// whether Xen honoured the deny (the guest reads 0x1234 again) without
// requiring it. Opening a channel on dom0 (PV, the caller) fails with a
// message, no crash.
//
// Prints "monitor-probe: ..." lines and "MONITOR PROBE OK"; exit 0 on success.
#include <sys/mman.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

#include "server/xen/xen_vm_event.h"
#include "tests/xen/tiny_hvm.h"

namespace {

constexpr char kTool[] = "monitor-probe";
int Fail(const char* what) { return tiny_hvm::Fail(kTool, what); }

// The guest: 32-bit protected mode, flat segments, paging off, at 0x1000.
constexpr uint8_t kGuestCode[] = {
    0xb9, 0x74, 0x01, 0x00, 0x00,              // 1000 mov ecx, 0x174
    0xb8, 0x34, 0x12, 0x00, 0x00,              // 1005 mov eax, 0x1234
    0x31, 0xd2,                                // 100a xor edx, edx
    0x0f, 0x30,                                // 100c wrmsr   (event 1: allow)
    0x0f, 0x32,                                // 100e rdmsr
    0xa3, 0x00, 0x20, 0x00, 0x00,              // 1010 mov [0x2000], eax
    0xb8, 0x78, 0x56, 0x00, 0x00,              // 1015 mov eax, 0x5678
    0x31, 0xd2,                                // 101a xor edx, edx
    0x0f, 0x30,                                // 101c wrmsr   (event 2: deny)
    0x0f, 0x32,                                // 101e rdmsr
    0xa3, 0x04, 0x20, 0x00, 0x00,              // 1020 mov [0x2004], eax
    0xc7, 0x05, 0x08, 0x20, 0x00, 0x00,        // 1025 mov dword [0x2008],
    0xef, 0xbe, 0xad, 0xde,                    //        0xdeadbeef
    0xf4,                                      // 102f hlt (IF=0: vCPU down)
    0xeb, 0xfd,                                // 1030 jmp 102f
};

double Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// Runs the guest with `channel` answering its MOV_TO_MSR events; 0 when the
// events and what the guest read back are as expected.
int RunGuest(xc_interface* xch, uint32_t domid, pvemu::server::VmEventChannel& channel) {
  using pvemu::server::VmEvent;
  using pvemu::server::VmEventResponse;
  if (tiny_hvm::LoadCode(xch, kTool, domid, kGuestCode, sizeof(kGuestCode)) != 0) return 1;
  if (tiny_hvm::SetBootCpu(xch, kTool, domid, 0x1000, 0x3000) != 0) return 1;
  if (xc_domain_unpause(xch, domid) != 0) return Fail("xc_domain_unpause");
  std::printf("monitor-probe: guest running: wrmsr 0x174 <- 0x1234 (allow), <- 0x5678 (deny)\n");

  int events = 0, bad = 0;
  auto* data = static_cast<volatile uint32_t*>(
      xc_map_foreign_range(xch, domid, XC_PAGE_SIZE, PROT_READ, 2));
  if (data == nullptr) return Fail("xc_map_foreign_range (data page)");
  const double deadline = Now() + 60;
  while (Now() < deadline && data[2] != 0xdeadbeef) {
    if (absl::Status s = channel.Wait(100); !s.ok()) {
      std::printf("monitor-probe: wait: %s\n", std::string(s.message()).c_str());
      ++bad;
      break;
    }
    VmEvent e;
    while (channel.Next(&e)) {
      ++events;
      const bool deny = e.kind == VmEvent::Kind::kMsrWrite && e.new_value == 0x5678;
      std::printf("monitor-probe: event %d: %s vcpu %u msr %#x new %#llx old %#llx rip %#llx "
                  "mode %d cpl %u paused %d -> %s\n",
                  events, e.kind == VmEvent::Kind::kMsrWrite ? "MOV_TO_MSR" : "other", e.vcpu,
                  e.msr, static_cast<unsigned long long>(e.new_value),
                  static_cast<unsigned long long>(e.old_value),
                  static_cast<unsigned long long>(e.regs.rip), static_cast<int>(e.mode), e.cpl,
                  e.vcpu_paused, deny ? "DENY" : "allow");
      const uint64_t want_rip = events == 1 ? 0x100c : 0x101c;
      if (e.kind != VmEvent::Kind::kMsrWrite || e.msr != 0x174 || !e.vcpu_paused ||
          e.regs.rip != want_rip || e.mode != pvemu::emulator::Mode::k32 || e.cpl != 0 ||
          e.regs.gpr[pvemu::emulator::kRcx] != 0x174) {
        ++bad;
      }
      VmEventResponse r;
      r.vcpu = e.vcpu;
      r.release_vcpu = e.vcpu_paused;
      r.deny = deny;
      r.raw_reason = e.raw_reason;
      r.raw_altp2m_idx = e.raw_altp2m_idx;
      channel.Respond(r);
    }
  }
  const uint32_t first = data[0], second = data[1], done = data[2];
  munmap(const_cast<uint32_t*>(data), XC_PAGE_SIZE);
  std::printf("monitor-probe: guest %s; it read back %#x after the allowed write, %#x after "
              "the denied one; %d events\n",
              done == 0xdeadbeef ? "finished" : "did NOT finish", first, second, events);
  // Whether Xen honoured VM_EVENT_FLAG_DENY is reported, not required: under
  // QEMU's emulated AMD SVM, Xen 4.17 was seen to commit the denied write
  // (README.md, "Real Xen").
  std::printf("monitor-probe: VM_EVENT_FLAG_DENY %s\n",
              second == 0x1234 ? "honoured: the denied write did not happen"
                               : "NOT honoured by Xen on this host: the denied write happened");
  if (done != 0xdeadbeef || first != 0x1234 || events != 2 || bad != 0) return 1;
  return 0;
}

}  // namespace

int main() {
  using pvemu::server::OpenXenMonitorChannel;
  using pvemu::server::VmEvent;
  xc_interface* xch = xc_interface_open(nullptr, nullptr, 0);
  if (xch == nullptr) return Fail("xc_interface_open");

  uint32_t domid = 0;
  int rc = tiny_hvm::Create(xch, kTool, &domid);
  if (rc != 0 && domid == 0) {
    xc_interface_close(xch);
    return rc;
  }
  std::printf("monitor-probe: created empty HVM domain %u\n", domid);
  if (rc == 0) {
    const std::vector<uint32_t> msrs = {0x1b0, 0xc0000080};
    auto channel = OpenXenMonitorChannel(domid, msrs, /*cpuid=*/false);
    if (!channel.ok()) {
      std::printf("monitor-probe: OpenXenMonitorChannel(%u): %s\n", domid,
                  std::string(channel.status().message()).c_str());
      rc = 1;
    } else {
      std::printf("monitor-probe: vm_event ring open on domain %u, MOV_TO_MSR subscribed "
                  "for 0x1b0 and 0xc0000080\n", domid);
      absl::Status wait = (*channel)->Wait(50);
      VmEvent event;
      bool any = (*channel)->Next(&event);
      std::printf("monitor-probe: wait: %s; ring %s\n",
                  wait.ok() ? "ok (timed out)" : std::string(wait.message()).c_str(),
                  any ? "NOT empty" : "empty");
      if (!wait.ok() || any) rc = 1;
      channel->reset();
      std::printf("monitor-probe: channel closed (unsubscribed, monitor disabled)\n");
      // Closed means closed: Xen takes a new helper on the same domain.
      const std::vector<uint32_t> sysenter_cs = {0x174};
      auto again = OpenXenMonitorChannel(domid, sysenter_cs, /*cpuid=*/false);
      if (!again.ok()) {
        std::printf("monitor-probe: reopening after close: %s\n",
                    std::string(again.status().message()).c_str());
        rc = 1;
      } else {
        std::printf("monitor-probe: reopened after close, MOV_TO_MSR subscribed for 0x174\n");
        if (RunGuest(xch, domid, **again) != 0) rc = 1;
      }
    }
  }
  if (xc_domain_destroy(xch, domid) != 0) rc = Fail("xc_domain_destroy");

  // A PV domain (dom0, which is also the caller) cannot be monitored: a
  // message, never a crash.
  auto dom0 = OpenXenMonitorChannel(0, {}, /*cpuid=*/true);
  std::printf("monitor-probe: on dom0: %s\n",
              dom0.ok() ? "opened (unexpected)" : std::string(dom0.status().message()).c_str());
  if (dom0.ok()) rc = 1;

  xc_interface_close(xch);
  if (rc == 0) std::printf("MONITOR PROBE OK\n");
  return rc;
}
