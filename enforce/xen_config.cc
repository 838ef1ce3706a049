#include "enforce/xen_config.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "x86/msr_catalog.h"

namespace pvemu::enforce {
namespace {

using pvemu::v1::CpuidEntry;
using pvemu::v1::TscPolicy;

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

// What pvemu still does for the MSRs Xen keeps to itself: under
// `pvemud --monitor-domain` (docs/CLI.md, "Xen monitoring") Xen's vm_event
// reports an HVM/PVH guest's writes of the MSRs in --monitor-msrs (the
// mov-to-MSR monitor) and has no read event.
constexpr char kMsrWhy[] =
    "Xen decides MSR accesses in the hypervisor and xl.cfg has no per-MSR setting; "
    "under pvemud --monitor-domain pvemu decides this rule's writes for HVM/PVH guests "
    "(vm_event, for the MSRs in --monitor-msrs), never its reads";

// xl.cfg `ioports=` (docs/man/xl.cfg.5.pod.in, "ioports=[ \"IOPORT_RANGE\" ...]")
// passes host ports through to the guest: it grants hardware, it does not
// deny. A pvemu io_port range is the set of ports the guest may reach; every
// other port is pvemu's to answer.
constexpr char kPortWhy[] =
    "xl.cfg ioports= passes host ports through to the guest, it is no deny list; under "
    "pvemud --monitor-domain pvemu answers the ports claimed with --monitor-ports from the "
    "domain's io_port ranges through an ioreq server (see --monitor-domain)";

// Every CPUID of a monitored HVM/PVH domain reaches pvemud (vm_event CPUID,
// docs/CLI.md "Xen monitoring"), whatever Xen's CPU policy holds.
constexpr char kCpuidMonitor[] =
    "; under pvemud --monitor-domain pvemu answers it for HVM/PVH guests (vm_event CPUID)";

// The leaves Xen's CPU policy keeps subleaves for (xen/lib/x86/cpuid.c,
// x86_cpuid_copy_to_buffer: 0x4 cache, 0x7 features, 0xb topology, 0xd
// xstate); every other leaf is serialised with XEN_CPUID_NO_SUBLEAF.
// xc_cpuid_xend_policy (tools/libs/guest/xg_cpuid_x86.c) looks each xl.cfg
// entry up by (leaf, subleaf) in that serialised policy and fails the domain
// build with "Missing leaf" when it is absent, so an entry must name a
// subleaf exactly when Xen keeps subleaves for its leaf.
bool XenHasSubleaves(uint32_t leaf) {
  return leaf == 0x4 || leaf == 0x7 || leaf == 0xb || leaf == 0xd;
}

// One register as a libxl "xend" bit string (tools/libs/light/libxl_cpuid.c,
// libxl_cpuid_parse_config_xend: exactly 32 characters, bit 31 first;
// xc_cpuid_xend_policy reads '1' set, '0' clear, 'x' the default policy's
// bit). CONST: every bit from `set`. HOST: pvemu gives (host & ~clear) | set,
// so a set bit is '1', a cleared one '0', and the rest are left to Xen.
std::string Bits(const policy::CpuidDecision& d, int reg) {
  std::string out(32, 'x');
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t mask = uint32_t{1} << bit;
    char& c = out[31 - bit];
    if (d.source == CpuidEntry::CONST) {
      c = (d.set[reg] & mask) != 0 ? '1' : '0';
    } else if ((d.set[reg] & mask) != 0) {
      c = '1';
    } else if ((d.clear[reg] & mask) != 0) {
      c = '0';
    }
  }
  return out;
}

std::string LeafName(const policy::DomainSnapshot::CpuidRule& r) {
  return r.any_subleaf ? absl::StrCat("CPUID leaf ", Hex(r.leaf))
                       : absl::StrCat("CPUID leaf ", Hex(r.leaf), " subleaf ", Hex(r.subleaf));
}

// The xl.cfg `cpuid=` list items, reporting the entries Xen cannot take.
std::vector<std::string> CpuidItems(const policy::DomainSnapshot& domain,
                                    std::vector<XenReportLine>* report) {
  static constexpr const char* kRegs[] = {"eax", "ebx", "ecx", "edx"};
  std::vector<std::string> items;
  for (const policy::DomainSnapshot::CpuidRule& r : domain.CpuidRules()) {
    const policy::CpuidDecision& d = *r.decision;
    std::vector<std::string> regs;
    for (int reg = 0; reg < 4; ++reg) {
      std::string bits = Bits(d, reg);
      if (bits != std::string(32, 'x')) regs.push_back(absl::StrCat(kRegs[reg], "=", bits));
    }
    if (regs.empty()) continue;  // the host's leaf unchanged: nothing to carry
    if (r.leaf >= 0x40000000 && r.leaf <= 0x4fffffff) {
      // xen/lib/x86/cpuid.c serialises only 0x40000000 and 0x40000100, and
      // only their EAX limit (hv_limit, hv2_limit); Xen writes the signature
      // and the other hypervisor leaves itself (xen/arch/x86/traps.c,
      // cpuid_hypervisor_leaves).
      report->push_back({d.origin, LeafName(r),
                         absl::StrCat("Xen builds the hypervisor leaves 0x40000000-0x4fffffff "
                                      "itself; xl.cfg cpuid= reaches none of them",
                                      kCpuidMonitor)});
      continue;
    }
    if (r.leaf == 0) {
      // Leaf 0 holds the maximum basic leaf and the vendor string; xl.cfg
      // has no guest vendor, and Xen does not emulate another vendor's CPU
      // (its MSR and instruction handling follow the host's vendor).
      report->push_back({d.origin, LeafName(r),
                         absl::StrCat("leaf 0 is the maximum basic leaf and the vendor string: "
                                      "Xen sizes the guest's leaves and keeps the host's vendor "
                                      "itself; xl.cfg cannot change them",
                                      kCpuidMonitor)});
      continue;
    }
    if (r.any_subleaf == XenHasSubleaves(r.leaf)) {
      report->push_back(
          {d.origin, LeafName(r),
           absl::StrCat(
               r.any_subleaf
                   ? "Xen keeps this leaf per subleaf and xl.cfg cpuid= must name one (a list "
                     "item without a subleaf fails the domain build with \"Missing leaf\"); "
                     "name the subleaves in the rule"
                   : "Xen keeps this leaf without subleaves, so xl.cfg cpuid= cannot give one "
                     "subleaf alone (a list item with a subleaf fails the domain build with "
                     "\"Missing leaf\"); drop the subleaf from the rule",
               kCpuidMonitor)});
      continue;
    }
    items.push_back(absl::StrCat(
        "\"", Hex(r.leaf), r.any_subleaf ? "" : absl::StrCat(",", Hex(r.subleaf)), ":",
        absl::StrJoin(regs, ","), "\""));
  }
  return items;
}

// Every MSR rule, one report line per rule (FILE:LINE), with the MSRs it
// decides, as kvm/msr_filter.cc names them: the origins of the read and write
// halves of each named span. The unknown_msr fallback is msr_relaxed's; the
// built-in vPMU-off rule (PMU MSRs #GP) is returned (or null) for a line of
// its own, last in the report.
const policy::RuleOrigin* ReportMsrRules(const policy::DomainSnapshot& domain,
                                         std::vector<XenReportLine>* report) {
  std::vector<std::string> order;  // origins in order of their first MSR
  std::map<std::string, std::vector<std::pair<uint32_t, uint32_t>>> spans;
  const policy::RuleOrigin* vpmu_off = nullptr;
  for (const policy::DomainSnapshot::NamedSpan& s : domain.NamedMsrs()) {
    for (uint32_t index : {s.entry->read_origin, s.entry->write_origin}) {
      const policy::RuleOrigin& o = domain.origin(index);
      if (o.layer == "unknown-msr") continue;
      if (o.layer == "vpmu-off") {
        vpmu_off = &o;
        continue;
      }
      auto [it, inserted] = spans.try_emplace(o.source);
      if (inserted) order.push_back(o.source);
      auto& list = it->second;
      if (!list.empty() && uint64_t{s.first} <= uint64_t{list.back().second} + 1) {
        list.back().second = std::max(list.back().second, s.last);
      } else {
        list.emplace_back(s.first, s.last);
      }
    }
  }
  for (const std::string& origin : order) {
    std::vector<std::string> parts;
    for (const auto& [first, last] : spans[origin]) {
      const absl::string_view a = x86::MsrName(first);
      if (first == last) {
        parts.push_back(a.empty() ? Hex(first) : absl::StrCat(Hex(first), " ", a));
      } else {
        parts.push_back(absl::StrCat(Hex(first), "-", Hex(last)));
      }
    }
    const bool one = parts.size() == 1 && spans[origin][0].first == spans[origin][0].second;
    report->push_back(
        {origin, absl::StrCat(one ? "MSR " : "MSRs ", absl::StrJoin(parts, ", ")), kMsrWhy});
  }
  return vpmu_off;
}

// tsc_mode= (docs/man/xl.cfg.5.pod.in; xl parses it with
// libxl_tsc_mode_from_string: "default", "always_emulate", "native",
// "native_paravirt"). xl.cfg has no TSC offset or frequency: 4.17's
// libxl_domain_build_info has tsc_mode and no vtsc frequency.
std::string TscLine(const policy::DomainSnapshot& domain, std::vector<XenReportLine>* report) {
  const policy::TscConfig& tsc = domain.tsc();
  const std::string& origin = domain.setting_origins().tsc;
  if (origin.empty()) return "";  // no layer sets it: leave Xen's default
  if (tsc.offset != 0) {
    report->push_back({origin, absl::StrCat("TSC offset ", tsc.offset),
                       "xl.cfg has no TSC offset (Xen sets the guest's TSC offset itself)"});
  }
  if (tsc.mode == TscPolicy::EMULATED) {
    if (tsc.frequency_khz != 0) {
      report->push_back({origin, absl::StrCat("TSC frequency ", tsc.frequency_khz, " kHz"),
                         "xl.cfg has no TSC frequency: tsc_mode=\"always_emulate\" keeps the "
                         "frequency Xen chooses"});
    }
    return "tsc_mode=\"always_emulate\"\n";
  }
  return "tsc_mode=\"native\"\n";
}

}  // namespace

