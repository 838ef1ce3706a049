#include "policy/rules.h"

#include "absl/strings/str_format.h"
#include "x86/msr_catalog.h"
#include "base/status_macros.h"

namespace pvemu::policy {

using pvemu::v1::MsrRule;

absl::StatusOr<Target> ResolveTarget(const MsrRule& rule) {
  Target t;
  switch (rule.target_case()) {
    case MsrRule::kMsr: {
      ASSIGN_OR_RETURN(t.first, x86::ParseMsr(rule.msr()));
      t.last = t.first;
      t.single = true;
      return t;
    }
    case MsrRule::kRange: {
      ASSIGN_OR_RETURN(t.first, x86::ParseMsr(rule.range().first()));
      ASSIGN_OR_RETURN(t.last, x86::ParseMsr(rule.range().last()));
      t.single = false;
      if (t.first > t.last) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "range first 0x%x is greater than last 0x%x; swap them", t.first, t.last));
      }
      return t;
    }
    default:
      return absl::InvalidArgumentError(
          "rule has no target; set `msr: NAME` or `range { first: .. last: .. }`");
  }
}

std::string DescribeTarget(const Target& t) {
  if (t.single) return x86::MsrDisplay(t.first);
  return absl::StrFormat("range 0x%x-0x%x", t.first, t.last);
}

int ConditionCount(const MsrRule& rule) {
  return (rule.host_vendor() != pvemu::v1::VENDOR_UNSPECIFIED ? 1 : 0) +
         (rule.guest_vendor() != pvemu::v1::VENDOR_UNSPECIFIED ? 1 : 0) +
         (rule.has_hardware_domain() ? 1 : 0);
}

namespace {
bool VendorsCompatible(pvemu::v1::Vendor a, pvemu::v1::Vendor b) {
  return a == pvemu::v1::VENDOR_UNSPECIFIED || b == pvemu::v1::VENDOR_UNSPECIFIED || a == b;
}
}  // namespace

bool ConditionsCompatible(const MsrRule& a, const MsrRule& b) {
  if (!VendorsCompatible(a.host_vendor(), b.host_vendor())) return false;
  if (!VendorsCompatible(a.guest_vendor(), b.guest_vendor())) return false;
  if (a.has_hardware_domain() && b.has_hardware_domain() &&
      a.hardware_domain() != b.hardware_domain()) {
    return false;
  }
  return true;
}

bool SameConditions(const MsrRule& a, const MsrRule& b) {
  return a.host_vendor() == b.host_vendor() && a.guest_vendor() == b.guest_vendor() &&
         a.has_hardware_domain() == b.has_hardware_domain() &&
         (!a.has_hardware_domain() || a.hardware_domain() == b.hardware_domain());
}

bool ConditionsMatch(const MsrRule& rule, pvemu::v1::Vendor host_vendor,
                     pvemu::v1::Vendor guest_vendor, bool hardware_domain) {
  if (rule.host_vendor() != pvemu::v1::VENDOR_UNSPECIFIED && rule.host_vendor() != host_vendor) {
    return false;
  }
  if (rule.guest_vendor() != pvemu::v1::VENDOR_UNSPECIFIED &&
      rule.guest_vendor() != guest_vendor) {
    return false;
  }
  if (rule.has_hardware_domain() && rule.hardware_domain() != hardware_domain) return false;
  return true;
}

}  // namespace pvemu::policy
