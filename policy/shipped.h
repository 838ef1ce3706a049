// Policies shipped with pvemu, embedded at build time (and installed as files
// under DATADIR/pvemu/policies/, where an operator may add more). Immutable;
// safe from any thread. Host profiles live beside the sim host
// (hosts/profiles.h).
#ifndef PVEMU_POLICY_SHIPPED_H_
#define PVEMU_POLICY_SHIPPED_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "policy/loader.h"

namespace pvemu::policy {

// The text of a shipped policy ("default", "xen-pre-4.15",
// "kvm-ignore-msrs", "kvm"), or "" if there is none by that name.
absl::string_view ShippedPolicy(absl::string_view name);
std::vector<absl::string_view> ShippedPolicyNames();

// What --policy names (pvemud and pvemuctl): an existing file (not a
// directory), or anything with a '/' or ending in ".textproto", is a file
// (LoadPolicyFile's errors); otherwise a policy's name, shipped (embedded)
// or installed as DATADIR/pvemu/policies/NAME.textproto (base/data_files.h).
// An unknown name is InvalidArgument listing the shipped and installed names.
absl::StatusOr<LoadedPolicy> LoadPolicyByNameOrFile(const std::string& name_or_path);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_SHIPPED_H_
