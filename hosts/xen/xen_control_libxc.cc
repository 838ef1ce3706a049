// LibxcControl: XenControl on libxenctrl. The only file that includes
// <xenctrl.h>; compiled only when meson found libxen (PVEMU_HAVE_XEN).
// libxenctrl is a C library whose header has no extern "C" guard.
extern "C" {
#include <xenctrl.h>
}

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "hosts/native_cpuid.h"
#include "hosts/xen/xen_control.h"

namespace pvemu::hosts {
namespace {

// errno after a failed libxenctrl call, never 0.
int LastErrno() { return errno != 0 ? errno : EIO; }

// Thread-safety: as XenControl. `xch_` is set by Open and cleared by Close;
// the handle is reentrant (opened without XC_OPENFLAG_NON_REENTRANT).
class LibxcControl final : public XenControl {
 public:
  ~LibxcControl() override { Close(); }

  absl::Status Open() override {
    if (xch_ != nullptr) return absl::OkStatus();
    errno = 0;
    xch_ = xc_interface_open(nullptr, nullptr, 0);
    if (xch_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "xc_interface_open failed: ", XenErrnoText(LastErrno()),
          "; pvemud must run as root in dom0 with xenfs mounted on /proc/xen "
          "and the xen-privcmd module loaded, or use --host=sim"));
    }
    return absl::OkStatus();
  }

  void Close() override {
    if (xch_ != nullptr) {
      xc_interface_close(xch_);
      xch_ = nullptr;
    }
  }

  absl::StatusOr<XenPhysinfo> Physinfo() override {
    if (xch_ == nullptr) return NotOpen();
    xc_physinfo_t raw = {};
    if (xc_physinfo(xch_, &raw) != 0) {
      return absl::UnavailableError(
          absl::StrCat("xc_physinfo failed: ", XenErrnoText(LastErrno())));
    }
    XenPhysinfo info;
    info.nr_cpus = raw.nr_cpus;
    info.max_cpu_id = raw.max_cpu_id;
    info.cpu_khz = raw.cpu_khz;
    for (size_t i = 0; i < info.hw_cap.size(); ++i) info.hw_cap[i] = raw.hw_cap[i];
    // (major << 16) | minor; a failure only loses the description.
    int version = xc_version(xch_, XENVER_version, nullptr);
    if (version > 0) {
      info.xen_major = static_cast<uint32_t>(version) >> 16;
      info.xen_minor = static_cast<uint32_t>(version) & 0xffff;
    }
    return info;
  }

  absl::StatusOr<std::vector<DomainState>> DomainList() override {
    if (xch_ == nullptr) return NotOpen();
    constexpr unsigned kBatch = 256;
    std::vector<xc_domaininfo_t> batch(kBatch);
    std::vector<DomainState> domains;
    uint32_t first = 0;
    while (true) {
      int n = xc_domain_getinfolist(xch_, first, kBatch, batch.data());
      if (n < 0) {
        return absl::UnavailableError(absl::StrCat(
            "xc_domain_getinfolist failed: ", XenErrnoText(LastErrno())));
      }
      for (int i = 0; i < n; ++i) {
        const xc_domaininfo_t& raw = batch[i];
        DomainState d;
        d.domid = raw.domain;
        d.running = raw.flags & XEN_DOMINF_running;
        d.blocked = raw.flags & XEN_DOMINF_blocked;
        d.paused = raw.flags & XEN_DOMINF_paused;
        d.dying = raw.flags & XEN_DOMINF_dying;
        d.shutdown = raw.flags & XEN_DOMINF_shutdown;
        d.shutdown_reason =
            (raw.flags >> XEN_DOMINF_shutdownshift) & XEN_DOMINF_shutdownmask;
        d.hvm = raw.flags & XEN_DOMINF_hvm_guest;
        d.nr_online_vcpus = raw.nr_online_vcpus;
        d.max_vcpu_id = raw.max_vcpu_id;
        domains.push_back(d);
      }
      if (n < static_cast<int>(kBatch)) break;
      first = batch[n - 1].domain + 1;
    }
    return domains;
  }

  int ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) override {
    xc_resource_entry_t entry = {};
    entry.u.cmd = XEN_RESOURCE_OP_MSR_READ;
    entry.idx = msr;
    if (int err = RunOne(cpu, &entry); err != 0) return err;
    *value = entry.val;
    return 0;
  }

  int WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) override {
    xc_resource_entry_t entry = {};
    entry.u.cmd = XEN_RESOURCE_OP_MSR_WRITE;
    entry.idx = msr;
    entry.val = value;
    return RunOne(cpu, &entry);
  }

  emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) override {
    return NativeCpuid(leaf, subleaf);
  }

 private:
  static absl::Status NotOpen() {
    return absl::FailedPreconditionError("libxenctrl is not open");
  }

  // One resource op with one entry, both on the stack. The op returns the
  // number of entries done: 0 means Xen refused the entry and left the
  // reason (a negative errno) in entry->u.ret.
  int RunOne(uint32_t cpu, xc_resource_entry_t* entry) {
    if (xch_ == nullptr) return EBADF;
    xc_resource_op_t op = {};
    op.cpu = cpu;
    op.nr_entries = 1;
    op.entries = entry;
    errno = 0;
    if (xc_resource_op(xch_, 1, &op) < 0) return LastErrno();
    if (op.result < 1) return entry->u.ret < 0 ? -entry->u.ret : EIO;
    return 0;
  }

  xc_interface* xch_ = nullptr;
};

}  // namespace

std::unique_ptr<XenControl> NewLibxcControl() {
  return std::make_unique<LibxcControl>();
}

}  // namespace pvemu::hosts
