#include "server/xen/xen_port_server.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pvemu::server {

emulator::Trap TrapFromPortAccess(const PortAccess& access) {
  emulator::Trap trap;
  trap.domain = access.domain;
  trap.vcpu = access.vcpu;
  trap.mode = emulator::Mode::k32;
  trap.cpl = 0;
  // IN eAX,DX is EC (byte) / ED; OUT DX,eAX is EE (byte) / EF; 66 makes the
  // 32-bit form 16-bit.
  uint8_t n = 0;
  if (access.size == 2) trap.insn[n++] = 0x66;
  const uint8_t base = access.write ? 0xee : 0xec;
  trap.insn[n++] = access.size == 1 ? base : static_cast<uint8_t>(base + 1);
  trap.insn_len = n;
  trap.regs.gpr[emulator::kRdx] = access.port;
  if (access.write) trap.regs.gpr[emulator::kRax] = access.value;
  return trap;
}

uint32_t PortReadValue(const PortAccess& access, const emulator::Trap& trap,
                       const emulator::Outcome& outcome) {
  const uint32_t mask = access.size >= 4 ? 0xffffffffu : (1u << (8 * access.size)) - 1;
  // Completed: the value the emulator put in eAX (all ones for a port the
  // policy does not grant). Anything else: no device answered, and a bus
  // nobody drives reads all ones.
  if (outcome.kind != emulator::OutcomeKind::kCompleted) return mask;
  return static_cast<uint32_t>(outcome.GprAfter(emulator::kRax, trap.regs)) & mask;
}

XenPortServer::XenPortServer(dispatch::Dispatcher& dispatcher,
                             std::unique_ptr<IoreqChannel> channel)
    : session_(dispatcher.NewSession()), channel_(std::move(channel)) {}

XenPortServer::~XenPortServer() { Stop(); }

int XenPortServer::Poll() {
  int n = 0;
  PortAccess access;
  while (channel_->Next(&access)) {
    const emulator::Trap trap = TrapFromPortAccess(access);
    const emulator::Outcome out = session_->Handle(trap);
    if (out.port_denied) denied_.fetch_add(1, std::memory_order_relaxed);
    if (access.string) strings_.fetch_add(1, std::memory_order_relaxed);
    channel_->Respond(access.vcpu, access.write ? 0 : PortReadValue(access, trap, out));
    accesses_.fetch_add(1, std::memory_order_relaxed);
    ++n;
  }
  return n;
}

void XenPortServer::Start() {
  loop_.Start(absl::StrCat("the ioreq server of domain ", channel_->domain()),
              [this](int timeout_ms) { return channel_->Wait(timeout_ms); }, [this] { Poll(); });
}

void XenPortServer::Stop() {
  loop_.Stop();
  if (channel_ != nullptr) Poll();
}

XenPortServerStats XenPortServer::stats() const {
  XenPortServerStats s;
  s.accesses = accesses_.load(std::memory_order_relaxed);
  s.denied = denied_.load(std::memory_order_relaxed);
  s.strings = strings_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace pvemu::server