XenConfig TranslateForXen(const policy::DomainSnapshot& domain, pvemu::v1::Vendor host_vendor) {
  XenConfig out;
  const policy::RuleOrigin& unknown = domain.origin(0);  // the unknown_msr mode's
  // msr_relaxed= (docs/man/xl.cfg.5.pod.in, Xen >= 4.15; xl_parse.c reads it
  // with xlu_cfg_get_defbool into arch_x86.msr_relaxed).
  switch (domain.unknown_msr()) {
    case pvemu::v1::UNKNOWN_RELAXED:
      out.fragment += "msr_relaxed=1\n";
      // xen/arch/x86/pv/emul-priv-op.c read_msr/write_msr and the VMX/SVM
      // intercepts: relaxed mode reads 0 and ignores writes only where the
      // host's own RDMSR does not fault.
      out.report.push_back({unknown.source, "unknown_msr: UNKNOWN_RELAXED",
                            "Xen's msr_relaxed=1 still injects #GP for an MSR the host itself "
                            "does not have; pvemu reads 0 and ignores writes for every unknown "
                            "MSR"});
      break;
    case pvemu::v1::UNKNOWN_HOST:
      out.fragment += "msr_relaxed=0\n";
      out.report.push_back({unknown.source, "unknown_msr: UNKNOWN_HOST",
                            "Xen >= 4.15 never passes host MSR values to a guest (msr_relaxed "
                            "reads 0); the fragment keeps Xen's #GP"});
      break;
    default:
      out.fragment += "msr_relaxed=0\n";
  }

  std::vector<std::string> items = CpuidItems(domain, &out.report);
  if (!items.empty()) {
    out.fragment += absl::StrCat("cpuid=[\n    ", absl::StrJoin(items, ",\n    "), "\n]\n");
  }
  out.fragment += TscLine(domain, &out.report);

  const policy::RuleOrigin* vpmu_off = ReportMsrRules(domain, &out.report);
  for (const policy::PortGrant& g : domain.port_grants()) {
    out.report.push_back(
        {g.origin,
         g.first == g.last ? absl::StrCat("io_port ", Hex(g.first))
                           : absl::StrCat("io_port ", Hex(g.first), "-", Hex(g.last)),
         kPortWhy});
  }
  const std::string& vendor_origin = domain.setting_origins().guest_vendor;
  if (!vendor_origin.empty() && domain.guest_vendor() != host_vendor) {
    out.report.push_back({vendor_origin,
                          absl::StrCat("guest_vendor: ", v1::Vendor_Name(domain.guest_vendor())),
                          absl::StrCat("xl.cfg has no guest vendor: a Xen guest sees the host's (",
                                       v1::Vendor_Name(host_vendor), ")")});
  }
  // vpmu= in 4.17's xl.cfg.5.pod.in is "Currently ARM only"; an x86 guest's
  // vPMU follows Xen's `vpmu=` boot option for every domain (off by default,
  // docs/misc/xen-command-line.pandoc), so only a vPMU the policy turns on
  // needs saying.
  if (domain.vpmu()) {
    out.report.push_back({domain.setting_origins().vpmu, "vpmu: true",
                          "xl.cfg vpmu= is ARM only in Xen 4.17; an x86 guest's vPMU follows "
                          "Xen's vpmu= boot option, for every domain"});
  }
  if (vpmu_off != nullptr) {
    out.report.push_back(
        {vpmu_off->source, "PMU MSRs #GP while the domain's vPMU is off", kMsrWhy});
  }
  return out;
}

std::string XenConfigToText(const XenConfig& config) {
  std::string out = config.fragment;
  for (const XenReportLine& r : config.report) {
    absl::StrAppend(&out, "# not expressible: ", r.origin, ": ", r.what, ": ", r.why, "\n");
  }
  return out;
}

}  // namespace pvemu::enforce
