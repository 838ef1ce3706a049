// pvemuctl kvm-filter: the KVM MSR filter a domain's policy compiles to
// (kvm/msr_filter.h), from --policy offline or from the daemon's current
// policy, so an operator sees which MSRs leave the kernel before a VM runs.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/domain_policy_view.h"
#include "enforce/kvm_msr_filter.h"

namespace pvemu::client {
namespace {

absl::Status KvmFilter() {
  ASSIGN_OR_RETURN(uint32_t domain, ParseNumber32(absl::GetFlag(FLAGS_domain), "--domain"));
  ASSIGN_OR_RETURN(std::shared_ptr<const policy::Snapshot> snapshot, SnapshotFromFlags());
  ASSIGN_OR_RETURN(enforce::MsrFilter filter, KvmFilterFor(*snapshot, domain));
  const bool online = !absl::GetFlag(FLAGS_server).empty();
  const std::string vendor = v1::Vendor_Name(snapshot->host_vendor());
  if (JsonOutput()) {
    // Who the filter is for, then FilterToJson's members as they are.
    JsonLine head;
    head.Num("domain", domain).Str("host_vendor", vendor);
    if (online) head.Num("generation", static_cast<double>(snapshot->generation()));
    const std::string json = enforce::FilterToJson(filter);
    absl::string_view members = json;
    absl::ConsumePrefix(&members, "{");
    absl::ConsumeSuffix(&members, "\n");
    const bool empty = members == "}";
    std::printf("{%s%s%s\n", head.RenderMembers().c_str(), empty ? "" : ",",
                std::string(members).c_str());
    return absl::OkStatus();
  }
  // Who the filter is for: vendor rules make it differ between hosts.
  std::printf("domain %u, host vendor %s%s\n", domain, vendor.c_str(),
              online ? absl::StrCat(", pvemud generation ", snapshot->generation()).c_str() : "");
  std::string text = enforce::FilterToText(filter);
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  std::fputs(text.c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace

int RunKvmFilter(const Args& args) { return RunDomainPolicyView(args, "kvm-filter", KvmFilter); }

}  // namespace pvemu::client
