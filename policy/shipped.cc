#include "policy/shipped.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/data_files.h"
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

absl::StatusOr<LoadedPolicy> LoadPolicyByNameOrFile(const std::string& name_or_path) {
  // A directory is not a file: the source tree and the build tree both hold
  // a kvm/ directory, and `--policy=kvm` there means the shipped policy.
  std::error_code ec;
  const bool is_file = std::filesystem::exists(name_or_path, ec) &&
                       !std::filesystem::is_directory(name_or_path, ec);
  if (is_file || absl::StrContains(name_or_path, '/') ||
      absl::EndsWith(name_or_path, ".textproto")) {
    return LoadPolicyFile(name_or_path);
  }
  const absl::Span<const base::EmbeddedFile> shipped(kShippedPolicies, kShippedPolicies_count);
  std::optional<base::NamedFile> named = base::FindNamedFile(shipped, "policies", name_or_path);
  if (!named.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--policy=", name_or_path, ": neither a file nor a shipped policy (",
        base::KnownNames(shipped, "policies"), ")"));
  }
  return ParsePolicy(named->text,
                     named->path.empty() ? absl::StrCat(name_or_path, ".textproto") : named->path);
}

}  // namespace pvemu::policy
