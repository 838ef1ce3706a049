// Helpers on single rules shared by validation, compilation and the store
// (internal to pvemu_policy; not part of the API the server and CLI use).
#ifndef PVEMU_POLICY_RULES_H_
#define PVEMU_POLICY_RULES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::policy {

// The MSR indices a rule targets, [first, last] inclusive.
struct Target {
  uint32_t first = 0;
  uint32_t last = 0;
  bool single = true;  // `msr:` rather than `range:`
  uint64_t width() const { return uint64_t{last} - first + 1; }
};

// Resolves names; InvalidArgument (message without position) for a bad name,
// a missing target or first > last.
absl::StatusOr<Target> ResolveTarget(const pvemu::v1::MsrRule& rule);

// "IA32_ENERGY_PERF_BIAS (0x1b0)" or "range 0xc1-0xc8".
std::string DescribeTarget(const Target& t);

// How many of host_vendor, guest_vendor, hardware_domain a rule sets.
int ConditionCount(const pvemu::v1::MsrRule& rule);

// Whether some host/domain could satisfy both rules' conditions.
bool ConditionsCompatible(const pvemu::v1::MsrRule& a, const pvemu::v1::MsrRule& b);

// Whether the two rules have the same conditions (the store's identity of a
// rule, with the target).
bool SameConditions(const pvemu::v1::MsrRule& a, const pvemu::v1::MsrRule& b);

// Whether `rule` applies on this host to this domain.
bool ConditionsMatch(const pvemu::v1::MsrRule& rule, pvemu::v1::Vendor host_vendor,
                     pvemu::v1::Vendor guest_vendor, bool hardware_domain);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_RULES_H_
