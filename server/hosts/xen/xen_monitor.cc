#include "server/hosts/xen/xen_monitor.h"

#include <utility>


namespace pvemu::server {

emulator::Trap TrapFromMsrWrite(const VmEvent& event) {
  emulator::Trap trap;
  trap.domain = event.domain;
  trap.vcpu = event.vcpu;
  trap.mode = event.mode;
  trap.cpl = event.cpl;
  trap.insn_len = 2;
  trap.insn[0] = 0x0f;  // WRMSR
  trap.insn[1] = 0x30;
  trap.regs = event.regs;
  trap.regs.gpr[emulator::kRcx] = event.msr;
  trap.regs.gpr[emulator::kRax] = event.new_value & 0xffffffffu;
  trap.regs.gpr[emulator::kRdx] = event.new_value >> 32;
  return trap;
}

XenMonitor::XenMonitor(dispatch::Dispatcher& dispatcher, std::unique_ptr<VmEventChannel> channel)
    : dispatcher_(dispatcher), session_(dispatcher.NewSession()), channel_(std::move(channel)) {}

XenMonitor::~XenMonitor() { Stop(); }

VmEventResponse XenMonitor::Decide(const VmEvent& event) {
  VmEventResponse r;
  r.vcpu = event.vcpu;
  r.release_vcpu = event.vcpu_paused;
  r.raw_reason = event.raw_reason;
  r.raw_altp2m_idx = event.raw_altp2m_idx;
  r.raw_version = event.raw_version;
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
  if (thread_.joinable()) return;
  stop_.store(false, std::memory_order_relaxed);
  thread_ = std::thread([this] {
    while (!stop_.load(std::memory_order_acquire)) {
      absl::Status s = channel_->Wait(100);
      if (!s.ok()) {
        absl::MutexLock lock(&mu_);
        loop_status_ = std::move(s);
        return;
      }
      Poll();
    }
  });
}

void XenMonitor::Stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  // Whatever arrived since the last Poll: answered, never left paused.
  if (channel_ != nullptr) Poll();
}

absl::Status XenMonitor::loop_status() const {
  absl::MutexLock lock(&mu_);
  return loop_status_;
}

XenMonitorStats XenMonitor::stats() const {
  XenMonitorStats s;
  s.events = events_.load(std::memory_order_relaxed);
  s.msr_writes = msr_writes_.load(std::memory_order_relaxed);
  s.denied = denied_.load(std::memory_order_relaxed);
  s.other = other_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace pvemu::server
