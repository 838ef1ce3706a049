// Host profiles for the sim host, shipped with pvemu: embedded at build time
// (and installed under DATADIR/pvemu/profiles/, where an operator may add
// more). Immutable; safe from any thread.
#ifndef PVEMU_HOSTS_PROFILES_H_
#define PVEMU_HOSTS_PROFILES_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/embedded_files.h"

namespace pvemu::hosts {

// The text of a shipped host profile ("intel-xeon-e-2136",
// "amd-epyc-7443p"), or "" if there is none by that name.
absl::string_view ShippedProfile(absl::string_view name);
std::vector<absl::string_view> ShippedProfileNames();
// The embedded table itself (OpenSimHost looks names up in it, then among
// the installed profiles: base/data_files.h).
absl::Span<const base::EmbeddedFile> ShippedProfileTable();

}  // namespace pvemu::hosts

#endif  // PVEMU_HOSTS_PROFILES_H_
