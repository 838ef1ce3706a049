#include "hosts/open_host.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hosts/profiles.h"
#include "base/data_files.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "pvemu/v1/host.pb.h"
#include "hosts/linux_host.h"
#include "hosts/sim_host.h"

namespace pvemu::hosts {
namespace {

// The shipped profile sim uses when no --host-profile is given
// (hosts/profiles/, embedded by this library).
constexpr absl::string_view kDefaultProfileName = "intel-xeon-e-2136";

}  // namespace

bool IsHostProfileName(absl::string_view profile) {
  return !absl::StrContains(profile, '/') && !absl::EndsWith(profile, ".textproto");
}

absl::StatusOr<std::unique_ptr<SimHost>> OpenSimHost(absl::string_view profile) {
  if (profile.empty()) profile = kDefaultProfileName;
  pvemu::v1::HostProfile parsed;
  std::string source;
  if (IsHostProfileName(profile)) {
    const absl::Span<const base::EmbeddedFile> shipped = ShippedProfileTable();
    std::optional<base::NamedFile> named = base::FindNamedFile(shipped, "profiles", profile);
    if (!named.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown host profile '", profile, "'; the shipped profiles are ",
          base::KnownNames(shipped, "profiles"),
          "; a profile file works too: give its path (one with a '/' or ending in "
          ".textproto, e.g. ./", profile, ")"));
    }
    source = named->path.empty() ? absl::StrCat("shipped:", profile) : named->path;
    RETURN_IF_ERROR(ParseTextProto(named->text, source, &parsed));
  } else {
    source = std::string(profile);
    RETURN_IF_ERROR(ParseTextProtoFile(source, &parsed));
  }
  return SimHost::Create(parsed, source);
}

absl::string_view DefaultSimProfileText() {
  return ShippedProfile(kDefaultProfileName);
}

absl::StatusOr<std::unique_ptr<emulator::Host>> OpenHost(
    absl::string_view kind, const HostOptions& options) {
  if (kind != "sim" && kind != "linux" && kind != "xen") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown host kind '", kind, "'; use one of sim, linux, xen"));
  }
  if (kind != "sim" && !options.profile.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a host profile (", options.profile,
        ") applies only to --host=sim, not --host=", kind));
  }
  if (kind == "sim") {
    ASSIGN_OR_RETURN(std::unique_ptr<SimHost> host, OpenSimHost(options.profile));
    return std::unique_ptr<emulator::Host>(std::move(host));
  }
  if (kind == "linux") {
    LinuxHostOptions linux_options;
    linux_options.dev_cpu_dir = options.linux_dev_cpu_dir;
    ASSIGN_OR_RETURN(std::unique_ptr<LinuxHost> host,
                     LinuxHost::Create(linux_options));
    return std::unique_ptr<emulator::Host>(std::move(host));
  }
  // The xen backend links libxenctrl; only pvemud links it (hosts/xen/),
  // so a VMM or pvemuctl loads without Xen's libraries.
  return absl::FailedPreconditionError(
      "--host=xen is pvemud's alone: the xen host backend (hosts/xen/xen_host.h) is not "
      "part of this program; run pvemud --host=xen in dom0");
}

}  // namespace pvemu::hosts
