// XenControl: the thin seam between XenHost and libxenctrl. It covers exactly
// the calls pvemud makes, so XenHost can be tested without a hypervisor (see
// tests/hosts/xen_host_test.cc) and the one file that includes
// <xenctrl.h> (xen_control_libxc.cc) stays small.
#ifndef PVEMU_HOSTS_XEN_XEN_CONTROL_H_
#define PVEMU_HOSTS_XEN_XEN_CONTROL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "emulator/host.h"

namespace pvemu::hosts {

// What xc_physinfo (plus xc_version) says about the machine.
struct XenPhysinfo {
  uint32_t nr_cpus = 0;     // CPUs currently online
  uint32_t max_cpu_id = 0;  // largest possible CPU id
  uint32_t cpu_khz = 0;     // the CPU (and TSC) frequency Xen measured
  // CPUID feature words as Xen sees them (xen_sysctl_physinfo.hw_cap).
  std::array<uint32_t, 8> hw_cap = {};
  // From xc_version(XENVER_version); 0.0 when unknown.
  uint32_t xen_major = 0;
  uint32_t xen_minor = 0;
};

// One live domain, from xc_domain_getinfolist.
struct DomainState {
  uint32_t domid = 0;
  bool running = false;   // XEN_DOMINF_running
  bool blocked = false;   // XEN_DOMINF_blocked
  bool paused = false;    // XEN_DOMINF_paused
  bool dying = false;     // XEN_DOMINF_dying
  bool shutdown = false;  // XEN_DOMINF_shutdown
  uint32_t shutdown_reason = 0;  // SHUTDOWN_* when `shutdown`
  bool hvm = false;       // XEN_DOMINF_hvm_guest (else PV)
  uint32_t nr_online_vcpus = 0;
  // Highest vCPU id in use; ~0u when the domain has no vCPUs.
  uint32_t max_vcpu_id = 0;

  friend bool operator==(const DomainState&, const DomainState&) = default;
};

// The libxenctrl calls XenHost needs. An implementation owns one
// xc_interface handle between Open() and Close().
//
// Thread-safety: after Open() returns OK, every method except Open/Close may
// be called concurrently (libxenctrl handles opened without
// XC_OPENFLAG_NON_REENTRANT are reentrant). Open and Close need exclusive
// access.
class XenControl {
 public:
  virtual ~XenControl() = default;

  // xc_interface_open. FailedPrecondition with the errno text when Xen or
  // privcmd refuses (not dom0, not root).
  virtual absl::Status Open() = 0;
  // xc_interface_close. Safe to call when not open.
  virtual void Close() = 0;

  // xc_physinfo and xc_version.
  virtual absl::StatusOr<XenPhysinfo> Physinfo() = 0;
  // Every live domain (xc_domain_getinfolist, in batches), by domid.
  virtual absl::StatusOr<std::vector<DomainState>> DomainList() = 0;

  // xc_resource_op with one XEN_RESOURCE_OP_MSR_READ / _WRITE entry on
  // physical CPU `cpu`. Return 0 on success, else a positive errno: the
  // hypercall's own errno, or the failed entry's error when Xen refused the
  // MSR (it only allows MSRs on its allow-list). Trap path: must not
  // allocate in pvemu code; the failure is a plain int for that reason.
  virtual int ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) = 0;
  virtual int WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) = 0;

  // CPUID as dom0 sees it. PV dom0's CPUID is filtered by Xen, but leaf 0
  // (the vendor string) is the real one.
  virtual emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) = 0;
};

#ifdef PVEMU_HAVE_XEN
// The libxenctrl implementation (xen_control_libxc.cc).
std::unique_ptr<XenControl> NewLibxcControl();
#endif

// "Operation not permitted (EPERM)" for an errno, for messages about Xen.
std::string XenErrnoText(int err);

}  // namespace pvemu::hosts

#endif  // PVEMU_HOSTS_XEN_XEN_CONTROL_H_
