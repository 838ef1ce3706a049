// Setting or deleting one rule of a layer: the rule edit that the store
// (SetRule, DeleteRule) and the fleet's editor both make, so that a rule is
// matched the same way wherever it is edited.
#ifndef PVEMU_POLICY_RULE_EDIT_H_
#define PVEMU_POLICY_RULE_EDIT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::policy {

enum class RuleEditKind { kSet, kDelete };

// A layer's rule is `rule`'s when both have the same target (the same MSR,
// or the same range) and the same conditions (host_vendor, guest_vendor,
// hardware_domain); the action and values do not matter.
//
// kSet replaces that rule with `rule`, or appends `rule` when there is none.
// kDelete removes it; NotFound when there is none ("no rule for
// IA32_ENERGY_PERF_BIAS (0x1b0) with these conditions in WHERE"), where
// `where` names the layer for the operator ("the domain 3 layer", an etcd
// key). `layer` may be null for kDelete only (a layer that does not exist
// holds no rule). InvalidArgument when `rule`'s target does not resolve.
// Nothing is validated beyond that: the caller validates the policy.
absl::Status EditRuleInLayer(pvemu::v1::Layer* layer, const pvemu::v1::MsrRule& rule,
                             RuleEditKind kind, absl::string_view where);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_RULE_EDIT_H_
