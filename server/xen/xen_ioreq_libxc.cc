// An ioreq server for one HVM domain on libxendevicemodel,
// libxenforeignmemory and libxenevtchn: IoreqChannel
// (server/xen/xen_ioreq.h) for XenPortServer. Compiled only with libxen
// (PVEMU_HAVE_XEN); with xen_control_libxc.cc and xen_vm_event_libxc.cc, one
// of the files that include Xen's headers.
//
// The protocol is Xen's public/hvm/ioreq.h: one ioreq_t per vCPU in the
// server's ioreq page, each with its own event channel (vp_eport). Xen
// fills a request and sets STATE_IOREQ_READY; the server takes it
// (STATE_IOREQ_INPROCESS), writes an IN's data, sets STATE_IORESP_READY and
// notifies the vCPU's channel, which unblocks the vCPU.
extern "C" {
#include <xenctrl.h>
#include <xendevicemodel.h>
#include <xenevtchn.h>
#include <xenforeignmemory.h>
#include <xen/hvm/ioreq.h>
#include <xen/memory.h>
}

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/xen/evtchn_wait.h"
#include "server/xen/ioreq_slot.h"
#include "server/xen/xen_ioreq.h"

namespace pvemu::server {
namespace {

int LastErrno() { return errno != 0 ? errno : EIO; }

absl::Status Failed(const std::string& call, uint32_t domain) {
  const int err = LastErrno();
  const char* name = strerrorname_np(err);
  return absl::FailedPreconditionError(absl::StrCat(
      call, " failed for domain ", domain, ": ", std::strerror(err), " (",
      name != nullptr ? name : absl::StrCat("errno ", err), ")",
      err == EINVAL || err == EOPNOTSUPP || err == ENOENT
          ? " (Xen serves port I/O to an ioreq server only for HVM/PVH "
            "domains, never the calling domain)"
          : ""));
}

class LibxcIoreqChannel final : public IoreqChannel {
 public:
  ~LibxcIoreqChannel() override {
    if (dmod_ != nullptr && created_) {
      // Disabled first, so Xen stops sending before the page goes away;
      // destroying the server gives the ports back.
      xendevicemodel_set_ioreq_server_state(dmod_, domain_, id_, 0);
    }
    if (xce_ != nullptr) {
      for (xenevtchn_port_or_error_t p : local_ports_) {
        if (p >= 0) xenevtchn_unbind(xce_, p);
      }
      xenevtchn_close(xce_);
    }
    if (fres_ != nullptr) xenforeignmemory_unmap_resource(fmem_, fres_);
    if (dmod_ != nullptr && created_) xendevicemodel_destroy_ioreq_server(dmod_, domain_, id_);
    if (fmem_ != nullptr) xenforeignmemory_close(fmem_);
    if (dmod_ != nullptr) xendevicemodel_close(dmod_);
  }

