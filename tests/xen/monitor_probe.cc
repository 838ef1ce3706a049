// xen-monitor-probe: exercises pvemu's vm_event ring code
// (server/hosts/xen_vm_event_libxc.cc, OpenXenMonitorChannel) against the real
// hypervisor in the e2e VM (tests/xen/run-e2e.sh). There is no toolstack
// there, so it makes the smallest domain Xen will monitor: an empty HVM
// (PVH-style) domain with one page for the vm_event ring and no code to run.
// Then: the channel opens (xc_monitor_enable, event channel bound, MOV_TO_MSR
// subscribed for 0x1b0 and 0xc0000080), Wait times out with no event, Next
// finds the ring empty, the channel closes (unsubscribe, xc_monitor_disable,
// unbind); opening one on dom0 (PV, itself) fails with a message, no crash.
//
// Prints "monitor-probe: ..." lines and "MONITOR PROBE OK"; exit 0 on success.
extern "C" {
#include <xenctrl.h>
#include <xen/hvm/params.h>
}

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "server/hosts/xen_vm_event.h"

namespace {

int Fail(const char* what) {
  std::printf("monitor-probe: %s failed: %s\n", what, std::strerror(errno));
  return 1;
}

}  // namespace

int main() {
  using pvemu::server::OpenXenMonitorChannel;
  using pvemu::server::VmEvent;
  xc_interface* xch = xc_interface_open(nullptr, nullptr, 0);
  if (xch == nullptr) return Fail("xc_interface_open");

  xen_domctl_createdomain config;
  std::memset(&config, 0, sizeof(config));
  config.flags = XEN_DOMCTL_CDF_hvm | XEN_DOMCTL_CDF_hap;
  config.max_vcpus = 1;
  config.max_evtchn_port = 1023;
  config.max_grant_frames = -1;
  config.max_maptrack_frames = -1;
  config.grant_opts = XEN_DOMCTL_GRANT_version(1);
  config.arch.emulation_flags = XEN_X86_EMU_LAPIC;  // PVH-style: no device model
  uint32_t domid = 0;
  if (xc_domain_create(xch, &domid, &config) != 0) {
    int rc = Fail("xc_domain_create (HVM, HAP)");
    xc_interface_close(xch);
    return rc;
  }
  std::printf("monitor-probe: created empty HVM domain %u\n", domid);

  int rc = 0;
  const xen_pfn_t ring_gfn = 0x100;
  xen_pfn_t gfn = ring_gfn;
  // XEN_DOMCTL_max_vcpus still allocates the vCPUs in 4.17, and vm_event
  // refuses a domain without vCPU 0.
  if (xc_domain_max_vcpus(xch, domid, 1) != 0) {
    rc = Fail("xc_domain_max_vcpus");
  } else if (xc_domain_setmaxmem(xch, domid, 4096) != 0) {
    rc = Fail("xc_domain_setmaxmem");
  } else if (xc_set_paging_mempool_size(xch, domid, 4 << 20) != 0 && errno != EOPNOTSUPP) {
    rc = Fail("xc_set_paging_mempool_size");
  } else if (xc_domain_populate_physmap_exact(xch, domid, 1, 0, 0, &gfn) != 0) {
    rc = Fail("xc_domain_populate_physmap_exact");
  } else if (xc_hvm_param_set(xch, domid, HVM_PARAM_MONITOR_RING_PFN, ring_gfn) != 0) {
    rc = Fail("xc_hvm_param_set(HVM_PARAM_MONITOR_RING_PFN)");
  } else {
    const std::vector<uint32_t> msrs = {0x1b0, 0xc0000080};
    auto channel = OpenXenMonitorChannel(domid, msrs);
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
      auto again = OpenXenMonitorChannel(domid, msrs);
      if (!again.ok()) {
        std::printf("monitor-probe: reopening after close: %s\n",
                    std::string(again.status().message()).c_str());
        rc = 1;
      } else {
        std::printf("monitor-probe: reopened after close\n");
      }
    }
  }
  if (xc_domain_destroy(xch, domid) != 0) rc = Fail("xc_domain_destroy");

  // A PV domain (dom0, which is also the caller) cannot be monitored: a
  // message, never a crash.
  auto dom0 = OpenXenMonitorChannel(0, {});
  std::printf("monitor-probe: on dom0: %s\n",
              dom0.ok() ? "opened (unexpected)" : std::string(dom0.status().message()).c_str());
  if (dom0.ok()) rc = 1;

  xc_interface_close(xch);
  if (rc == 0) std::printf("MONITOR PROBE OK\n");
  return rc;
}
