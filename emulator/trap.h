// The trap-path value types: a trapped vCPU's state and the one outcome that
// answers it. Plain structs, no allocation; emulator/trap_convert.h turns them
// into and out of the pvemu.v1 messages.
#ifndef PVEMU_EMULATOR_TRAP_H_
#define PVEMU_EMULATOR_TRAP_H_

#include <cstdint>

namespace pvemu::emulator {

// The guest's execution mode; selects default operand/address sizes.
enum class Mode : uint8_t { kReal, k16, k32, k64 };

// General registers in x86 encoding order (the ModRM/REX register number).
enum Gpr : uint8_t {
  kRax = 0, kRcx = 1, kRdx = 2, kRbx = 3, kRsp = 4, kRbp = 5, kRsi = 6, kRdi = 7,
  kR8 = 8, kR9, kR10, kR11, kR12, kR13, kR14, kR15,
};

struct Regs {
  uint64_t gpr[16] = {};
  uint64_t rip = 0;
  uint64_t rflags = 0x2;  // bit 1 is always set
};

inline constexpr int kMaxInsnLength = 15;

// One trapped instruction as the emulator sees it.
struct Trap {
  uint32_t domain = 0;
  uint32_t vcpu = 0;
  Mode mode = Mode::k64;
  uint8_t cpl = 0;
  uint8_t insn_len = 0;               // valid bytes in insn (0..15)
  uint8_t insn[kMaxInsnLength] = {};  // bytes fetched at RIP
  Regs regs;
  uint64_t host_tsc = 0;              // host TSC at the trap, ticks
};

// Exception vectors (SDM Vol. 3 table 6-1); values equal pvemu.v1.Vector.
enum class Vector : uint8_t { kDE = 0, kDB = 1, kUD = 6, kNM = 7, kGP = 13, kPF = 14 };

enum class OutcomeKind : uint8_t {
  kCompleted = 1,  // use `regs`: the instruction retired, RIP advanced
  kException = 2,  // inject vector/error_code; registers unchanged
  kUnhandled = 3,  // recognised but not emulated; nothing changed
  // IN/OUT on a port the domain's io_port policy grants, with no device the
  // host models behind it: the trap source hands the access to its own
  // device model (a VMM's devices). Nothing changed; RIP not advanced.
  kDeviceIo = 4,
};

// The one complete answer to one trap. It carries only the registers the
// instruction changed, never a copy of the trap's 18: an outcome is built on
// every trap, and not copying the register file saved about 1 ns of a 28 ns
// trap path (docs/performance.md).
// RegsAfter()/ApplyTo() give the whole register file after the instruction.
struct Outcome {
  // The general registers an emulated instruction can write: RAX, RCX, RDX
  // and RBX (x86 encoding order 0-3). CPUID writes all four.
  static constexpr int kWritableGprs = 4;

  OutcomeKind kind = OutcomeKind::kUnhandled;
  Vector vector = Vector::kGP;
  bool has_error_code = false;
  uint32_t error_code = 0;
  // The general registers written (bit r: gpr[r]) and their values; then RIP
  // and RFLAGS after the instruction. Meaningful only when kind is
  // kCompleted: every other outcome leaves the trap's registers as they
  // were. Kept by register number, not as a list: appending made each write
  // wait for the one before it.
  uint8_t written = 0;
  uint64_t gpr[kWritableGprs] = {};
  uint64_t rip = 0;
  uint64_t rflags = 0;

  // REQUIRES: reg < kWritableGprs.
  void WriteGpr(Gpr reg, uint64_t value) {
    gpr[reg] = value;
    written |= static_cast<uint8_t>(1u << reg);
  }
  bool Wrote(Gpr reg) const {
    return kind == OutcomeKind::kCompleted && reg < kWritableGprs && (written >> reg) & 1;
  }
  // General register `reg` after the instruction, given the trap's.
  uint64_t GprAfter(Gpr reg, const Regs& at_trap) const {
    return Wrote(reg) ? gpr[reg] : at_trap.gpr[reg];
  }
  // Turns the trap's registers into those after the instruction.
  void ApplyTo(Regs* regs) const {
    if (kind != OutcomeKind::kCompleted) return;
    for (int r = 0; r < kWritableGprs; ++r) {
      if ((written >> r) & 1) regs->gpr[r] = gpr[r];
    }
    regs->rip = rip;
    regs->rflags = rflags;
  }
  Regs RegsAfter(const Regs& at_trap) const {
    Regs regs = at_trap;
    ApplyTo(&regs);
    return regs;
  }

  // For audit and explain: the MSR (RDMSR/WRMSR) or port (IN/OUT) touched, and
  // whether the deciding policy entry asked for an audit event.
  uint32_t msr_or_port = 0;
  bool audit = false;
  bool unknown_msr = false;  // decided by the unknown-MSR mode, not by a rule
  // A WRMSR or OUT that completed without taking effect: an IGNORE rule, a
  // reserved-bit change a rule drops, or a port outside the domain's
  // io_port ranges. Trap sources that commit writes themselves (Xen's
  // vm_event) deny exactly these.
  bool write_dropped = false;
  // IN/OUT on a port outside the domain's io_port ranges: IN read all ones,
  // OUT was dropped.
  bool port_denied = false;
  // A WRMSR dropped because it changed bits outside the rule's writable_mask
  // (a write_dropped of the reserved-bit kind).
  bool reserved_dropped = false;
  // Set by the trap path, not the emulator: a LEARN domain's access that
  // ENFORCE would have faulted (an MSR #GP) or denied (a port), answered as
  // learning answers it (policy.proto, PolicyMode).
  bool relaxed = false;
};

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_TRAP_H_
