// Choosing and opening the host backend (pvemud --host, --host-profile).
#ifndef PVEMU_SERVER_HOSTS_OPEN_HOST_H_
#define PVEMU_SERVER_HOSTS_OPEN_HOST_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "emulator/host.h"

namespace pvemu::server {

struct HostOptions {
  // sim only: a HostProfile textproto file. Empty: the shipped Intel Xeon
  // E-2136 profile.
  std::string profile_path;
  // linux only: where the per-CPU msr devices are (tests redirect it).
  std::string linux_dev_cpu_dir = "/dev/cpu";
};

// Opens the backend `kind`: "sim", "linux" or "xen" (CLI.md, "Daemon").
// InvalidArgument for another kind (listing the choices), or for a profile
// path with a kind other than sim; otherwise the backend's own errors
// (SimHost::Create, LinuxHost::Create, XenHost::Open).
absl::StatusOr<std::unique_ptr<emulator::Host>> OpenHost(
    absl::string_view kind, const HostOptions& options);

// The text of the shipped default sim profile (an Intel Xeon E-2136,
// policy/profiles/intel-xeon-e-2136.textproto via server::ShippedProfile).
absl::string_view DefaultSimProfileText();

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_HOSTS_OPEN_HOST_H_
