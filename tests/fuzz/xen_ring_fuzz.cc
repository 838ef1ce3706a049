// Fuzzes XenMonitor and XenPortServer on Xen's shared memory itself (a
// vm_event ring, an ioreq page, laid out by Xen's public headers), the input
// playing a Xen that may lie. The libxc channels need a hypervisor and the
// tests/xen fakes are queues of decoded events, so RingChannel and IoreqPage
// repeat the libxc Next/Respond line for line (keep them in step) and check
// every slot touched, every answer, and the good request and port access
// that close each input; a violation aborts with a message.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_tally.h"
#include "dispatch/dispatch.h"
#include "emulator/trap.h"
#include "hosts/open_host.h"
#include "hosts/sim_host.h"
#include "policy/loader.h"
#include "policy/store.h"
#include "server/xen/ioreq_slot.h"
#include "server/xen/xen_ioreq.h"
#include "server/xen/xen_monitor.h"
#include "server/xen/xen_port_server.h"
#include "server/xen/xen_vm_event.h"

// Xen's public headers, last so that their macros reach no pvemu header.
// <xenctrl.h> defines __XEN_TOOLS__ (vm_event.h's ring types are for tools
// only) and the write barrier for the libxc channels.
#ifndef __XEN_TOOLS__
#define __XEN_TOOLS__ 1
#endif
extern "C" {
#include <xen/vm_event.h>
#include <xen/hvm/ioreq.h>
}
#ifndef xen_wmb
#define xen_wmb() std::atomic_thread_fence(std::memory_order_release)
#endif
#include "server/xen/vm_event_ring.h"

namespace {

namespace dispatch = pvemu::dispatch;
namespace emulator = pvemu::emulator;
namespace hosts = pvemu::hosts;
namespace policy = pvemu::policy;
namespace server = pvemu::server;
namespace fuzz = pvemu::fuzz;

constexpr uint32_t kPageSize = 4096;  // XC_PAGE_SIZE: the ring page, the ioreq page
constexpr uint32_t kRingSize = __CONST_RING_SIZE(vm_event, kPageSize);
constexpr size_t kEntrySize = sizeof(vm_event_sring_entry);
// The ring's header and entries, without the rest of the page.
constexpr size_t kRingBytes = offsetof(vm_event_sring, ring) + kRingSize * kEntrySize;
constexpr uint32_t kSlots = kPageSize / sizeof(ioreq_t);  // vCPUs one ioreq page holds
static_assert(kRingSize >= 2 && (kRingSize & (kRingSize - 1)) == 0);

// Work per input: vm_event requests read, port accesses answered (the last
// Poll may go over by one page), operations.
constexpr int kMaxRequests = 64;
constexpr int kMaxPortAccesses = 64;
constexpr int kMaxOps = 256;

constexpr uint64_t kRflagsRf = uint64_t{1} << 16;
constexpr uint32_t kAnswerFlags =
    VM_EVENT_FLAG_VCPU_PAUSED | VM_EVENT_FLAG_DENY | VM_EVENT_FLAG_SET_REGISTERS;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "xen_ring_fuzz: %s\n", what);
  std::abort();
}

void Require(bool ok, const char* what) {
  if (!ok) Fail(what);
}

void RequireOk(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "xen_ring_fuzz: %s: %s\n", what, std::string(status.message()).c_str());
    std::abort();
  }
}

using Input = pvemu::fuzz::FuzzInput;

// The guest's mode, derived here on its own from the SDM's rules (CR0.PE,
// EFER.LMA, CS.L, CS.D), so that the checks below judge the monitor's
// reading (server/xen/vm_event_ring.h, VmEventMode) rather than repeat it.
emulator::Mode ModeOf(const vm_event_regs_x86& r) {
  if ((r.cr0 & 1) == 0) return emulator::Mode::kReal;
  const bool lma = (r.msr_efer >> 10) & 1;
  const bool cs_l = (r.cs.ar >> 9) & 1;
  const bool cs_d = (r.cs.ar >> 10) & 1;
  if (lma && cs_l) return emulator::Mode::k64;
  return cs_d ? emulator::Mode::k32 : emulator::Mode::k16;
}

uint8_t CplOf(const vm_event_regs_x86& r) { return static_cast<uint8_t>((r.ss.ar >> 5) & 3); }

