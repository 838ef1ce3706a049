#include "enforce/xen_enforcement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pvemu::enforce {
namespace {

bool Monitored(const XenMonitoring& m, uint32_t domain) {
  return std::find(m.domains.begin(), m.domains.end(), domain) != m.domains.end();
}

}  // namespace

std::string XenMsrNote(const XenMonitoring& m, uint32_t domain, uint32_t msr, bool write) {
  if (!write) {
    // xen/include/public/vm_event.h (4.17) has MOV_TO_MSR and no read event.
    return "advisory on Xen: Xen has no event for RDMSR, so Xen's own MSR handling answers "
           "reads (its msr_relaxed setting for unknown MSRs; see pvemuctl xen-config)";
  }
  const bool msr_monitored = std::find(m.msrs.begin(), m.msrs.end(), msr) != m.msrs.end();
  if (Monitored(m, domain) && msr_monitored) {
    return absl::StrFormat(
        "enforced on Xen for writes: pvemud decides domain %u's writes of 0x%x through "
        "vm_event (--monitor-domain, --monitor-msrs); a denied write is answered with "
        "VM_EVENT_FLAG_DENY for Xen to drop (HVM/PVH domains only)",
        domain, msr);
  }
  return absl::StrFormat(
      "advisory on Xen: this pvemud does not monitor %s; Xen decides the write itself. "
      "pvemud --monitor-domain=%u --monitor-msrs=0x%x would decide it (HVM/PVH domains only)",
      Monitored(m, domain) ? absl::StrFormat("writes of 0x%x", msr)
                           : absl::StrCat("domain ", domain),
      domain, msr);
}

std::string XenPortNote(const XenMonitoring& m, uint32_t domain, uint16_t port, uint8_t width) {
  const uint32_t last = uint32_t{port} + width - 1;
  const bool claimed = std::any_of(m.ports.begin(), m.ports.end(), [&](const x86::PortSpan& s) {
    return s.first <= port && last <= s.last;
  });
  if (Monitored(m, domain) && claimed) {
    // xen/arch/x86/hvm/io.c and intercept.c: Xen's own port handlers run
    // before any ioreq server is asked.
    return absl::StrFormat(
        "enforced on Xen: pvemud's ioreq server answers domain %u's accesses to port 0x%x "
        "(--monitor-ports), unless Xen emulates that port itself (PIT, PIC, RTC, PM timer, "
        "the 0xe9 debug console), whose handlers Xen runs first",
        domain, port);
  }
  return absl::StrFormat(
      "advisory on Xen: Xen 4.17 has no event for I/O instructions and no pvemud ioreq server "
      "claims port 0x%x of domain %u, so Xen or the domain's device model answers it; "
      "pvemud --monitor-domain=%u --monitor-ports=0x%x would",
      port, domain, domain, port);
}

}  // namespace pvemu::enforce
