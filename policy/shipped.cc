#include "policy/shipped.h"

#include "base/embedded_files.h"

namespace pvemu::policy {

// Generated from policy/defaults/*.textproto (policy/meson.build).
extern const base::EmbeddedFile kShippedPolicies[];
extern const size_t kShippedPolicies_count;

absl::string_view ShippedPolicy(absl::string_view name) {
  return base::FindEmbedded({kShippedPolicies, kShippedPolicies_count}, name);
}

std::vector<absl::string_view> ShippedPolicyNames() {
  return base::EmbeddedNames({kShippedPolicies, kShippedPolicies_count});
}

}  // namespace pvemu::policy
