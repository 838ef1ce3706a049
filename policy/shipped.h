// Policies shipped with pvemu, embedded at build time (and installed as files
// under DATADIR/pvemu/policies/). Immutable; safe from any thread. Host
// profiles live beside the sim host (server/hosts/profiles.h).
#ifndef PVEMU_POLICY_SHIPPED_H_
#define PVEMU_POLICY_SHIPPED_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace pvemu::policy {

// The text of a shipped policy ("default", "xen-pre-4.15",
// "kvm-ignore-msrs"), or "" if there is none by that name.
absl::string_view ShippedPolicy(absl::string_view name);
std::vector<absl::string_view> ShippedPolicyNames();

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_SHIPPED_H_
