#include "hosts/xen/xen_host.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "hosts/native_cpuid.h"

namespace pvemu::hosts {

std::string XenErrnoText(int err) {
  const char* name = strerrorname_np(err);
  return absl::StrCat(std::strerror(err), " (",
                      name != nullptr ? name : absl::StrCat("errno ", err), ")");
}

std::string DomainStateText(const DomainState& d) {
  // Xen's own SHUTDOWN_* codes (xen/sched.h), kept here so this file needs
  // no Xen headers.
  static constexpr const char* kShutdownReasons[] = {
      "poweroff", "reboot", "suspend", "crash", "watchdog", "soft_reset"};
  std::vector<std::string> parts;
  if (d.running) parts.push_back("running");
  if (d.blocked) parts.push_back("blocked");
  if (d.paused) parts.push_back("paused");
  if (d.shutdown) {
    parts.push_back(
        d.shutdown_reason < std::size(kShutdownReasons)
            ? absl::StrCat("shutdown (", kShutdownReasons[d.shutdown_reason], ")")
            : absl::StrCat("shutdown (reason ", d.shutdown_reason, ")"));
  }
  if (d.dying) parts.push_back("dying");
  if (parts.empty()) return "idle";
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<std::unique_ptr<XenHost>> XenHost::Open(const XenPaths& paths) {
#ifndef PVEMU_HAVE_XEN
  (void)paths;
  return absl::UnimplementedError(
      "built without Xen support: install libxen-dev and reconfigure with "
      "-Dxen=enabled");
#else
  // Checked before libxenctrl, whose own failure is a line on stderr and a
  // bare errno.
  if (access(paths.privcmd.c_str(), F_OK) != 0) {
    std::string type;
    if (ReadFileToString(paths.hypervisor_type, &type).ok() &&
        absl::StripAsciiWhitespace(type) == "xen") {
      // Xen, but privcmd is missing: in dom0 that is an unloaded module
      // (Debian builds xen-privcmd, xenfs and xen-evtchn as modules).
      return absl::FailedPreconditionError(absl::StrCat(
          "running on Xen, but ", paths.privcmd,
          " is absent: in dom0, load the xen-privcmd module (modprobe "
          "xen-privcmd) and mount xenfs on /proc/xen (mount -t xenfs xenfs "
          "/proc/xen); or use --host=sim"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "not running on Xen: ", paths.privcmd,
        " is absent; start pvemud in dom0, or use --host=sim"));
  }
  std::string caps;
  if (ReadFileToString(paths.capabilities, &caps).ok() &&
      !absl::StrContains(caps, "control_d")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "running in a Xen guest, not in dom0: ", paths.capabilities,
        " lacks control_d; start pvemud in dom0, or use --host=sim"));
  }
  return Create(NewLibxcControl());
#endif
}

absl::StatusOr<std::unique_ptr<XenHost>> XenHost::Create(
    std::unique_ptr<XenControl> control) {
  if (control == nullptr) {
    return absl::InvalidArgumentError("XenHost::Create: no XenControl");
  }
  auto host = std::unique_ptr<XenHost>(new XenHost(std::move(control)));
  RETURN_IF_ERROR(host->control_->Open());
  ASSIGN_OR_RETURN(XenPhysinfo info, host->control_->Physinfo());
  host->cpus_ = info.nr_cpus;
  host->tsc_khz_ = info.cpu_khz;
  host->vendor_ = VendorFromLeaf0(host->control_->Cpuid(0, 0));
  host->description_ =
      info.xen_major == 0 && info.xen_minor == 0
          ? std::string("xen")
          : absl::StrCat("xen ", info.xen_major, ".", info.xen_minor);
  return host;
}

XenHost::XenHost(std::unique_ptr<XenControl> control)
    : control_(std::move(control)) {}

XenHost::~XenHost() { control_->Close(); }

void XenHost::NoteFailure(int err) {
  failed_msr_accesses_.fetch_add(1, std::memory_order_relaxed);
  last_msr_errno_.store(err, std::memory_order_relaxed);
}

bool XenHost::ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) {
  uint64_t v;
  if (int err = control_->ReadMsr(cpu, index, &v); err != 0) {
    NoteFailure(err);
    return false;
  }
  *value = v;
  return true;
}

bool XenHost::WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) {
  if (int err = control_->WriteMsr(cpu, index, value); err != 0) {
    NoteFailure(err);
    return false;
  }
  return true;
}

emulator::CpuidRegs XenHost::Cpuid(uint32_t leaf, uint32_t subleaf) {
  return control_->Cpuid(leaf, subleaf);
}

absl::StatusOr<std::vector<DomainState>> XenHost::ListDomains() {
  return control_->DomainList();
}

absl::StatusOr<uint64_t> XenHost::ReadMsrOrError(uint32_t cpu, uint32_t index) {
  uint64_t v;
  if (int err = control_->ReadMsr(cpu, index, &v); err != 0) {
    NoteFailure(err);
    return absl::FailedPreconditionError(absl::StrFormat(
        "Xen refused to read MSR %#x on CPU %u: %s", index, cpu,
        XenErrnoText(err)));
  }
  return v;
}

}  // namespace pvemu::hosts
