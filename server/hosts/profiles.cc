#include "server/hosts/profiles.h"

#include "base/embedded_files.h"

namespace pvemu::server {

// Generated from server/hosts/profiles/*.textproto (server/hosts/meson.build).
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

}  // namespace pvemu::server
