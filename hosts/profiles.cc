#include "hosts/profiles.h"

#include "base/embedded_files.h"

namespace pvemu::hosts {

// Generated from hosts/profiles/*.textproto (hosts/meson.build).
extern const base::EmbeddedFile kShippedProfiles[];
extern const size_t kShippedProfiles_count;

absl::Span<const base::EmbeddedFile> ShippedProfileTable() {
  return {kShippedProfiles, kShippedProfiles_count};
}

absl::string_view ShippedProfile(absl::string_view name) {
  return base::FindEmbedded(ShippedProfileTable(), name);
}

std::vector<absl::string_view> ShippedProfileNames() {
  return base::EmbeddedNames(ShippedProfileTable());
}

}  // namespace pvemu::hosts
