#include "policy/shipped.h"

namespace pvemu::policy {
namespace {

absl::string_view Find(absl::string_view kind, absl::string_view name) {
  for (size_t i = 0; i < kShippedFileCount; ++i) {
    if (kShippedFiles[i].kind == kind && kShippedFiles[i].name == name) {
      return kShippedFiles[i].text;
    }
  }
  return absl::string_view();
}

std::vector<absl::string_view> Names(absl::string_view kind) {
  std::vector<absl::string_view> out;
  for (size_t i = 0; i < kShippedFileCount; ++i) {
    if (kShippedFiles[i].kind == kind) out.push_back(kShippedFiles[i].name);
  }
  return out;
}

}  // namespace

absl::string_view ShippedPolicy(absl::string_view name) { return Find("policy", name); }
absl::string_view ShippedProfile(absl::string_view name) { return Find("profile", name); }
std::vector<absl::string_view> ShippedPolicyNames() { return Names("policy"); }
std::vector<absl::string_view> ShippedProfileNames() { return Names("profile"); }

}  // namespace pvemu::policy