// A response must answer the request read before it.
void CheckAnswer(const vm_event_request_t& req, const vm_event_response_t& rsp) {
  Require(rsp.version == VM_EVENT_INTERFACE_VERSION, "a response in another version than Xen's");
  Require(rsp.vcpu_id == req.vcpu_id, "a response names another vCPU than its request");
  Require(rsp.reason == req.reason, "a response names another reason than its request");
  Require(rsp.altp2m_idx == req.altp2m_idx, "a response names another altp2m view");
  Require((rsp.flags & VM_EVENT_FLAG_VCPU_PAUSED) == (req.flags & VM_EVENT_FLAG_VCPU_PAUSED),
          "a paused vCPU left paused, or an unpaused one released");
  Require((rsp.flags & ~kAnswerFlags) == 0, "a response flag the monitor never sets");
  const bool current = req.version == VM_EVENT_INTERFACE_VERSION;
  const bool msr = current && req.reason == VM_EVENT_REASON_MOV_TO_MSR;
  const bool cpuid = current && req.reason == VM_EVENT_REASON_CPUID;
  const vm_event_regs_x86& in = req.data.regs.x86;
  if (rsp.flags & VM_EVENT_FLAG_DENY) Require(msr, "DENY on a request that is no MSR write");
  // Outside real mode a WRMSR above CPL 0 is a #GP, LEARN or not.
  if (msr && ModeOf(in) != emulator::Mode::kReal && CplOf(in) != 0) {
    Require((rsp.flags & VM_EVENT_FLAG_DENY) != 0, "a user-mode WRMSR allowed");
  }
  Require(((rsp.flags & VM_EVENT_FLAG_SET_REGISTERS) != 0) == cpuid,
          "SET_REGISTERS on a request that is no CPUID, or a CPUID without");
  if (fuzz::TheTally().on()) {
    fuzz::TheTally().Add(absl::StrCat(
        "vm_event ", msr ? "mov_to_msr" : cpuid ? "cpuid" : current ? "other reason" : "other version",
        (req.flags & VM_EVENT_FLAG_VCPU_PAUSED) ? " paused" : "", " -> ",
        (rsp.flags & VM_EVENT_FLAG_DENY) ? "DENY" : (rsp.flags & VM_EVENT_FLAG_SET_REGISTERS) ? "SET_REGISTERS" : "allowed"));
  }
  if (!cpuid) return;
  const vm_event_regs_x86& out = rsp.data.regs.x86;
  uint64_t rip = in.rip + req.u.cpuid.insn_length;
  if (ModeOf(in) != emulator::Mode::k64) rip &= 0xffffffffu;
  Require(out.rip == rip, "a CPUID answer's RIP is not past the instruction");
  Require((out.rflags & ~kRflagsRf) == (in.rflags & ~kRflagsRf), "a CPUID answer changed RFLAGS");
  const uint64_t kept_in[] = {in.rsp, in.rbp, in.rsi, in.rdi, in.r8,  in.r9,
                              in.r10, in.r11, in.r12, in.r13, in.r14, in.r15};
  const uint64_t kept_out[] = {out.rsp, out.rbp, out.rsi, out.rdi, out.r8,  out.r9,
                               out.r10, out.r11, out.r12, out.r13, out.r14, out.r15};
  Require(std::memcmp(kept_in, kept_out, sizeof(kept_in)) == 0,
          "a CPUID answer changed a register CPUID does not write");
}

// LibxcVmEventChannel on a ring in memory: Next and Respond call the libxc
// channel's own ring code (server/xen/vm_event_ring.h), plus the checks.
class RingChannel final : public server::VmEventChannel {
 public:
  explicit RingChannel(uint32_t domain) : domain_(domain) {}

  // As Open: SHARED_RING_INIT, then the back ring; both indices at `start`
  // (libxc starts at 0; a ring that has run 2^32 events has wrapped).
  void Attach(vm_event_sring_t* sring, RING_IDX start) {
    SHARED_RING_INIT(sring);
    sring->req_prod = sring->rsp_prod = start;
    BACK_RING_ATTACH(&ring_, sring, start, kPageSize);
    Require(RING_SIZE(&ring_) == kRingSize, "the back ring's size is not the page's");
    budget_ = kMaxRequests;
    read_ = answered_ = 0;
    outstanding_ = false;
  }
  void Detach() { ring_.sring = nullptr; }
  void Refill() { budget_ = kMaxRequests; }
  const vm_event_back_ring_t& ring() const { return ring_; }
  uint64_t read() const { return read_; }
  uint64_t answered() const { return answered_; }

