// What a rule targets: one MSR (`msr:`) or a range (`range { }`), resolved
// from names to indices. Public: the fleet composes and describes rules with
// it; the rest of the rule helpers are internal (rules.h).
#ifndef PVEMU_POLICY_RULE_TARGET_H_
#define PVEMU_POLICY_RULE_TARGET_H_

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

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_RULE_TARGET_H_
