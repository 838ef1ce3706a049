// Helpers on single rules shared by validation, compilation and the store
// (internal to pvemu_policy; not part of the API the server and CLI use:
// they have rule_target.h and rule_edit.h).
#ifndef PVEMU_POLICY_RULES_H_
#define PVEMU_POLICY_RULES_H_

#include <cstdint>

#include "policy/rule_target.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::policy {

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