  uint32_t domain() const override { return domain_; }
  absl::Status Wait(int) override { return absl::OkStatus(); }

  bool Next(server::VmEvent* event) override {
    // The monitor's own reading (server/xen/vm_event_ring.h), with the
    // checks around it: one request at a time, slots inside the ring.
    if (ring_.sring == nullptr || budget_ <= 0) return false;
    Require(!outstanding_ || !RING_HAS_UNCONSUMED_REQUESTS(&ring_) ||
                RING_REQUEST_PROD_OVERFLOW(&ring_, ring_.sring->req_prod),
            "the monitor took a request before answering the last one");
    const vm_event_request_t* slot = RING_GET_REQUEST(&ring_, ring_.req_cons);
    vm_event_request_t req;
    if (server::TakeVmEventRequest(&ring_, &req) != server::VmEventTake::kTaken) return false;
    --budget_;
    last_slot_ = SlotOf(slot, "the monitor read a request slot outside the ring");
    last_ = req;
    outstanding_ = true;
    ++read_;
    *event = server::VmEventOfRequest(req, domain_);
    return true;
  }

  void Respond(const server::VmEventResponse& response) override {
    Require(ring_.sring != nullptr && outstanding_, "a response to no request read");
    outstanding_ = false;
    const vm_event_response_t rsp = server::VmEventResponseOf(response);
    Require(SlotOf(RING_GET_RESPONSE(&ring_, ring_.rsp_prod_pvt),
                   "the monitor wrote a response outside the ring") == last_slot_,
            "a response in another slot than its request's");
    server::PutVmEventResponse(&ring_, rsp);
    // xenevtchn_notify: nobody to wake.
    CheckAnswer(last_, rsp);
    ++answered_;
  }

 private:
  // The entry `p` points into; aborts with `what` when it is not one.
  size_t SlotOf(const void* p, const char* what) const {
    const auto first = reinterpret_cast<uintptr_t>(&ring_.sring->ring[0]);
    const auto at = reinterpret_cast<uintptr_t>(p);
    Require(at >= first && at < first + kRingSize * kEntrySize && (at - first) % kEntrySize == 0,
            what);
    return (at - first) / kEntrySize;
  }

  uint32_t domain_;
  vm_event_back_ring_t ring_ = {};
  int budget_ = 0;
  uint64_t read_ = 0, answered_ = 0;
  bool outstanding_ = false;  // read, not yet answered
  vm_event_request_t last_ = {};
  size_t last_slot_ = 0;
};

// LibxcIoreqChannel on an ioreq page in memory: Next, Respond and Complete
// are the libxc ones, plus the checks.
class IoreqPage final : public server::IoreqChannel {
 public:
  explicit IoreqPage(uint32_t domain) : domain_(domain) {}

  void Attach(shared_iopage_t* page, uint32_t vcpus) {
    page_ = page;
    vcpus_ = vcpus;
    outstanding_ = false;
  }
  void Detach() { Attach(nullptr, 0); }

  uint32_t domain() const override { return domain_; }
  absl::Status Wait(int) override { return absl::OkStatus(); }

  bool Next(server::PortAccess* access) override {
    Require(!outstanding_, "the port server took an access before answering the last one");
    for (uint32_t v = 0; v < vcpus_; ++v) {
      volatile ioreq_t* req = &page_->vcpu_ioreq[v];
      if (req->state != STATE_IOREQ_READY) continue;
      // The shipped slot reading (server/xen/ioreq_slot.h), as the libxc server.
      if (server::TakeIoreqSlot(req, domain_, v, access) == server::IoreqSlot::kDone) {
        Complete(v);
        continue;
      }
      outstanding_ = true;
      taken_ = v;
      taken_access_ = *access;
      return true;
    }
    return false;
  }

  void Respond(uint32_t vcpu, uint32_t value) override {
    Require(outstanding_ && vcpu == taken_, "an answer for a vCPU whose access was not taken");
    outstanding_ = false;
    if (vcpu >= vcpus_) return;
    server::AnswerIoreqSlot(&page_->vcpu_ioreq[vcpu], taken_access_, value);
    Complete(vcpu);
  }

 private:
  void Complete(uint32_t vcpu) {
    server::CompleteIoreqSlot(&page_->vcpu_ioreq[vcpu]);
    // xenevtchn_notify: nobody to wake.
  }

