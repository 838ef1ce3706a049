// XenHost: the `xen` host backend, for pvemud running in dom0. Physical MSRs
// through xc_resource_op, the machine through xc_physinfo, the live domains
// through xc_domain_getinfolist; all behind the XenControl seam.
#ifndef PVEMU_HOSTS_XEN_XEN_HOST_H_
#define PVEMU_HOSTS_XEN_XEN_HOST_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "emulator/host.h"
#include "hosts/host_base.h"
#include "hosts/xen/xen_control.h"

namespace pvemu::hosts {

// Where XenHost::Open looks for signs of Xen. Tests may point elsewhere.
struct XenPaths {
  std::string privcmd = "/dev/xen/privcmd";
  std::string capabilities = "/proc/xen/capabilities";
  // "xen" on any Xen domain (dom0 or guest) whose kernel has
  // CONFIG_XEN_SYS_HYPERVISOR, with or without xen-privcmd and xenfs: tells
  // "not Xen" apart from "Xen, but dom0's modules are not loaded".
  std::string hypervisor_type = "/sys/hypervisor/type";
};

// Thread-safe: every method may be called concurrently (see XenControl).
// ReadMsr/WriteMsr allocate nothing in pvemu code; libxenctrl itself bounces
// the one entry through its hypercall-buffer cache, which takes its own lock.
class XenHost final : public HostBase {
 public:
  // Opens libxenctrl on this machine. FailedPrecondition naming what is
  // missing when this is not Xen dom0 (not Xen at all; Xen without the
  // xen-privcmd module loaded; a domU; xc_interface_open refused);
  // Unimplemented when pvemu was built without libxen. Never crashes.
  static absl::StatusOr<std::unique_ptr<XenHost>> Open(
      const XenPaths& paths = {});

  // Takes `control`, opens it and reads physinfo and the CPUID vendor.
  // Errors from the seam come back unchanged.
  static absl::StatusOr<std::unique_ptr<XenHost>> Create(
      std::unique_ptr<XenControl> control);

  ~XenHost() override;
  XenHost(const XenHost&) = delete;
  XenHost& operator=(const XenHost&) = delete;

  // emulator::Host. The description (HostBase) reads "xen 4.17"; tsc_khz is
  // Xen's cpu_khz (the TSC frequency it calibrated).
  // False when Xen refuses the MSR (outside its allow-list), the CPU is not
  // online, or the hypercall fails; *value is then untouched.
  bool ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) override;
  bool WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) override;
  // Dom0's CPUID, through the seam. Filtered by Xen except the vendor.
  emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) override;

  // Online physical CPUs, from physinfo.
  uint32_t cpus() const { return cpus_; }

  // The live domains, for `pvemuctl domains`. Not on the trap path.
  absl::StatusOr<std::vector<DomainState>> ListDomains();

  // ReadMsr for people (`pvemuctl host msr`): on refusal, FailedPrecondition
  // with the Xen errno text ("... Operation not permitted (EPERM)").
  absl::StatusOr<uint64_t> ReadMsrOrError(uint32_t cpu, uint32_t index);

  // MSR accesses Xen refused or failed since start, and the errno of the
  // latest one (0: none), for metrics and logs off the trap path.
  uint64_t failed_msr_accesses() const {
    return failed_msr_accesses_.load(std::memory_order_relaxed);
  }
  int last_msr_errno() const {
    return last_msr_errno_.load(std::memory_order_relaxed);
  }

 private:
  explicit XenHost(std::unique_ptr<XenControl> control);
  void NoteFailure(int err);

  std::unique_ptr<XenControl> control_;
  uint32_t cpus_ = 0;
  std::atomic<uint64_t> failed_msr_accesses_{0};
  std::atomic<int> last_msr_errno_{0};
};

// "running", "paused", "dying", "shutdown (reboot)", ... for a domain.
std::string DomainStateText(const DomainState& d);

}  // namespace pvemu::hosts

#endif  // PVEMU_HOSTS_XEN_XEN_HOST_H_
