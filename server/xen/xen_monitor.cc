#include "server/xen/xen_monitor.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "absl/strings/string_view.h"
#include "emulator/host.h"

namespace pvemu::server {

namespace {

// The two-byte instruction 0f `opcode` at the event's vCPU state.
emulator::Trap TwoByteTrap(const VmEvent& event, uint8_t opcode) {
  emulator::Trap trap;
  trap.domain = event.domain;
  trap.vcpu = event.vcpu;
  trap.mode = event.mode;
  trap.cpl = event.cpl;
  trap.insn_len = 2;
  trap.insn[0] = 0x0f;
  trap.insn[1] = opcode;
  trap.regs = event.regs;
  return trap;
}

}  // namespace

emulator::Trap TrapFromMsrWrite(const VmEvent& event) {
  emulator::Trap trap = TwoByteTrap(event, 0x30);  // WRMSR
  trap.regs.gpr[emulator::kRcx] = event.msr;
  trap.regs.gpr[emulator::kRax] = event.new_value & 0xffffffffu;
  trap.regs.gpr[emulator::kRdx] = event.new_value >> 32;
  return trap;
}

emulator::Trap TrapFromCpuid(const VmEvent& event) {
  emulator::Trap trap = TwoByteTrap(event, 0xa2);  // CPUID
  // The request's RAX..RDX already hold Xen's answer; the input was the leaf
  // and subleaf Xen reports apart.
  trap.regs.gpr[emulator::kRax] = event.leaf;
  trap.regs.gpr[emulator::kRcx] = event.subleaf;
  return trap;
}

// The dispatcher's host for everything but CPUID, which answers with what
// Xen computed for this guest's leaf (the event's EAX..EDX): the base a CPUID
// rule works from on a Xen guest is Xen's view of the guest, not dom0's
// CPUID. Set before each CPUID trap; used by the monitor's thread only.
class XenMonitor::XenAnswerHost final : public emulator::Host {
 public:
  explicit XenAnswerHost(emulator::Host& host) : host_(host) {}
  void Set(const VmEvent& event) {
    xen_answer_ = {static_cast<uint32_t>(event.regs.gpr[emulator::kRax]),
                   static_cast<uint32_t>(event.regs.gpr[emulator::kRbx]),
                   static_cast<uint32_t>(event.regs.gpr[emulator::kRcx]),
                   static_cast<uint32_t>(event.regs.gpr[emulator::kRdx])};
  }
  pvemu::v1::Vendor vendor() const override { return host_.vendor(); }
  absl::string_view description() const override { return host_.description(); }
  uint64_t tsc_khz() const override { return host_.tsc_khz(); }
  bool ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) override {
    return host_.ReadMsr(cpu, index, value);
  }
  bool WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) override {
    return host_.WriteMsr(cpu, index, value);
  }
  // A CPUID trap asks for its own leaf only, which is the one Xen answered.
  emulator::CpuidRegs Cpuid(uint32_t, uint32_t) override { return xen_answer_; }
  bool PortIo(uint16_t port, uint8_t width, bool write, uint32_t* value) override {
    return host_.PortIo(port, width, write, value);
  }

 private:
  emulator::Host& host_;
  emulator::CpuidRegs xen_answer_;
};

XenMonitor::XenMonitor(dispatch::Dispatcher& dispatcher, std::unique_ptr<VmEventChannel> channel)
    : host_(std::make_unique<XenAnswerHost>(dispatcher.host())),
      session_(dispatcher.NewSession(*host_)),
      channel_(std::move(channel)) {}

XenMonitor::~XenMonitor() { Stop(); }

VmEventResponse XenMonitor::Decide(const VmEvent& event) {
  VmEventResponse r;
  r.vcpu = event.vcpu;
  r.release_vcpu = event.vcpu_paused;
  r.raw_reason = event.raw_reason;
  r.raw_altp2m_idx = event.raw_altp2m_idx;
  r.raw_version = event.raw_version;
  if (event.kind == VmEvent::Kind::kCpuid) {
    cpuid_.fetch_add(1, std::memory_order_relaxed);
    DecideCpuid(event, &r);
    return r;
  }
  if (event.kind != VmEvent::Kind::kMsrWrite) {
    other_.fetch_add(1, std::memory_order_relaxed);
    return r;  // not ours to decide: let Xen carry on
  }
  msr_writes_.fetch_add(1, std::memory_order_relaxed);
  const emulator::Outcome out = session_->Handle(TrapFromMsrWrite(event));
  switch (out.kind) {
    case emulator::OutcomeKind::kException:
      r.deny = true;
      break;
    case emulator::OutcomeKind::kCompleted:
      // The emulator says whether the write took effect (IGNORE, a dropped
      // reserved-bit change): one trap, one outcome, one policy generation.
      r.deny = out.write_dropped;
      break;
    case emulator::OutcomeKind::kUnhandled:
    case emulator::OutcomeKind::kDeviceIo:
      // WRMSR is always decided; should the emulator ever not, the write
      // does not happen.
      r.deny = true;
      break;
  }
  if (r.deny) denied_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

void XenMonitor::DecideCpuid(const VmEvent& event, VmEventResponse* r) {
  host_->Set(event);
  const emulator::Outcome out = session_->Handle(TrapFromCpuid(event));
  // Completed: the policy's answer. Anything else (the emulator completes
  // every CPUID; Xen itself raises the #GP of CPUID faulting before any
  // event, hvm.c hvm_vmexit_cpuid): Xen's own answer, which the event
  // carries. Either way the vCPU must move past the instruction, or it would
  // execute CPUID again and trap again: Xen advances RIP only when no event
  // was sent (svm.c/vmx.c, the CPUID exit: `if ( !rc ) update_guest_eip`).
  r->set_registers = true;
  r->regs = out.RegsAfter(event.regs);
  // Xen's length, not the emulator's 2: a prefixed CPUID is longer.
  r->regs.rip = event.regs.rip + event.insn_length;
  if (event.mode != emulator::Mode::k64) r->regs.rip &= 0xffffffffu;
}

int XenMonitor::Poll() {
  int n = 0;
  VmEvent event;
  while (channel_->Next(&event)) {
    channel_->Respond(Decide(event));
    events_.fetch_add(1, std::memory_order_relaxed);
    ++n;
  }
  return n;
}

void XenMonitor::Start() {
  loop_.Start(absl::StrCat("the vm_event monitor of domain ", channel_->domain()),
              [this](int timeout_ms) { return channel_->Wait(timeout_ms); }, [this] { Poll(); });
}

void XenMonitor::Stop() {
  loop_.Stop();
  // Whatever arrived since the last Poll: answered, never left paused.
  if (channel_ != nullptr) Poll();
}

XenMonitorStats XenMonitor::stats() const {
  XenMonitorStats s;
  s.events = events_.load(std::memory_order_relaxed);
  s.msr_writes = msr_writes_.load(std::memory_order_relaxed);
  s.denied = denied_.load(std::memory_order_relaxed);
  s.cpuid = cpuid_.load(std::memory_order_relaxed);
  s.other = other_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace pvemu::server