  uint32_t domain_;
  shared_iopage_t* page_ = nullptr;
  uint32_t vcpus_ = 0;
  bool outstanding_ = false;
  uint32_t taken_ = 0;
  server::PortAccess taken_access_;
};

// Domain 5 enforces, domain 6 learns. GP, CONST, SHADOW, PASSTHROUGH (to the
// sim host) and IGNORE rules, a reserved-bit drop, CPUID leaves, port ranges
// (0x92 is the sim host's device).
constexpr char kRules[] = R"(
  msr { msr: "0x1b0" read: PASSTHROUGH write: PASSTHROUGH allow_host_write: true }
  msr { msr: "0x1a0" read: CONST write: GP value: 0x850089 }
  msr { msr: "0xc0000103" read: SHADOW write: SHADOW }
  msr { msr: "0x277" read: SHADOW write: SHADOW value: 0x0007040600070406
        writable_mask: 0x0707070707070707 on_reserved_bits: RESERVED_DROP }
  msr { msr: "0x199" read: PASSTHROUGH write: IGNORE }
  msr { range { first: "0x40000000" last: "0x400000ff" } read: GP write: GP }
  cpuid { leaf: 1 source: HOST clear { ecx: 0x80000000 } set { edx: 0x1 } }
  cpuid { leaf: 7 subleaf: 1 source: CONST set { eax: 0x7 } }
  io_port { first: 0x90 last: 0x93 }
  io_port { first: 0x510 last: 0x513 }
)";
// Domain 5 only: leaf 6 is the policy's there, Xen's own in domain 6.
constexpr char kLeaf6[] = R"(
  cpuid { leaf: 6 source: CONST
          set { eax: 0x11111111 ebx: 0x22222222 ecx: 0x33333333 edx: 0x44444444 } }
)";
constexpr uint32_t kEnforcing = 5, kLearning = 6;
constexpr uint32_t kShadowMsr = 0xc0000103, kGpMsr = 0x1a0;

struct Domain {
  uint32_t id = 0;
  RingChannel* ring = nullptr;  // owned by `monitor`
  IoreqPage* page = nullptr;    // owned by `ports`
  std::unique_ptr<server::XenMonitor> monitor;
  std::unique_ptr<server::XenPortServer> ports;
};

struct Target {
  std::unique_ptr<hosts::SimHost> host;
  std::unique_ptr<policy::Store> store;
  std::unique_ptr<dispatch::Dispatcher> dispatcher;
  Domain domains[2];
};

// Built once, never destroyed (the monitors' destructors would poll rings
// that are gone).
Target& GetTarget() {
  static Target* target = [] {
    auto* t = new Target;
    auto host = hosts::OpenSimHost("intel-xeon-e-2136");
    RequireOk(host.status(), "the sim host");
    t->host = std::move(*host);
    const std::string text = std::string("default { unknown_msr: UNKNOWN_GP }\n") +
                             "domain { domain: 5\n" + kRules + kLeaf6 + "}\n" +
                             "domain { domain: 6 mode: LEARN\n" + kRules + "}\n";
    auto loaded = policy::ParsePolicy(text, "xen_ring_fuzz.textproto");
    RequireOk(loaded.status(), "the policy");
    auto store = policy::Store::FromPolicy(loaded->policy, loaded->source, t->host->vendor());
    RequireOk(store.status(), "the policy");
    t->store = std::move(*store);
    dispatch::DispatchOptions options;
    options.allow_host_writes = true;  // the sim host's MSRs, never a real one
    options.count_by_domain_and_msr = true;
    t->dispatcher = std::make_unique<dispatch::Dispatcher>(*t->store, *t->host, nullptr, options);
    // The vCPUs of the closing requests own their SHADOW register before any
    // input can fill the shadow store with others.
    auto session = t->dispatcher->NewSession();
    const uint32_t ids[2] = {kEnforcing, kLearning};
    for (int i = 0; i < 2; ++i) {
      for (uint32_t vcpu = 0; vcpu < 4; ++vcpu) {
        emulator::Trap trap;
        trap.domain = ids[i];
        trap.vcpu = vcpu;
        trap.mode = emulator::Mode::k64;
        trap.insn_len = 2;
        trap.insn[0] = 0x0f;
        trap.insn[1] = 0x30;
        trap.regs.gpr[emulator::kRcx] = kShadowMsr;
        const emulator::Outcome out = session->Handle(trap);
        if (out.kind != emulator::OutcomeKind::kCompleted || out.write_dropped) {
          Fail("a SHADOW write at setup is not completed");
        }
      }
      Domain& d = t->domains[i];
      d.id = ids[i];
      auto ring = std::make_unique<RingChannel>(d.id);
      d.ring = ring.get();
      d.monitor = std::make_unique<server::XenMonitor>(*t->dispatcher, std::move(ring));
      auto page = std::make_unique<IoreqPage>(d.id);
      d.page = page.get();
      d.ports = std::make_unique<server::XenPortServer>(*t->dispatcher, std::move(page));
    }
    return t;
  }();
  return *target;
}

