// The vm_event ring of one HVM domain on libxenctrl (xc_monitor_*) and
// libxenevtchn: VmEventChannel (hosts/xen_vm_event.h) for XenMonitor. Like
// xen_control_libxc.cc, it is compiled only with libxen (PVEMU_HAVE_XEN)
// and is one of the two files that include Xen's headers.
extern "C" {
#include <xenctrl.h>
#include <xenevtchn.h>
#include <xen/vm_event.h>
}

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/xen/evtchn_wait.h"
#include "server/xen/vm_event_ring.h"
#include "server/xen/xen_vm_event.h"

namespace pvemu::server {
namespace {

int LastErrno() { return errno != 0 ? errno : EIO; }

// As XenErrnoText (xen_control.h), which this file does not use so that it
// depends on nothing but emulator/trap.h: "Device or resource busy (EBUSY)".
std::string ErrnoText(int err) {
  const char* name = strerrorname_np(err);
  return absl::StrCat(std::strerror(err), " (",
                      name != nullptr ? name : absl::StrCat("errno ", err), ")");
}

absl::Status Failed(const char* call, uint32_t domain) {
  int err = LastErrno();
  return absl::FailedPreconditionError(absl::StrCat(
      call, " failed for domain ", domain, ": ", ErrnoText(err),
      err == EOPNOTSUPP || err == ENODEV || err == EINVAL
          ? " (Xen monitors only HVM or PVH domains that have vCPUs and a "
            "monitor ring page, HVM_PARAM_MONITOR_RING_PFN, and never the "
            "calling domain)"
          : err == EBUSY ? " (another monitor, e.g. xen-access, holds the ring)"
                         : ""));
}

class LibxcVmEventChannel final : public VmEventChannel {
 public:
  ~LibxcVmEventChannel() override {
    if (xch_ != nullptr) {
      for (uint32_t msr : msrs_) xc_monitor_mov_to_msr(xch_, domain_, msr, false, false);
      if (cpuid_) xc_monitor_cpuid(xch_, domain_, false);
      // Disabling the monitor unpauses any vCPU still waiting for an answer.
      if (ring_page_ != nullptr) xc_monitor_disable(xch_, domain_);
    }
    if (xce_ != nullptr) {
      if (local_port_ >= 0) xenevtchn_unbind(xce_, local_port_);
      xenevtchn_close(xce_);
    }
    if (ring_page_ != nullptr) munmap(ring_page_, XC_PAGE_SIZE);
    if (xch_ != nullptr) xc_interface_close(xch_);
  }

  absl::Status Open(uint32_t domain, absl::Span<const uint32_t> msrs, bool cpuid) {
    domain_ = domain;
    errno = 0;
    xch_ = xc_interface_open(nullptr, nullptr, 0);
    if (xch_ == nullptr) return Failed("xc_interface_open", domain);
    uint32_t remote_port = 0;
    errno = 0;
    ring_page_ = xc_monitor_enable(xch_, domain, &remote_port);
    if (ring_page_ == nullptr) return Failed("xc_monitor_enable", domain);
    errno = 0;
    xce_ = xenevtchn_open(nullptr, 0);
    if (xce_ == nullptr) return Failed("xenevtchn_open", domain);
    errno = 0;
    local_port_ = xenevtchn_bind_interdomain(xce_, domain, remote_port);
    if (local_port_ < 0) return Failed("xenevtchn_bind_interdomain", domain);
    auto* sring = static_cast<vm_event_sring_t*>(ring_page_);
    SHARED_RING_INIT(sring);
    BACK_RING_INIT(&ring_, sring, XC_PAGE_SIZE);
    for (uint32_t msr : msrs) {
      errno = 0;
      if (xc_monitor_mov_to_msr(xch_, domain, msr, true, false) != 0) {
        return Failed("xc_monitor_mov_to_msr", domain);
      }
      msrs_.push_back(msr);
    }
    if (cpuid) {
      errno = 0;
      if (xc_monitor_cpuid(xch_, domain, true) != 0) return Failed("xc_monitor_cpuid", domain);
      cpuid_ = true;
    }
    return absl::OkStatus();
  }

  uint32_t domain() const override { return domain_; }

  absl::Status Wait(int timeout_ms) override {
    return WaitOnEventChannel(xce_, timeout_ms, "the vm_event channel");
  }

  bool Next(VmEvent* event) override {
    vm_event_request_t req;
    switch (TakeVmEventRequest(&ring_, &req)) {
      case VmEventTake::kEmpty:
        return false;
      case VmEventTake::kOverflow:
        if (!overflow_reported_) {
          overflow_reported_ = true;
          std::fprintf(stderr,
                       "pvemud: the vm_event ring of domain %u claims %u requests past %u "
                       "answered, more than its %u slots; not reading it until that is sane\n",
                       domain_, ring_.sring->req_prod - ring_.rsp_prod_pvt, ring_.rsp_prod_pvt,
                       RING_SIZE(&ring_));
        }
        return false;
      case VmEventTake::kTaken:
        break;
    }
    *event = VmEventOfRequest(req, domain_);
    return true;
  }

  void Respond(const VmEventResponse& response) override {
    PutVmEventResponse(&ring_, VmEventResponseOf(response));
    xenevtchn_notify(xce_, local_port_);
  }

 private:
  uint32_t domain_ = 0;
  xc_interface* xch_ = nullptr;
  xenevtchn_handle* xce_ = nullptr;
  xenevtchn_port_or_error_t local_port_ = -1;
  void* ring_page_ = nullptr;
  vm_event_back_ring_t ring_ = {};
  std::vector<uint32_t> msrs_;
  bool cpuid_ = false;
  bool overflow_reported_ = false;  // said once, not per poll
};

}  // namespace

absl::StatusOr<std::unique_ptr<VmEventChannel>> OpenXenMonitorChannel(
    uint32_t domain, absl::Span<const uint32_t> msrs, bool cpuid) {
  auto channel = std::make_unique<LibxcVmEventChannel>();
  if (absl::Status s = channel->Open(domain, msrs, cpuid); !s.ok()) return s;
  return std::unique_ptr<VmEventChannel>(std::move(channel));
}

}  // namespace pvemu::server
