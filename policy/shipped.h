// Policies and host profiles shipped with pvemu, embedded at build time (and
// installed as files under DATADIR/pvemu/). Immutable; safe from any thread.
#ifndef PVEMU_POLICY_SHIPPED_H_
#define PVEMU_POLICY_SHIPPED_H_

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"

namespace pvemu::policy {

struct ShippedFile {
  absl::string_view kind;  // "policy" or "profile"
  absl::string_view name;  // "default", "intel-xeon-e-2136"
  absl::string_view text;  // the file's contents
};

// The text of a shipped policy ("default", "xen-pre-4.15",
// "kvm-ignore-msrs"), or "" if there is none by that name.
absl::string_view ShippedPolicy(absl::string_view name);
// The text of a shipped host profile ("intel-xeon-e-2136",
// "amd-epyc-7443p"), or "".
absl::string_view ShippedProfile(absl::string_view name);

std::vector<absl::string_view> ShippedPolicyNames();
std::vector<absl::string_view> ShippedProfileNames();

// Internal: the generated table (shipped_data.cc).
extern const ShippedFile kShippedFiles[];
extern const size_t kShippedFileCount;

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_SHIPPED_H_