// One input's shared memory, and Xen's side of it.
struct Run {
  Domain* d = nullptr;
  std::unique_ptr<uint8_t[]> ring_bytes;  // exactly kRingBytes
  vm_event_sring_t* sring = nullptr;
  vm_event_front_ring_t xen = {};         // Xen is the ring's front end
  std::unique_ptr<uint8_t[]> page_bytes;  // exactly one page
  uint32_t vcpus = 1;
  int port_accesses = 0;
};

ioreq_t* SlotAt(uint8_t* page, uint32_t v) { return reinterpret_cast<ioreq_t*>(page) + v; }

// The x86 state of a request: mode (bits 0-1: real, 16, 32, 64) and CPL
// (bits 2-3) as Xen reports them, which ModeOf reads back.
void SetMode(uint8_t mode, vm_event_regs_x86* r) {
  const uint32_t cpl = (mode >> 2) & 3;
  switch (mode & 3) {
    case 0:
      r->cr0 = 0x10;  // PE clear
      r->cs.ar = 0x09b;
      break;
    case 1:
      r->cr0 = 0x11;
      r->cs.ar = 0x09b;
      break;
    case 2:
      r->cr0 = 0x11;
      r->cs.ar = 0x49b;  // D
      break;
    default:
      r->cr0 = 0x80000011;
      r->msr_efer = 0xd01;  // LME, LMA
      r->cs.ar = 0x29b;     // L
      break;
  }
  r->cs.ar = r->cs.ar | (cpl << 5);
  r->ss.ar = 0x93 | (cpl << 5);
}

// Registers the monitor must give back as they were.
void SetOtherGprs(vm_event_regs_x86* r) {
  r->rsp = 0x5050505050505050, r->rbp = 0x5151515151515151;
  r->rsi = 0x5252525252525252, r->rdi = 0x5353535353535353;
  r->r8 = 0x5858585858585858, r->r9 = 0x5959595959595959;
  r->r10 = 0x6060606060606060, r->r11 = 0x6161616161616161;
  r->r12 = 0x6262626262626262, r->r13 = 0x6363636363636363;
  r->r14 = 0x6464646464646464, r->r15 = 0x6565656565656565;
}

// Xen puts `req` in its next slot and publishes it.
void Produce(Run& run, const vm_event_request_t& req) {
  std::memcpy(RING_GET_REQUEST(&run.xen, run.xen.req_prod_pvt), &req, sizeof(req));
  ++run.xen.req_prod_pvt;
  RING_PUSH_REQUESTS(&run.xen);
}

void PutRequest(Run& run, Input& in) {
  vm_event_request_t req;
  std::memset(&req, 0, sizeof(req));
  const uint8_t version = in.U8();
  req.version = version == 0 ? VM_EVENT_INTERFACE_VERSION : version;
  req.reason = in.U8();
  req.flags = in.U16();
  req.vcpu_id = in.U32();
  req.altp2m_idx = in.U16();
  in.Bytes(&req.u, 24);  // the reason's payload: mov_to_msr, cpuid, ...
  vm_event_regs_x86& r = req.data.regs.x86;
  SetMode(in.U8(), &r);
  r.rip = in.U64();
  r.rflags = in.U64();
  r.rax = in.U64();
  r.rcx = in.U64();
  r.rdx = in.U64();
  r.rbx = in.U64();
  SetOtherGprs(&r);
  Produce(run, req);
}

