// pvemuctl xen-config: the xl.cfg fragment for what Xen itself can enforce
// of a domain's policy, and a report of the rules it cannot
// (client/xen_config.h), from --policy offline or from the daemon's policy.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/domain_policy_view.h"
#include "enforce/xen_config.h"

namespace pvemu::client {
namespace {

absl::Status XenConfigCommand() {
  ASSIGN_OR_RETURN(uint32_t domain, ParseNumber32(absl::GetFlag(FLAGS_domain), "--domain"));
  ASSIGN_OR_RETURN(std::shared_ptr<const policy::Snapshot> snapshot, SnapshotFromFlags());
  const enforce::XenConfig config = enforce::TranslateForXen(snapshot->ForDomain(domain), snapshot->host_vendor());
  const bool online = !absl::GetFlag(FLAGS_server).empty();
  const std::string vendor = v1::Vendor_Name(snapshot->host_vendor());
  if (JsonOutput()) {
    std::vector<std::string> report;
    for (const enforce::XenReportLine& r : config.report) {
      JsonLine line;
      line.Str("origin", r.origin).Str("what", r.what).Str("why", r.why);
      report.push_back(line.Render());
    }
    JsonLine out;
    out.Num("domain", domain).Str("host_vendor", vendor);
    if (online) out.Num("generation", static_cast<double>(snapshot->generation()));
    out.Str("fragment", config.fragment)
        .Raw("report", absl::StrCat("[", absl::StrJoin(report, ","), "]"));
    out.Print();
    return absl::OkStatus();
  }
  // A comment first, so the whole output stays valid xl.cfg: who it is for
  // (vendor rules make it differ between hosts).
  std::printf("# pvemuctl xen-config: domain %u, host vendor %s%s\n", domain, vendor.c_str(),
              online ? absl::StrCat(", pvemud generation ", snapshot->generation()).c_str() : "");
  std::fputs(enforce::XenConfigToText(config).c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace

int RunXenConfig(const Args& args) { return RunDomainPolicyView(args, "xen-config", XenConfigCommand); }

}  // namespace pvemu::client
