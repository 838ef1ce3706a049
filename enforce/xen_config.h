// Policy -> Xen xl.cfg (`pvemuctl xen-config`): what Xen 4.17 itself can
// enforce for one domain, as an xl.cfg fragment, and a report, rule by rule
// (FILE:LINE), of what the fragment cannot carry. docs/CLI.md has the
// contract; client/xen_config.cc says which Xen source backs each claim.
//
// Thread-safety: a pure function of its arguments.
#ifndef PVEMU_ENFORCE_XEN_CONFIG_H_
#define PVEMU_ENFORCE_XEN_CONFIG_H_

#include <string>
#include <vector>

#include "policy/compile.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::enforce {

// One thing Xen cannot express from xl.cfg.
struct XenReportLine {
  std::string origin;  // "FILE:LINE" of the rule (or "built-in: ..." for a default)
  std::string what;    // the rule, in a few words ("MSR 0x10 IA32_TIME_STAMP_COUNTER")
  std::string why;     // why Xen cannot, and where pvemu still can
};

struct XenConfig {
  // xl.cfg lines ("msr_relaxed=0\n", "cpuid=[...]\n", "tsc_mode=...\n"),
  // each ending in a newline; never empty (msr_relaxed is always decided).
  std::string fragment;
  std::vector<XenReportLine> report;
};

// The translation of `domain`'s effective policy on a host of `host_vendor`
// (a guest_vendor other than the host's is reported).
XenConfig TranslateForXen(const policy::DomainSnapshot& domain, pvemu::v1::Vendor host_vendor);

// The fragment, then one xl.cfg comment per report line
// ("# not expressible: ORIGIN: WHAT: WHY"), so the whole text can be
// appended to a domain's xl.cfg.
std::string XenConfigToText(const XenConfig& config);

}  // namespace pvemu::enforce

#endif  // PVEMU_ENFORCE_XEN_CONFIG_H_
