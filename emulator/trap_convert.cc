#include "emulator/trap_convert.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace pvemu::emulator {

// An OutcomeKind is its v1.Outcome.Kind number: the conversions below, the
// replay totals (dispatch/replay.h) and the expectations cast between them.
static_assert(static_cast<int>(OutcomeKind::kCompleted) == pvemu::v1::Outcome::COMPLETED);
static_assert(static_cast<int>(OutcomeKind::kException) == pvemu::v1::Outcome::EXCEPTION);
static_assert(static_cast<int>(OutcomeKind::kUnhandled) == pvemu::v1::Outcome::UNHANDLED);
static_assert(static_cast<int>(OutcomeKind::kDeviceIo) == pvemu::v1::Outcome::DEVICE_IO);
Mode ModeFromProto(pvemu::v1::CpuMode mode) {
  switch (mode) {
    case pvemu::v1::MODE_REAL:
      return Mode::kReal;
    case pvemu::v1::MODE_16:
      return Mode::k16;
    case pvemu::v1::MODE_32:
      return Mode::k32;
    default:
      return Mode::k64;
  }
}

pvemu::v1::CpuMode ModeToProto(Mode mode) {
  switch (mode) {
    case Mode::kReal:
      return pvemu::v1::MODE_REAL;
    case Mode::k16:
      return pvemu::v1::MODE_16;
    case Mode::k32:
      return pvemu::v1::MODE_32;
    case Mode::k64:
      break;
  }
  return pvemu::v1::MODE_64;
}

// Registers in x86 encoding order (the index into Regs::gpr).
void RegsFromProto(const pvemu::v1::Registers& msg, Regs* regs) {
  const uint64_t gpr[16] = {msg.rax(), msg.rcx(), msg.rdx(), msg.rbx(), msg.rsp(), msg.rbp(),
                            msg.rsi(), msg.rdi(), msg.r8(),  msg.r9(),  msg.r10(), msg.r11(),
                            msg.r12(), msg.r13(), msg.r14(), msg.r15()};
  std::memcpy(regs->gpr, gpr, sizeof(gpr));
  regs->rip = msg.rip();
  // RFLAGS bit 1 is reserved and always reads as 1.
  regs->rflags = msg.rflags() | 0x2;
}

void RegsToProto(const Regs& regs, pvemu::v1::Registers* msg) {
  msg->set_rax(regs.gpr[kRax]);
  msg->set_rcx(regs.gpr[kRcx]);
  msg->set_rdx(regs.gpr[kRdx]);
  msg->set_rbx(regs.gpr[kRbx]);
  msg->set_rsp(regs.gpr[kRsp]);
  msg->set_rbp(regs.gpr[kRbp]);
  msg->set_rsi(regs.gpr[kRsi]);
  msg->set_rdi(regs.gpr[kRdi]);
  msg->set_r8(regs.gpr[kR8]);
  msg->set_r9(regs.gpr[kR9]);
  msg->set_r10(regs.gpr[kR10]);
  msg->set_r11(regs.gpr[kR11]);
  msg->set_r12(regs.gpr[kR12]);
  msg->set_r13(regs.gpr[kR13]);
  msg->set_r14(regs.gpr[kR14]);
  msg->set_r15(regs.gpr[kR15]);
  msg->set_rip(regs.rip);
  msg->set_rflags(regs.rflags);
}

absl::StatusOr<Trap> TrapFromProto(const pvemu::v1::Trap& msg) {
  if (msg.insn().size() > static_cast<size_t>(kMaxInsnLength)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "trap for domain %u vcpu %u carries %u instruction bytes; an x86 "
        "instruction is at most 15 bytes, send only the bytes at RIP",
        msg.domain(), msg.vcpu(), msg.insn().size()));
  }
  if (msg.cpl() > 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "trap for domain %u vcpu %u has cpl %u; the privilege level is 0..3",
        msg.domain(), msg.vcpu(), msg.cpl()));
  }
  if (!pvemu::v1::CpuMode_IsValid(msg.mode())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "trap for domain %u vcpu %u has mode %d; the modes are MODE_REAL, MODE_16, "
        "MODE_32 and MODE_64 (1..4; 0 means MODE_64)",
        msg.domain(), msg.vcpu(), msg.mode()));
  }
  // 0xffffffff means "no domain" to the compiled policy and, with vCPU
  // 0xffffffff, is the empty key of the shadow-register table: a trap from
  // it would share registers with whichever vCPU comes next.
  if (msg.domain() == 0xffffffffu) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "trap for domain %u (0xffffffff) vcpu %u: that domain id is reserved", msg.domain(),
        msg.vcpu()));
  }
  Trap trap;
  trap.domain = msg.domain();
  trap.vcpu = msg.vcpu();
  trap.mode = ModeFromProto(msg.mode());
  trap.cpl = static_cast<uint8_t>(msg.cpl());
  trap.insn_len = static_cast<uint8_t>(msg.insn().size());
  std::memcpy(trap.insn, msg.insn().data(), trap.insn_len);
  RegsFromProto(msg.regs(), &trap.regs);
  trap.host_tsc = msg.host_tsc();
  return trap;
}

void TrapToProto(const Trap& trap, pvemu::v1::Trap* msg) {
  msg->set_domain(trap.domain);
  msg->set_vcpu(trap.vcpu);
  msg->set_mode(ModeToProto(trap.mode));
  msg->set_cpl(trap.cpl);
  msg->set_insn(reinterpret_cast<const char*>(trap.insn), trap.insn_len);
  RegsToProto(trap.regs, msg->mutable_regs());
  msg->set_host_tsc(trap.host_tsc);
}

void OutcomeToProto(const Trap& trap, const Outcome& outcome, pvemu::v1::Outcome* msg) {
  msg->set_kind(static_cast<pvemu::v1::Outcome::Kind>(outcome.kind));
  RegsToProto(outcome.RegsAfter(trap.regs), msg->mutable_regs());
  msg->set_write_dropped(outcome.write_dropped);
  msg->set_port_denied(outcome.port_denied);
  if (outcome.kind == OutcomeKind::kException) {
    auto* exc = msg->mutable_exception();
    exc->set_vector(static_cast<pvemu::v1::Vector>(outcome.vector));
    if (outcome.has_error_code) exc->set_error_code(outcome.error_code);
  } else {
    msg->clear_exception();
  }
}

}  // namespace pvemu::emulator