  absl::Status Open(uint32_t domain, absl::Span<const PortSpan> ports) {
    domain_ = static_cast<domid_t>(domain);
    // The vCPU count, for the event channels to bind.
    xc_interface* xch = xc_interface_open(nullptr, nullptr, 0);
    if (xch == nullptr) return Failed("xc_interface_open", domain);
    xc_domaininfo_t info;
    std::memset(&info, 0, sizeof(info));
    errno = 0;
    const int n = xc_domain_getinfolist(xch, domain, 1, &info);
    xc_interface_close(xch);
    if (n != 1 || info.domain != domain) {
      if (n >= 0) errno = ESRCH;
      return Failed("xc_domain_getinfolist", domain);
    }
    const uint32_t vcpus = info.max_vcpu_id + 1;
    if (vcpus > XC_PAGE_SIZE / sizeof(ioreq_t)) {
      errno = E2BIG;
      return Failed("the ioreq page (one page holds 128 vCPUs)", domain);
    }

    errno = 0;
    dmod_ = xendevicemodel_open(nullptr, 0);
    if (dmod_ == nullptr) return Failed("xendevicemodel_open", domain);
    fmem_ = xenforeignmemory_open(nullptr, 0);
    if (fmem_ == nullptr) return Failed("xenforeignmemory_open", domain);
    xce_ = xenevtchn_open(nullptr, 0);
    if (xce_ == nullptr) return Failed("xenevtchn_open", domain);
    errno = 0;
    if (xendevicemodel_create_ioreq_server(dmod_, domain_, HVM_IOREQSRV_BUFIOREQ_OFF, &id_) != 0) {
      return Failed("xendevicemodel_create_ioreq_server", domain);
    }
    created_ = true;
    // The synchronous ioreq page, mapped as a resource (no guest frame is
    // taken from the domain's memory map, as QEMU does since Xen 4.12).
    void* addr = nullptr;
    errno = 0;
    fres_ = xenforeignmemory_map_resource(fmem_, domain_, XENMEM_resource_ioreq_server, id_,
                                          XENMEM_resource_ioreq_server_frame_ioreq(0), 1,
                                          &addr, PROT_READ | PROT_WRITE, 0);
    if (fres_ == nullptr) return Failed("xenforeignmemory_map_resource (ioreq page)", domain);
    page_ = static_cast<shared_iopage_t*>(addr);
    for (const PortSpan& span : ports) {
      errno = 0;
      if (xendevicemodel_map_io_range_to_ioreq_server(dmod_, domain_, id_, /*is_mmio=*/0,
                                                      span.first, span.last) != 0) {
        return Failed(absl::StrCat("xendevicemodel_map_io_range_to_ioreq_server (ports ",
                                   absl::Hex(span.first), "-", absl::Hex(span.last), ")"),
                      domain);
      }
    }
    errno = 0;
    if (xendevicemodel_set_ioreq_server_state(dmod_, domain_, id_, 1) != 0) {
      return Failed("xendevicemodel_set_ioreq_server_state", domain);
    }
    // Xen writes each vCPU's channel into its slot when the server is
    // enabled; bound after, as QEMU does.
    local_ports_.assign(vcpus, -1);
    taken_.assign(vcpus, PortAccess());
    for (uint32_t v = 0; v < vcpus; ++v) {
      errno = 0;
      local_ports_[v] = xenevtchn_bind_interdomain(xce_, domain_, page_->vcpu_ioreq[v].vp_eport);
      if (local_ports_[v] < 0) {
        return Failed(absl::StrCat("xenevtchn_bind_interdomain (vcpu ", v, ")"), domain);
      }
    }
    return absl::OkStatus();
  }

  uint32_t domain() const override { return domain_; }

  absl::Status Wait(int timeout_ms) override {
    return WaitOnEventChannel(xce_, timeout_ms, "the ioreq channels");
  }

  bool Next(PortAccess* access) override {
    for (uint32_t v = 0; v < local_ports_.size(); ++v) {
      volatile ioreq_t* req = &page_->vcpu_ioreq[v];
      if (req->state != STATE_IOREQ_READY) continue;
      if (TakeIoreqSlot(req, domain_, v, access) == IoreqSlot::kDone) {
        Complete(v);
        continue;
      }
      taken_[v] = *access;
      return true;
    }
    return false;
  }

  void Respond(uint32_t vcpu, uint32_t value) override {
    if (vcpu >= local_ports_.size()) return;
    AnswerIoreqSlot(&page_->vcpu_ioreq[vcpu], taken_[vcpu], value);
    Complete(vcpu);
  }

 private:
  void Complete(uint32_t vcpu) {
    CompleteIoreqSlot(&page_->vcpu_ioreq[vcpu]);
    xenevtchn_notify(xce_, local_ports_[vcpu]);
  }

  domid_t domain_ = 0;
  xendevicemodel_handle* dmod_ = nullptr;
  xenforeignmemory_handle* fmem_ = nullptr;
  xenforeignmemory_resource_handle* fres_ = nullptr;
  xenevtchn_handle* xce_ = nullptr;
  ioservid_t id_ = 0;
  bool created_ = false;
  shared_iopage_t* page_ = nullptr;
  std::vector<xenevtchn_port_or_error_t> local_ports_;  // by vCPU
  // What Next took from each vCPU's slot, for its Respond (the shared page
  // is not read twice).
  std::vector<PortAccess> taken_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoreqChannel>> OpenXenIoreqChannel(
    uint32_t domain, absl::Span<const PortSpan> ports) {
  auto channel = std::make_unique<LibxcIoreqChannel>();
  if (absl::Status s = channel->Open(domain, ports); !s.ok()) return s;
  return std::unique_ptr<IoreqChannel>(std::move(channel));
}

}  // namespace pvemu::server