// Every request read is answered, and Poll says how many.
int PollMonitor(Run& run) {
  RingChannel& ch = *run.d->ring;
  const uint64_t read = ch.read(), answered = ch.answered();
  const int n = run.d->monitor->Poll();
  Require(n >= 0 && ch.read() - read == static_cast<uint64_t>(n) &&
              ch.answered() - answered == static_cast<uint64_t>(n),
          "Poll's count is not the requests read and answered");
  Require(ch.ring().rsp_prod_pvt == ch.ring().req_cons, "a request read was left unanswered");
  Require(run.sring->rsp_prod == ch.ring().rsp_prod_pvt || n == 0,
          "responses written but not published");
  return n;
}

void PutSlot(Run& run, Input& in) {
  ioreq_t* s = SlotAt(run.page_bytes.get(), in.U8() % kSlots);  // >= vcpus: out of range
  const uint8_t bits = in.U8();
  s->state = bits & 0xf;
  s->data_is_ptr = (bits >> 4) & 1;
  s->dir = (bits >> 5) & 1;
  s->df = (bits >> 6) & 1;
  s->_pad1 = (bits >> 7) & 1;
  s->type = in.U8();
  s->size = in.U32();
  s->count = in.U32();
  s->addr = in.U64();
  s->data = in.U64();
}

// Answers what is pending; the server may change only the slots it takes,
// and in them only the state (to IORESP_READY) and an IN's data.
int PollPorts(Run& run) {
  uint8_t* page = run.page_bytes.get();
  uint8_t before[kPageSize];
  std::memcpy(before, page, kPageSize);
  // A port access Xen could make: 1, 2 or 4 bytes at a 16-bit port. Others
  // are answered without a decision (all ones for a read).
  const auto well_formed = [](const ioreq_t& s) {
    return (s.size == 1 || s.size == 2 || s.size == 4) && s.addr <= 0xffff;
  };
  int pending = 0;
  for (uint32_t v = 0; v < run.vcpus; ++v) {
    const ioreq_t* s = SlotAt(before, v);
    if (s->state == STATE_IOREQ_READY && s->type == IOREQ_TYPE_PIO && well_formed(*s)) ++pending;
  }
  const int n = run.d->ports->Poll();
  Require(n == pending, "the port server did not answer every pending port access");
  run.port_accesses += n;
  for (uint32_t v = 0; v < kSlots; ++v) {
    const ioreq_t& b = *SlotAt(before, v);
    const ioreq_t& a = *SlotAt(page, v);
    if (v >= run.vcpus || b.state != STATE_IOREQ_READY) {
      Require(std::memcmp(&a, &b, sizeof(ioreq_t)) == 0,
              "the port server changed an ioreq slot it did not take");
      continue;
    }
    // Xen resumes the vCPU on IORESP_READY; NONE, READY or INPROCESS
    // would leave it waiting, anything else crashes the domain.
    Require(a.state == STATE_IORESP_READY, "a slot taken is not left IORESP_READY");
    if (fuzz::TheTally().on()) {
      fuzz::TheTally().Add(absl::StrCat(
          "ioreq ", b.type == IOREQ_TYPE_PIO ? "pio" : "other type", b.dir == IOREQ_READ ? " read" : " write",
          b.data_is_ptr ? " data_is_ptr" : "", b.count > 1 ? " string" : "",
          well_formed(b) ? "" : " malformed", " -> ",
          b.dir == IOREQ_READ && !b.data_is_ptr ? "data answered" : "done, data untouched"));
    }
    Require(a.addr == b.addr && a.count == b.count && a.size == b.size &&
                a.vp_eport == b.vp_eport && a._pad0 == b._pad0 &&
                a.data_is_ptr == b.data_is_ptr && a.dir == b.dir && a.df == b.df &&
                a._pad1 == b._pad1 && a.type == b.type,
            "the port server changed a field of a taken slot other than state and data");
    if (b.type == IOREQ_TYPE_PIO && b.dir == IOREQ_READ && !b.data_is_ptr && !well_formed(b)) {
      Require(a.data == ~uint64_t{0}, "a malformed port read did not read all ones");
    } else if (b.type == IOREQ_TYPE_PIO && b.dir == IOREQ_READ && !b.data_is_ptr) {
      const uint8_t size = static_cast<uint8_t>(b.size);
      const uint64_t mask = size >= 4 ? 0xffffffffu : (uint64_t{1} << (8 * size)) - 1;
      Require(a.data <= mask, "an IN's data is wider than the access");
    } else {
      Require(a.data == b.data, "data written for an OUT, a string or a refused request");
    }
  }
  return n;
}

