// The instruction semantics of emulator/emulate.h as templates over the
// Domain and Host types, for trap paths that know their concrete types:
// dispatch/ instantiates them with its final DomainView, so the
// per-trap policy calls are direct and can be inlined instead of virtual.
// The public functions in emulate.h are these templates instantiated with
// the abstract Domain and Host. Everything documented in emulate.h holds.
#ifndef PVEMU_EMULATOR_EMULATE_INL_H_
#define PVEMU_EMULATOR_EMULATE_INL_H_

#include <cstddef>
#include <cstdint>

#include "absl/base/attributes.h"
#include "emulator/trap.h"
#include "emulator/decoder.h"
#include "emulator/domain.h"
#include "emulator/host.h"
#include "emulator/instruction.h"

namespace pvemu::emulator {
namespace internal {


inline constexpr uint64_t kLow32 = 0xffffffffu;
inline constexpr uint64_t kRflagsRf = uint64_t{1} << 16;

inline uint32_t Iopl(const Regs& regs) {
  return static_cast<uint32_t>((regs.rflags >> 12) & 3);
}

// One Outcome is built per trap, and every path below marks it in place
// (completed, an exception, or unhandled); the public functions return that
// one object, so it is never copied. A completed instruction records the
// registers it writes (Outcome::WriteGpr), each once, computed from the
// trap's.
inline void Unhandled(Outcome* out) { out->kind = OutcomeKind::kUnhandled; }

inline void Raise(Outcome* out, Vector vector) {
  out->kind = OutcomeKind::kException;
  out->vector = vector;
  // #GP carries an error code (0 here: no selector involved); #UD has none.
  out->has_error_code = vector == Vector::kGP;
  out->error_code = 0;
}

// Marks `out` completed: RIP past the instruction, wrapped to the width of
// the instruction pointer in this mode; RF cleared as on any retirement.
inline void Complete(const Trap& trap, const Instruction& insn, Outcome* out) {
  out->kind = OutcomeKind::kCompleted;
  uint64_t rip = trap.regs.rip + insn.length;
  switch (trap.mode) {
    case Mode::k64:
      break;
    case Mode::k32:
      rip &= kLow32;
      break;
    case Mode::k16:
    case Mode::kReal:
      rip &= 0xffff;
      break;
  }
  out->rip = rip;
  out->rflags = trap.regs.rflags & ~kRflagsRf;
}

// A 32-bit register result: zero-extends in 64-bit mode (as every 32-bit
// write does there); outside it only the low 32 bits exist architecturally,
// and the upper half we were given is kept as it was.
// Always inlined: a call per register write measured 3% of the trap path.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Set32(const Trap& trap, Gpr reg, uint32_t value,
                                               Outcome* out) {
  const uint64_t kept = trap.mode == Mode::k64 ? 0 : trap.regs.gpr[reg] & ~kLow32;
  out->WriteGpr(reg, kept | value);
}

// Privileged instructions need CPL 0; real mode has no privilege levels.
inline bool PrivilegeOk(const Trap& trap) {
  return trap.mode == Mode::kReal || trap.cpl == 0;
}

// CLI/STI and port I/O are allowed when CPL <= IOPL.
inline bool IoplOk(const Trap& trap) {
  return trap.mode == Mode::kReal || trap.cpl <= Iopl(trap.regs);
}

// Reads MSR `index` as the domain's decision says, for RDMSR, RDTSCP's
// TSC_AUX and the reference value of IGNORE writes. Returns false where
// RDMSR would raise #GP(0).
template <typename DomainT, typename HostT>
bool ReadMsrValue(const Trap& trap, uint32_t index, const MsrDecision& d,
                  DomainT& domain, HostT& host, uint64_t* value) {
  switch (d.read) {
    case MsrRead::kPassthrough:
      // Never a made-up value: a host fault is the guest's #GP.
      return host.ReadMsr(trap.vcpu, index, value);
    case MsrRead::kConst:
      *value = d.value;
      return true;
    case MsrRead::kZero:
      *value = 0;
      return true;
    case MsrRead::kShadow: {
      bool fresh = false;
      uint64_t* reg = domain.Shadow(trap.vcpu, index, &fresh);
      if (reg == nullptr) return false;
      if (fresh) {
        uint64_t init = d.value;
        if (d.value_from_host) {
          // The initial value only: a host that cannot read it starts at 0.
          if (!host.ReadMsr(trap.vcpu, index, &init)) init = 0;
        }
        *reg = init;
      }
      *value = *reg;
      return true;
    }
    case MsrRead::kGp:
    default:
      break;
  }
  return false;
}

inline void Tag(uint32_t index, const MsrDecision& d, Outcome* out) {
  out->msr_or_port = index;
  out->audit = d.audit;
  out->unknown_msr = d.unknown;
}

template <typename DomainT, typename HostT>
ABSL_ATTRIBUTE_NOINLINE void Rdmsr(const Trap& trap, const Instruction& insn,
                                   DomainT& domain, HostT& host, Outcome* out) {
  if (!PrivilegeOk(trap)) return Raise(out, Vector::kGP);
  const uint32_t index = static_cast<uint32_t>(trap.regs.gpr[kRcx]);
  const MsrDecision& d = domain.Msr(index);
  Tag(index, d, out);
  uint64_t value = 0;
  if (!ReadMsrValue(trap, index, d, domain, host, &value)) {
    return Raise(out, Vector::kGP);
  }
  Set32(trap, kRax, static_cast<uint32_t>(value), out);
  Set32(trap, kRdx, static_cast<uint32_t>(value >> 32), out);
  Complete(trap, insn, out);
}

template <typename DomainT, typename HostT>
void WrmsrDecided(const Trap& trap, const Instruction& insn, uint32_t index,
                  const MsrDecision& d, DomainT& domain, HostT& host,
                  Outcome* out) {
  const uint64_t value = ((trap.regs.gpr[kRdx] & kLow32) << 32) |
                         (trap.regs.gpr[kRax] & kLow32);
  const bool masked = d.writable_mask != ~uint64_t{0};
  // Whether `value` changes a bit the guest may not change, given the
  // current value of the register.
  auto violates = [&](uint64_t current) {
    return ((value ^ current) & ~d.writable_mask) != 0;
  };
  switch (d.write) {
    case MsrWrite::kGp:
    default:
      return Raise(out, Vector::kGP);
    case MsrWrite::kIgnore: {
      if (masked) {
        uint64_t current = 0;
        if (!ReadMsrValue(trap, index, d, domain, host, &current)) current = 0;
        if (violates(current)) {
          if (!d.drop_reserved) return Raise(out, Vector::kGP);
          out->reserved_dropped = true;
        }
      }
      out->write_dropped = true;
      break;
    }
    case MsrWrite::kShadow: {
      bool fresh = false;
      uint64_t* reg = domain.Shadow(trap.vcpu, index, &fresh);
      if (reg == nullptr) return Raise(out, Vector::kGP);
      if (fresh) {
        uint64_t init = d.value;
        if (d.value_from_host && !host.ReadMsr(trap.vcpu, index, &init)) {
          init = 0;
        }
        *reg = init;
      }
      if (masked && violates(*reg)) {
        if (!d.drop_reserved) return Raise(out, Vector::kGP);
        out->write_dropped = true;  // the instruction completes, nothing changes
        out->reserved_dropped = true;
        break;
      }
      *reg = value;
      break;
    }
    case MsrWrite::kPassthrough: {
      if (!d.host_write_allowed) return Raise(out, Vector::kGP);
      if (masked) {
        uint64_t current = 0;
        // A write-only MSR has no readable state: bits outside the mask
        // must then be written as 0.
        if (!host.ReadMsr(trap.vcpu, index, &current)) current = 0;
        if (violates(current)) {
          if (!d.drop_reserved) return Raise(out, Vector::kGP);
          out->write_dropped = true;
          out->reserved_dropped = true;
          break;
        }
      }
      if (!host.WriteMsr(trap.vcpu, index, value)) {
        return Raise(out, Vector::kGP);
      }
      break;
    }
  }
  Complete(trap, insn, out);
}

template <typename DomainT, typename HostT>
ABSL_ATTRIBUTE_NOINLINE void Wrmsr(const Trap& trap, const Instruction& insn,
                                   DomainT& domain, HostT& host, Outcome* out) {
  if (!PrivilegeOk(trap)) return Raise(out, Vector::kGP);
  const uint32_t index = static_cast<uint32_t>(trap.regs.gpr[kRcx]);
  const MsrDecision& d = domain.Msr(index);
  Tag(index, d, out);
  WrmsrDecided(trap, insn, index, d, domain, host, out);
}

template <typename DomainT, typename HostT>
ABSL_ATTRIBUTE_NOINLINE void Cpuid(const Trap& trap, const Instruction& insn,
                                   DomainT& domain, HostT& host, Outcome* out) {
  const CpuidRegs r =
      domain.Cpuid(static_cast<uint32_t>(trap.regs.gpr[kRax]),
                   static_cast<uint32_t>(trap.regs.gpr[kRcx]), host);
  Set32(trap, kRax, r.eax, out);
  Set32(trap, kRbx, r.ebx, out);
  Set32(trap, kRcx, r.ecx, out);
  Set32(trap, kRdx, r.edx, out);
  Complete(trap, insn, out);
}

template <typename DomainT, typename HostT>
ABSL_ATTRIBUTE_NOINLINE void Rdtsc(const Trap& trap, const Instruction& insn,
                                   DomainT& domain, HostT& host, Outcome* out) {
  const uint64_t tsc = domain.GuestTsc(trap.host_tsc, host);
  Set32(trap, kRax, static_cast<uint32_t>(tsc), out);
  Set32(trap, kRdx, static_cast<uint32_t>(tsc >> 32), out);
  if (insn.kind == InsnKind::kRdtscp) {
    // TSC_AUX as RDMSR would read it; a read that would #GP leaves ECX 0
    // (RDTSCP itself does not fault on it).
    uint64_t aux = 0;
    if (!ReadMsrValue(trap, kMsrTscAux, domain.Msr(kMsrTscAux), domain, host,
                      &aux)) {
      aux = 0;
    }
    Set32(trap, kRcx, static_cast<uint32_t>(aux), out);
  }
  Complete(trap, insn, out);
}

// The value IN reads from a port with nothing behind it (the bus floats
// high): all ones in the access's width.
inline void FloatingBus(const Trap& trap, uint8_t width, Outcome* out) {
  const uint64_t rax = trap.regs.gpr[kRax];
  switch (width) {
    case 1:
      out->WriteGpr(kRax, rax | 0xff);
      break;
    case 2:
      out->WriteGpr(kRax, rax | 0xffff);
      break;
    default:
      Set32(trap, kRax, 0xffffffffu, out);
      break;
  }
}

// IN/OUT (imm8 and DX forms). A port outside the domain's io_port ranges
// reads all ones and drops writes; a granted port goes to a device the host
// models there, or else back to the trap source as kDeviceIo.
template <typename DomainT, typename HostT>
void PortIo(const Trap& trap, const Instruction& insn, DomainT& domain,
            HostT& host, Outcome* out) {
  if (!IoplOk(trap)) return Raise(out, Vector::kGP);
  const uint16_t port = insn.has_imm_port
                            ? insn.port
                            : static_cast<uint16_t>(trap.regs.gpr[kRdx]);
  const uint8_t width = insn.operand_size / 8;
  const bool write = insn.kind == InsnKind::kOut;
  out->msr_or_port = port;
  if (!domain.PortAllowed(port, width)) {
    out->port_denied = true;
    if (write) {
      out->write_dropped = true;
    } else {
      FloatingBus(trap, width, out);
    }
    return Complete(trap, insn, out);
  }
  const uint32_t width_mask = width >= 4 ? 0xffffffffu : (1u << (8 * width)) - 1;
  uint32_t value = static_cast<uint32_t>(trap.regs.gpr[kRax]) & width_mask;
  if (!host.PortIo(port, width, write, &value)) {
    out->kind = OutcomeKind::kDeviceIo;
    return;
  }
  if (!write) {
    if (width >= 4) {
      Set32(trap, kRax, value, out);
    } else {
      const uint64_t rax = trap.regs.gpr[kRax];
      out->WriteGpr(kRax, (rax & ~uint64_t{width_mask}) | (value & width_mask));
    }
  }
  Complete(trap, insn, out);
}

// Each instruction's handler (Rdmsr, Wrmsr, Cpuid, Rdtsc, PortIo) is its
// own function, reached by a tail jump: in line, they made one prologue that
// saved every register the heaviest of them needs for every trap (about
// 1.3% of the trap mix).
template <typename DomainT, typename HostT>
void EmulateInto(const Trap& trap, const Instruction& insn, DomainT& domain,
                 HostT& host, Outcome* out) {
  switch (insn.kind) {
    case InsnKind::kRdmsr:
      return Rdmsr(trap, insn, domain, host, out);
    case InsnKind::kWrmsr:
      return Wrmsr(trap, insn, domain, host, out);
    case InsnKind::kCpuid:
      return Cpuid(trap, insn, domain, host, out);
    case InsnKind::kRdtsc:
    case InsnKind::kRdtscp:
      return Rdtsc(trap, insn, domain, host, out);
    case InsnKind::kRdpmc:
      if (!PrivilegeOk(trap) || !domain.vpmu()) return Raise(out, Vector::kGP);
      return Unhandled(out);  // no counters are emulated
    case InsnKind::kIn:
    case InsnKind::kOut:
      return PortIo(trap, insn, domain, host, out);
    case InsnKind::kIns:
    case InsnKind::kOuts:
    case InsnKind::kCli:
    case InsnKind::kSti:
      if (!IoplOk(trap)) return Raise(out, Vector::kGP);
      return Unhandled(out);
    case InsnKind::kMovFromCr:
    case InsnKind::kMovToCr:
    case InsnKind::kMovFromDr:
    case InsnKind::kMovToDr:
    case InsnKind::kClts:
    case InsnKind::kLmsw:
    case InsnKind::kInvlpg:
    case InsnKind::kWbinvd:
    case InsnKind::kWbnoinvd:
    case InsnKind::kInvd:
    case InsnKind::kHlt:
    case InsnKind::kXsetbv:
    case InsnKind::kSwapgs:
      if (!PrivilegeOk(trap)) return Raise(out, Vector::kGP);
      return Unhandled(out);
  }
  return Unhandled(out);
}

}  // namespace internal

// emulate.h's DecodeAndEmulate for concrete Domain/Host types.
template <typename DomainT, typename HostT>
Outcome DecodeAndEmulateWith(const Trap& trap, DomainT& domain, HostT& host,
                             Instruction* decoded_out, DecodeError* error_out) {
  const size_t len = trap.insn_len <= kMaxInsnLength ? trap.insn_len
                                                     : kMaxInsnLength;
  // Decoded straight into the caller's Instruction when it wants one.
  Instruction local;
  Instruction* insn = decoded_out != nullptr ? decoded_out : &local;
  uint8_t error_offset = 0;
  const DecodeError error = DecodeInto(trap.insn, len, trap.mode, insn, &error_offset);
  if (error_out != nullptr) *error_out = error;
  Outcome out;
  if (error != DecodeError::kOk) {
    Vector vector;
    if (DecodeErrorVector(error, &vector)) {
      internal::Raise(&out, vector);
    } else {
      internal::Unhandled(&out);
    }
    return out;
  }
  internal::EmulateInto(trap, *insn, domain, host, &out);
  return out;
}

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_EMULATE_INL_H_
