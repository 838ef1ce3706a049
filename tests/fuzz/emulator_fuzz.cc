// Fuzz body for decode + emulate, in the style of Xen's userspace x86
// emulator harness: the input chooses the mode, CPL, registers, instruction
// bytes and the result of every Domain and Host hook. Checks the Outcome
// contracts and aborts on a violation:
// - EXCEPTION and UNHANDLED leave every register as it was;
// - COMPLETED advances RIP by the decoded length (wrapped to the mode), and
//   changes no register other than RAX/RBX/RCX/RDX, and outside 64-bit mode
//   not their upper halves;
// - the host sees a write only for a PASSTHROUGH rule that allows it.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "emulator/emulate.h"
#include "tests/emulator/fakes.h"

namespace {

using namespace pvemu::emulator;  // NOLINT: a fuzz body, not a library

// Reads fields from the input; zeros once it runs out.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{U8()} << (8 * i);
    return v;
  }
  size_t Rest(uint8_t* out, size_t max) {
    size_t n = 0;
    while (n < max && pos_ < size_) out[n++] = data_[pos_++];
    return n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

void Require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const uint8_t flags = in.U8();
  const uint8_t policy = in.U8();
  const uint8_t hooks = in.U8();

  Trap trap;
  trap.mode = static_cast<Mode>(flags & 3);
  trap.cpl = (flags >> 2) & 3;
  trap.vcpu = (flags >> 4) & 3;

  testing::FakeDomain domain;
  MsrDecision& d = domain.default_decision;
  d.read = static_cast<MsrRead>(policy % 5);
  d.write = static_cast<MsrWrite>((policy / 5) % 4);
  d.drop_reserved = (policy & 0x20) != 0;
  d.host_write_allowed = (policy & 0x40) != 0;
  d.value_from_host = (policy & 0x80) != 0;
  d.audit = (hooks & 0x80) != 0;
  d.unknown = (hooks & 0x40) != 0;
  d.value = in.U64();
  d.writable_mask = (hooks & 0x20) ? in.U64() : ~uint64_t{0};
  domain.shadow_storage = (hooks & 1) != 0;
  domain.ports_allowed = (hooks & 2) != 0;
  domain.vpmu_on = (hooks & 4) != 0;
  domain.tsc_offset = in.U64();
  domain.cpuid = {static_cast<uint32_t>(in.U64()), 1, 2, 3};
  if (hooks & 0x10) {
    // A shadow register that has been used already.
    domain.touched.insert({trap.vcpu, 0});
    domain.shadows[{trap.vcpu, 0}] = in.U64();
  }

  testing::FakeHost host;
  host.write_ok = (hooks & 8) != 0;
  const uint64_t host_value = in.U64();
  // The host knows the MSR in RCX (and TSC_AUX) only if bit 0 says so.
  const uint8_t host_flags = in.U8();

  for (int r : {kRax, kRcx, kRdx, kRbx, kRsp, kRsi, kR8, kR15}) {
    trap.regs.gpr[r] = in.U64();
  }
  trap.regs.rip = in.U64();
  trap.regs.rflags = (in.U64() & 0x3fffff) | 0x2;
  trap.host_tsc = in.U64();
  if (host_flags & 1) {
    host.msrs[static_cast<uint32_t>(trap.regs.gpr[kRcx])] = host_value;
  }
  if (host_flags & 2) host.msrs[kMsrTscAux] = host_value >> 3;
  // The host models a device at the port in DX (and at the imm8 port 0x80).
  if (host_flags & 4) {
    host.ports[static_cast<uint16_t>(trap.regs.gpr[kRdx])] = static_cast<uint32_t>(host_value);
    host.ports[0x80] = static_cast<uint32_t>(host_value >> 32);
  }
  trap.insn_len = static_cast<uint8_t>(in.Rest(trap.insn, kMaxInsnLength));

  Instruction insn;
  DecodeError error = DecodeError::kOk;
  const Outcome out = DecodeAndEmulate(trap, domain, host, &insn, &error);

  // Every outcome as the register file it leaves; one that is not
  // completed carries no writes at all.
  const Regs after = out.RegsAfter(trap.regs);
  if (out.kind != OutcomeKind::kCompleted) Require(out.written == 0);
  Require(out.written < (1u << Outcome::kWritableGprs));
  const bool port_io = error == DecodeError::kOk &&
                       (insn.kind == InsnKind::kIn || insn.kind == InsnKind::kOut);
  switch (out.kind) {
    case OutcomeKind::kException:
    case OutcomeKind::kUnhandled:
      Require(std::memcmp(&after, &trap.regs, sizeof(Regs)) == 0);
      break;
    case OutcomeKind::kDeviceIo:
      // Only a granted port without a host device; nothing changed.
      Require(port_io && domain.ports_allowed && !out.port_denied && !out.write_dropped);
      Require(std::memcmp(&after, &trap.regs, sizeof(Regs)) == 0);
      break;
    case OutcomeKind::kCompleted: {
      Require(error == DecodeError::kOk);
      uint64_t rip = trap.regs.rip + insn.length;
      if (trap.mode == Mode::k32) rip &= 0xffffffffu;
      if (trap.mode == Mode::k16 || trap.mode == Mode::kReal) rip &= 0xffff;
      Require(after.rip == rip);
      for (int r = 0; r < 16; ++r) {
        const bool result_reg = r == kRax || r == kRbx || r == kRcx || r == kRdx;
        if (!result_reg) Require(after.gpr[r] == trap.regs.gpr[r]);
        if (result_reg && trap.mode != Mode::k64) {
          Require((after.gpr[r] >> 32) == (trap.regs.gpr[r] >> 32));
        }
      }
      Require((after.rflags | (1u << 16)) == (trap.regs.rflags | (1u << 16)));
      break;
    }
    default:
      std::abort();
  }
  if (host.writes > 0) {
    Require(insn.kind == InsnKind::kWrmsr && d.write == MsrWrite::kPassthrough &&
            d.host_write_allowed);
  }
  if (error != DecodeError::kOk) Require(out.kind != OutcomeKind::kCompleted);
  // The flags trap sources act on belong to completed writes and ports.
  if (out.write_dropped) {
    Require(out.kind == OutcomeKind::kCompleted &&
            (insn.kind == InsnKind::kWrmsr || insn.kind == InsnKind::kOut));
  }
  if (out.port_denied) Require(port_io && !domain.ports_allowed);
  return 0;
}