// Xen takes its answers: IORESP_READY to NONE, on its vCPUs' slots.
void XenTakesAnswers(Run& run) {
  for (uint32_t v = 0; v < run.vcpus; ++v) {
    ioreq_t* s = SlotAt(run.page_bytes.get(), v);
    if (s->state == STATE_IORESP_READY) s->state = STATE_IOREQ_NONE;
  }
}

void Scribble(Run& run, Input& in) {
  const size_t offset = in.U16() % kRingBytes;
  size_t n = in.U8() % 16 + 1;
  if (n > kRingBytes - offset) n = kRingBytes - offset;
  in.Bytes(run.ring_bytes.get() + offset, n);
}

// The closing vm_event request, `kind` (0-3), and its one right answer.
void FinalRequest(Run& run, uint32_t kind, uint32_t vcpu, uint32_t insn_length) {
  RingChannel& ch = *run.d->ring;
  ch.Refill();
  // Xen starts over where the monitor is, with one honest request.
  run.xen.req_prod_pvt = ch.ring().req_cons;
  const RING_IDX at = run.xen.req_prod_pvt;
  vm_event_request_t req;
  std::memset(&req, 0, sizeof(req));
  req.version = VM_EVENT_INTERFACE_VERSION;
  req.flags = VM_EVENT_FLAG_VCPU_PAUSED;
  req.vcpu_id = vcpu;
  req.altp2m_idx = 3;
  vm_event_regs_x86& r = req.data.regs.x86;
  SetMode(3, &r);  // 64-bit, CPL 0
  SetOtherGprs(&r);
  r.rip = 0xffffffff81000100;
  r.rflags = 0x246;
  switch (kind) {
    case 0:
      req.reason = VM_EVENT_REASON_CPUID;
      req.u.cpuid.leaf = 6;
      req.u.cpuid.insn_length = insn_length;
      // Xen's answer, upper halves stale: CPUID zero-extends in long mode.
      r.rax = 0xfeedface00000a0b, r.rbx = 0xfeedface00000b0c;
      r.rcx = 0xfeedface00000c0d, r.rdx = 0xfeedface00000d0e;
      break;
    case 1:
    case 2:
      req.reason = VM_EVENT_REASON_MOV_TO_MSR;
      req.u.mov_to_msr.msr = kind == 1 ? kGpMsr : kShadowMsr;
      req.u.mov_to_msr.new_value = 0x1234;
      r.rcx = req.u.mov_to_msr.msr;
      r.rax = 0x1234;
      break;
    default:
      req.reason = VM_EVENT_REASON_GUEST_REQUEST;
      break;
  }
  Produce(run, req);
  Require(PollMonitor(run) == 1, "the request after the garbage was not answered once");
  vm_event_response_t rsp;
  std::memcpy(&rsp, RING_GET_RESPONSE(&run.xen, at), sizeof(rsp));
  Require(run.sring->rsp_prod == at + 1, "the answer after the garbage was not published");
  CheckAnswer(req, rsp);
  const uint32_t flags[4] = {
      VM_EVENT_FLAG_VCPU_PAUSED | VM_EVENT_FLAG_SET_REGISTERS,  // CPUID
      VM_EVENT_FLAG_VCPU_PAUSED | VM_EVENT_FLAG_DENY,           // GP write
      VM_EVENT_FLAG_VCPU_PAUSED,                                // SHADOW write
      VM_EVENT_FLAG_VCPU_PAUSED,                                // not decided
  };
  Require(rsp.flags == flags[kind], "the request after the garbage got the wrong flags");
  if (kind != 0) return;
  const vm_event_regs_x86& o = rsp.data.regs.x86;
  if (run.d->id == kEnforcing) {  // the policy's CONST leaf
    Require(o.rax == 0x11111111 && o.rbx == 0x22222222 && o.rcx == 0x33333333 &&
                o.rdx == 0x44444444,
            "the CPUID after the garbage is not the policy's CONST leaf");
  } else {  // no rule: Xen's own answer
    Require(o.rax == 0xa0b && o.rbx == 0xb0c && o.rcx == 0xc0d && o.rdx == 0xd0e,
            "the CPUID after the garbage is not Xen's answer");
  }
  Require(o.rip == r.rip + insn_length, "the CPUID after the garbage left RIP behind");
}

