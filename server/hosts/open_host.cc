#include "server/hosts/open_host.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "policy/shipped.h"
#include "server/hosts/profiles.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "pvemu/v1/host.pb.h"
#include "server/hosts/linux_host.h"
#include "server/hosts/sim_host.h"
#include "server/hosts/xen/xen_host.h"

namespace pvemu::server {
namespace {

// The shipped profile sim uses when no --host-profile is given
// (policy/profiles/, embedded by the policy library).
constexpr absl::string_view kDefaultProfileName = "intel-xeon-e-2136";

absl::StatusOr<std::unique_ptr<emulator::Host>> OpenSim(
    const HostOptions& options) {
  pvemu::v1::HostProfile profile;
  std::string source;
  if (options.profile_path.empty()) {
    source = absl::StrCat("shipped:", kDefaultProfileName);
    absl::string_view text = DefaultSimProfileText();
    if (text.empty()) {
      return absl::InternalError(absl::StrCat(
          "the shipped host profile '", kDefaultProfileName,
          "' is missing from this build; pass --host-profile=FILE"));
    }
    RETURN_IF_ERROR(ParseTextProto(text, source, &profile));
  } else {
    source = options.profile_path;
    RETURN_IF_ERROR(ParseTextProtoFile(options.profile_path, &profile));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SimHost> host,
                   SimHost::Create(profile, source));
  return std::unique_ptr<emulator::Host>(std::move(host));
}

}  // namespace

absl::string_view DefaultSimProfileText() {
  return server::ShippedProfile(kDefaultProfileName);
}

absl::StatusOr<std::unique_ptr<emulator::Host>> OpenHost(
    absl::string_view kind, const HostOptions& options) {
  if (kind != "sim" && kind != "linux" && kind != "xen") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown host kind '", kind, "'; use one of sim, linux, xen"));
  }
  if (kind != "sim" && !options.profile_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a host profile (", options.profile_path,
        ") applies only to --host=sim, not --host=", kind));
  }
  if (kind == "sim") return OpenSim(options);
  if (kind == "linux") {
    LinuxHostOptions linux_options;
    linux_options.dev_cpu_dir = options.linux_dev_cpu_dir;
    ASSIGN_OR_RETURN(std::unique_ptr<LinuxHost> host,
                     LinuxHost::Create(linux_options));
    return std::unique_ptr<emulator::Host>(std::move(host));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<XenHost> host, XenHost::Open());
  return std::unique_ptr<emulator::Host>(std::move(host));
}

}  // namespace pvemu::server
