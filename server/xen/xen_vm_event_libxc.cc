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

// The selector's compressed attribute bits (vm_event_x86_selector_reg.ar):
// type 0-3, S 4, DPL 5-6, P 7, AVL 8, L 9, D/B 10, G 11.
emulator::Mode ModeOf(const vm_event_regs_x86& r) {
  if ((r.cr0 & 1) == 0) return emulator::Mode::kReal;
  const bool lma = (r.msr_efer >> 10) & 1;
  const uint32_t ar = r.cs.ar;
  if (lma && ((ar >> 9) & 1)) return emulator::Mode::k64;
  return ((ar >> 10) & 1) ? emulator::Mode::k32 : emulator::Mode::k16;
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
    if (!RING_HAS_UNCONSUMED_REQUESTS(&ring_)) return false;
    // A producer index more than a ring ahead of our responses is a lie (the
    // page is Xen's, but a corrupted one must not make Poll decide 2^32
    // stale slots): stop reading until it is sane again (found reading the
    // ring for xen_ring_fuzz).
    if (RING_REQUEST_PROD_OVERFLOW(&ring_, ring_.sring->req_prod)) {
      if (!overflow_reported_) {
        overflow_reported_ = true;
        std::fprintf(stderr,
                     "pvemud: the vm_event ring of domain %u claims %u requests past %u "
                     "answered, more than its %u slots; not reading it until that is sane\n",
                     domain_, ring_.sring->req_prod - ring_.rsp_prod_pvt, ring_.rsp_prod_pvt,
                     RING_SIZE(&ring_));
      }
      return false;
    }
    RING_IDX cons = ring_.req_cons;
    vm_event_request_t req;
    std::memcpy(&req, RING_GET_REQUEST(&ring_, cons), sizeof(req));
    ++cons;
    ring_.req_cons = cons;
    ring_.sring->req_event = cons + 1;

    *event = VmEvent();
    event->domain = domain_;
    event->vcpu = req.vcpu_id;
    event->vcpu_paused = (req.flags & VM_EVENT_FLAG_VCPU_PAUSED) != 0;
    event->raw_reason = req.reason;
    event->raw_altp2m_idx = req.altp2m_idx;
    event->raw_version = req.version;
    if (req.version != VM_EVENT_INTERFACE_VERSION) {
      event->kind = VmEvent::Kind::kOther;
      return true;
    }
    switch (req.reason) {
      case VM_EVENT_REASON_MOV_TO_MSR:
        event->kind = VmEvent::Kind::kMsrWrite;
        event->msr = static_cast<uint32_t>(req.u.mov_to_msr.msr);
        event->new_value = req.u.mov_to_msr.new_value;
        event->old_value = req.u.mov_to_msr.old_value;
        break;
      case VM_EVENT_REASON_CPUID:
        event->kind = VmEvent::Kind::kCpuid;
        event->leaf = req.u.cpuid.leaf;
        event->subleaf = req.u.cpuid.subleaf;
        event->insn_length = req.u.cpuid.insn_length;
        break;
      default:
        event->kind = VmEvent::Kind::kOther;
        return true;
    }
    const vm_event_regs_x86& r = req.data.regs.x86;
    event->mode = ModeOf(r);
    event->cpl = static_cast<uint8_t>((r.ss.ar >> 5) & 3);
    const uint64_t gpr[16] = {r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi,
                              r.r8,  r.r9,  r.r10, r.r11, r.r12, r.r13, r.r14, r.r15};
    for (int i = 0; i < 16; ++i) event->regs.gpr[i] = gpr[i];
    event->regs.rip = r.rip;
    event->regs.rflags = r.rflags;
    return true;
  }

  void Respond(const VmEventResponse& response) override {
    vm_event_response_t rsp;
    std::memset(&rsp, 0, sizeof(rsp));
    rsp.version = VM_EVENT_INTERFACE_VERSION;
    rsp.vcpu_id = response.vcpu;
    rsp.reason = response.raw_reason;
    rsp.altp2m_idx = static_cast<uint16_t>(response.raw_altp2m_idx);
    if (response.release_vcpu) rsp.flags |= VM_EVENT_FLAG_VCPU_PAUSED;
    if (response.deny) rsp.flags |= VM_EVENT_FLAG_DENY;
    if (response.set_registers) {
      // Xen copies the whole x86 register block and applies the general
      // registers, RIP and RFLAGS from it (hvm/vm_event.c,
      // hvm_vm_event_set_registers); the rest is not read.
      rsp.flags |= VM_EVENT_FLAG_SET_REGISTERS;
      vm_event_regs_x86& r = rsp.data.regs.x86;
      const uint64_t* g = response.regs.gpr;
      r.rax = g[0], r.rcx = g[1], r.rdx = g[2], r.rbx = g[3];
      r.rsp = g[4], r.rbp = g[5], r.rsi = g[6], r.rdi = g[7];
      r.r8 = g[8], r.r9 = g[9], r.r10 = g[10], r.r11 = g[11];
      r.r12 = g[12], r.r13 = g[13], r.r14 = g[14], r.r15 = g[15];
      r.rip = response.regs.rip;
      r.rflags = response.regs.rflags;
    }
    RING_IDX prod = ring_.rsp_prod_pvt;
    std::memcpy(RING_GET_RESPONSE(&ring_, prod), &rsp, sizeof(rsp));
    ++prod;
    ring_.rsp_prod_pvt = prod;
    RING_PUSH_RESPONSES(&ring_);
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