// The closing port access: an IN from the sim host's device at 0x92, or a
// dword IN from 0x80, which no device drives (denied in domain 5; granted
// but deviceless in the learning domain 6): all ones.
void FinalPortAccess(Run& run, bool dword, uint32_t vcpu) {
  PollPorts(run);
  XenTakesAnswers(run);
  const uint32_t v = vcpu % run.vcpus;
  ioreq_t* s = SlotAt(run.page_bytes.get(), v);
  std::memset(s, 0, sizeof(*s));
  s->addr = dword ? 0x80 : 0x92;
  s->data = 0x5a5a5a5a5a5a5a5a;  // stale
  s->count = 1;
  s->size = dword ? 4 : 1;
  s->vp_eport = 100 + v;
  s->dir = IOREQ_READ;
  s->type = IOREQ_TYPE_PIO;
  s->state = STATE_IOREQ_READY;
  Require(PollPorts(run) == 1, "the port access after the garbage was not answered once");
  Require(s->state == STATE_IORESP_READY && s->data == (dword ? 0xffffffffu : 0x02u),
          "the port access after the garbage read the wrong value");
}

}  // namespace

// Input (little-endian; zeros past the end):
//   setup   u8   bit 0: domain 5 (ENFORCE) or 6 (LEARN); bits 1-2: the
//                closing request (CPUID leaf 6, WRMSR GP, WRMSR SHADOW,
//                GUEST_REQUEST); bit 3: closing IN from 0x92 or dword from
//                0x80; bits 4-5: their vCPU; bit 7: CPUID length 3, else 2
//   vcpus   u8   the ioreq page serves 1 + vcpus % 128 vCPUs
//   start   u32  both ring indices start here
//   then up to kMaxOps operations, an opcode byte % 8 each:
//   0 request  version u8 (0: Xen's), reason u8, flags u16, vcpu_id u32,
//              altp2m_idx u16, u[24], mode u8 (bits 0-1 real/16/32/64,
//              2-3 CPL), rip, rflags, rax, rcx, rdx, rbx u64: put in Xen's
//              next slot and published
//   1 lie      u32: req_prod = Xen's own index + this
//   2 poll the monitor
//   3 slot     index u8 (% 128), state:4 data_is_ptr dir df _pad1 u8,
//              type u8, size u32, count u32, addr u64, data u64
//   4 poll the port server (until kMaxPortAccesses)
//   5 scribble offset u16, length u8 (% 16 + 1), bytes: into the ring
//   6 Xen takes its ioreq answers (IORESP_READY to NONE)
//   7 poll both
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Target& t = GetTarget();
  Input in(data, size);
  const uint8_t setup = in.U8();
  Run run;
  run.d = &t.domains[setup & 1];
  run.vcpus = 1 + in.U8() % kSlots;
  const RING_IDX start = in.U32();

  run.ring_bytes.reset(new uint8_t[kRingBytes]());
  run.sring = reinterpret_cast<vm_event_sring_t*>(run.ring_bytes.get());
  run.d->ring->Attach(run.sring, start);
  FRONT_RING_ATTACH(&run.xen, run.sring, start, kPageSize);
  run.page_bytes.reset(new uint8_t[kPageSize]());
  for (uint32_t v = 0; v < kSlots; ++v) SlotAt(run.page_bytes.get(), v)->vp_eport = 100 + v;
  run.d->page->Attach(reinterpret_cast<shared_iopage_t*>(run.page_bytes.get()), run.vcpus);

  for (int ops = 0; ops < kMaxOps && !in.empty(); ++ops) {
    switch (in.U8() % 8) {
      case 0:
        PutRequest(run, in);
        break;
      case 1:  // the producer index lies: ahead, behind, past the ring
        run.sring->req_prod = run.xen.req_prod_pvt + in.U32();
        break;
      case 2:
        PollMonitor(run);
        break;
      case 3:
        PutSlot(run, in);
        break;
      case 4:
        if (run.port_accesses < kMaxPortAccesses) PollPorts(run);
        break;
      case 5:
        Scribble(run, in);
        break;
      case 6:
        XenTakesAnswers(run);
        break;
      default:
        PollMonitor(run);
        if (run.port_accesses < kMaxPortAccesses) PollPorts(run);
        break;
    }
  }

  FinalRequest(run, (setup >> 1) & 3, (setup >> 4) & 3, (setup & 0x80) ? 3 : 2);
  FinalPortAccess(run, (setup & 0x08) != 0, (setup >> 4) & 3);
  run.d->ring->Detach();
  run.d->page->Detach();
  return 0;
}
