// The decoded-instruction value type: what emulator/decoder.h produces and
// emulator/emulate.h consumes. A plain struct of a few bytes; copying it is
// free and nothing in it owns memory.
#ifndef PVEMU_EMULATOR_INSTRUCTION_H_
#define PVEMU_EMULATOR_INSTRUCTION_H_

#include <cstdint>

namespace pvemu::emulator {

// The privileged instructions pvemu recognises. Each maps to exactly one
// Intel SDM mnemonic (see Mnemonic() in decoder.h), except the MOV CR/DR
// kinds, which all print as "mov" like a disassembler does.
enum class InsnKind : uint8_t {
  kRdmsr,      // 0F 32
  kWrmsr,      // 0F 30
  kCpuid,      // 0F A2
  kRdtsc,      // 0F 31
  kRdtscp,     // 0F 01 F9
  kRdpmc,      // 0F 33
  kIn,         // E4 E5 (imm8 port), EC ED (port in DX)
  kOut,        // E6 E7 (imm8 port), EE EF (port in DX)
  kIns,        // 6C 6D
  kOuts,       // 6E 6F
  kMovFromCr,  // 0F 20: MOV r, CRn
  kMovToCr,    // 0F 22: MOV CRn, r
  kMovFromDr,  // 0F 21: MOV r, DRn
  kMovToDr,    // 0F 23: MOV DRn, r
  kClts,       // 0F 06
  kLmsw,       // 0F 01 /6
  kInvlpg,     // 0F 01 /7, memory operand only
  kWbinvd,     // 0F 09
  kWbnoinvd,   // F3 0F 09 (SDM: WBNOINVD; older CPUs run it as WBINVD)
  kInvd,       // 0F 08
  kHlt,        // F4
  kCli,        // FA
  kSti,        // FB
  kXsetbv,     // NP 0F 01 D1
  kSwapgs,     // 0F 01 F8, 64-bit mode only
};
inline constexpr int kNumInsnKinds = static_cast<int>(InsnKind::kSwapgs) + 1;

// Prefix bits recorded in Instruction::prefixes (legacy prefixes seen,
// whether or not they affect this instruction).
enum InsnPrefix : uint8_t {
  kPrefixOperandSize = 1 << 0,  // 66
  kPrefixAddressSize = 1 << 1,  // 67
  kPrefixRep = 1 << 2,          // F3 (REP/REPE)
  kPrefixRepne = 1 << 3,        // F2 (REPNE)
  kPrefixLock = 1 << 4,         // F0 (never in a successful decode)
  kPrefixSegment = 1 << 5,      // any of 26 2E 36 3E 64 65
};

// The last segment override prefix, if any. In 64-bit mode the CPU ignores
// ES/CS/SS/DS overrides; the decoder still records what it saw.
enum class Segment : uint8_t { kNone, kEs, kCs, kSs, kDs, kFs, kGs };

struct Instruction {
  InsnKind kind = InsnKind::kRdmsr;
  uint8_t length = 0;        // bytes including prefixes, 1..15
  uint8_t opcode_offset = 0; // bytes of prefixes before the opcode
  // Effective operand size in bits. IN/OUT/INS/OUTS: the access width
  // (8, 16, 32; REX.W does not widen them). MOV CR/DR: the GPR width (64 in
  // 64-bit mode, else 32). LMSW: 16. Others: the mode's operand size.
  uint8_t operand_size = 32;
  uint8_t address_size = 64;  // bits: 16, 32, 64 (67 toggles)
  uint8_t prefixes = 0;       // InsnPrefix bits
  uint8_t rex = 0;            // the REX byte that applied (64-bit mode), or 0
  Segment segment = Segment::kNone;
  bool has_imm_port = false;  // IN/OUT E4-E7: `port` holds the imm8
  uint8_t port = 0;
  // MOV CR/DR: the control or debug register number (CR0-CR4, CR8; DR0-DR7).
  uint8_t special_register = 0;
  // MOV CR/DR and register-form LMSW: the general register (0=RAX..15=R15).
  uint8_t gpr = 0;
  bool memory_operand = false;  // LMSW/INVLPG with a memory operand
  // Memory forms: the raw ModRM and SIB bytes (sib 0 when absent) and the
  // sign-extended displacement, so the hypervisor can form the address
  // without decoding again.
  uint8_t modrm = 0;
  uint8_t sib = 0;
  int32_t displacement = 0;

  bool rep() const { return (prefixes & (kPrefixRep | kPrefixRepne)) != 0; }
};

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_INSTRUCTION_H_
