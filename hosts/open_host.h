// Choosing and opening the host backend (pvemud --host, --host-profile;
// pvemuctl --host-profile).
#ifndef PVEMU_HOSTS_OPEN_HOST_H_
#define PVEMU_HOSTS_OPEN_HOST_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "emulator/host.h"
#include "hosts/sim_host.h"

namespace pvemu::hosts {

struct HostOptions {
  // sim only: a host profile as --host-profile names it (OpenSimHost). Empty:
  // the shipped Intel Xeon E-2136 profile.
  std::string profile;
  // linux only: where the per-CPU msr devices are (tests redirect it).
  std::string linux_dev_cpu_dir = "/dev/cpu";
};

// Opens the backend `kind`: "sim" or "linux" (CLI.md, "Daemon").
// InvalidArgument for another kind (listing the choices), or for a profile
// with a kind other than sim; FailedPrecondition for "xen", whose backend
// (hosts/xen/xen_host.h, libxenctrl) only pvemud links and opens itself;
// otherwise the backend's own errors (OpenSimHost, LinuxHost::Create).
absl::StatusOr<std::unique_ptr<emulator::Host>> OpenHost(
    absl::string_view kind, const HostOptions& options);

// Whether `profile` (a --host-profile value) is a shipped profile's name
// rather than a file: a word with no '/' that does not end in ".textproto".
bool IsHostProfileName(absl::string_view profile);

// A sim host on `profile`, the one way pvemud and pvemuctl name a host
// profile: a shipped profile's name ("amd-epyc-7443p", see
// ShippedProfileNames()) or one installed as
// DATADIR/pvemu/profiles/NAME.textproto (base/data_files.h), or the path of a
// HostProfile textproto file (IsHostProfileName); "" is the shipped default,
// intel-xeon-e-2136.
// InvalidArgument for an unknown name (listing the shipped names and saying
// that a path works too); a file's own errors name the file (NotFound for a
// missing one); SimHost::Create's errors otherwise.
absl::StatusOr<std::unique_ptr<SimHost>> OpenSimHost(absl::string_view profile);

// The text of the shipped default sim profile (an Intel Xeon E-2136,
// hosts/profiles/intel-xeon-e-2136.textproto via ShippedProfile).
absl::string_view DefaultSimProfileText();

}  // namespace pvemu::hosts

#endif  // PVEMU_HOSTS_OPEN_HOST_H_
