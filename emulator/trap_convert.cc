#include "emulator/trap_convert.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace pvemu::emulator {
namespace {

// Registers in x86 encoding order, as pointers-to-member of the message's
// accessors, so the two conversions cannot drift apart.
using Getter = uint64_t (pvemu::v1::Registers::*)() const;
using Setter = void (pvemu::v1::Registers::*)(uint64_t);
struct RegField {
  Getter get;
  Setter set;
};
constexpr RegField kGprFields[16] = {
    {&pvemu::v1::Registers::rax, &pvemu::v1::Registers::set_rax},
    {&pvemu::v1::Registers::rcx, &pvemu::v1::Registers::set_rcx},
    {&pvemu::v1::Registers::rdx, &pvemu::v1::Registers::set_rdx},
    {&pvemu::v1::Registers::rbx, &pvemu::v1::Registers::set_rbx},
    {&pvemu::v1::Registers::rsp, &pvemu::v1::Registers::set_rsp},
    {&pvemu::v1::Registers::rbp, &pvemu::v1::Registers::set_rbp},
    {&pvemu::v1::Registers::rsi, &pvemu::v1::Registers::set_rsi},
    {&pvemu::v1::Registers::rdi, &pvemu::v1::Registers::set_rdi},
    {&pvemu::v1::Registers::r8, &pvemu::v1::Registers::set_r8},
    {&pvemu::v1::Registers::r9, &pvemu::v1::Registers::set_r9},
    {&pvemu::v1::Registers::r10, &pvemu::v1::Registers::set_r10},
    {&pvemu::v1::Registers::r11, &pvemu::v1::Registers::set_r11},
    {&pvemu::v1::Registers::r12, &pvemu::v1::Registers::set_r12},
    {&pvemu::v1::Registers::r13, &pvemu::v1::Registers::set_r13},
    {&pvemu::v1::Registers::r14, &pvemu::v1::Registers::set_r14},
    {&pvemu::v1::Registers::r15, &pvemu::v1::Registers::set_r15},
};

}  // namespace

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

void RegsFromProto(const pvemu::v1::Registers& msg, Regs* regs) {
  for (int i = 0; i < 16; ++i) regs->gpr[i] = (msg.*kGprFields[i].get)();
  regs->rip = msg.rip();
  // RFLAGS bit 1 is reserved and always reads as 1.
  regs->rflags = msg.rflags() | 0x2;
}

void RegsToProto(const Regs& regs, pvemu::v1::Registers* msg) {
  for (int i = 0; i < 16; ++i) (msg->*kGprFields[i].set)(regs.gpr[i]);
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

void OutcomeToProto(const Outcome& outcome, pvemu::v1::Outcome* msg) {
  msg->set_kind(static_cast<pvemu::v1::Outcome::Kind>(outcome.kind));
  RegsToProto(outcome.regs, msg->mutable_regs());
  if (outcome.kind == OutcomeKind::kException) {
    auto* exc = msg->mutable_exception();
    exc->set_vector(static_cast<pvemu::v1::Vector>(outcome.vector));
    if (outcome.has_error_code) exc->set_error_code(outcome.error_code);
  } else {
    msg->clear_exception();
  }
}

}  // namespace pvemu::emulator
