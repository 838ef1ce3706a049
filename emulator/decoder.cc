#include "emulator/decoder.h"

#include <array>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::emulator {
namespace {

// Decoding runs in the phases Zydis uses, one function each: legacy
// prefixes and REX (CollectPrefixes), the sizes they select (ResolveSizes),
// the opcode (DecodeOpcode, DecodeTwoByteOpcode), ModRM/SIB/displacement
// (DecodeMovSpecialRegister, DecodeGroup7, MemoryOperand), then the error
// checks that need the whole instruction (CheckErrorConditions: mode, LOCK,
// register, mandatory prefix). Fetch errors follow Zydis and the CPU: a
// byte at offset 15 or beyond makes the instruction too long (#GP) even if
// the caller gave fewer bytes; a byte before offset 15 that the caller did
// not give is a truncated fetch.

// What each byte is as a prefix: its InsnPrefix bit (0: not a legacy
// prefix), whether it is REX (40-4F: a prefix in 64-bit mode only, INC/DEC
// otherwise), and the segment it selects. Table-driven so the prefix loop
// has no per-prefix switch (an indirect jump that mispredicts on a mixed
// trap stream).
struct PrefixInfo {
  uint8_t bit = 0;
  bool rex = false;
  Segment segment = Segment::kNone;
};

constexpr std::array<PrefixInfo, 256> MakePrefixTable() {
  std::array<PrefixInfo, 256> t{};
  t[0x66].bit = kPrefixOperandSize;
  t[0x67].bit = kPrefixAddressSize;
  t[0xF2].bit = kPrefixRepne;
  t[0xF3].bit = kPrefixRep;
  t[0xF0].bit = kPrefixLock;
  const std::pair<uint8_t, Segment> segments[] = {
      {0x26, Segment::kEs}, {0x2E, Segment::kCs}, {0x36, Segment::kSs},
      {0x3E, Segment::kDs}, {0x64, Segment::kFs}, {0x65, Segment::kGs}};
  for (const auto& [b, seg] : segments) {
    t[b].bit = kPrefixSegment;
    t[b].segment = seg;
  }
  for (int b = 0x40; b <= 0x4F; ++b) t[b].rex = true;
  return t;
}
constexpr std::array<PrefixInfo, 256> kPrefixTable = MakePrefixTable();

// 0F xx opcodes with no operands and no prefix-dependent meaning:
// 1 + InsnKind, or 0.
constexpr std::array<uint8_t, 256> MakeSimpleTwoByteTable() {
  std::array<uint8_t, 256> t{};
  auto set = [&t](uint8_t op, InsnKind kind) {
    t[op] = static_cast<uint8_t>(static_cast<uint8_t>(kind) + 1);
  };
  set(0x30, InsnKind::kWrmsr);
  set(0x31, InsnKind::kRdtsc);
  set(0x32, InsnKind::kRdmsr);
  set(0x33, InsnKind::kRdpmc);
  set(0xA2, InsnKind::kCpuid);
  set(0x06, InsnKind::kClts);
  set(0x08, InsnKind::kInvd);
  return t;
}
constexpr std::array<uint8_t, 256> kSimpleTwoByte = MakeSimpleTwoByteTable();

constexpr uint8_t kRexW = 0x08;
constexpr uint8_t kRexR = 0x04;
constexpr uint8_t kRexB = 0x01;

// Whether bytes [0, end) can be fetched. See the comment at the top for the
// order of the two checks.
inline DecodeError Need(size_t end, size_t len) {
  if (end <= len && end <= static_cast<size_t>(kMaxInsnLength)) {
    return DecodeError::kOk;
  }
  if (len < end && len < static_cast<size_t>(kMaxInsnLength)) {
    return DecodeError::kTruncated;
  }
  return DecodeError::kTooLong;
}

// The end offset of a memory operand whose ModRM byte is at `modrm_at`
// (mod != 3), or an error. Only the raw rm/base bits matter for the layout:
// REX.B selects registers, not forms (RIP-relative and SIB stay as they are).
inline DecodeError MemoryOperand(const uint8_t* bytes, size_t len,
                                 size_t modrm_at, uint8_t address_size,
                                 Instruction* insn, size_t* end) {
  const uint8_t modrm = bytes[modrm_at];
  const uint8_t mod = modrm >> 6;
  const uint8_t rm = modrm & 7;
  size_t e = modrm_at + 1;
  size_t disp = 0;
  if (address_size == 16) {
    // 16-bit addressing has no SIB; [disp16] replaces [BP] when mod=00.
    if (mod == 0 && rm == 6) {
      disp = 2;
    } else if (mod == 1) {
      disp = 1;
    } else if (mod == 2) {
      disp = 2;
    }
  } else {
    if (rm == 4) {
      const DecodeError err = Need(e + 1, len);
      if (err != DecodeError::kOk) return err;
      insn->sib = bytes[e];
      e += 1;
      if (mod == 0 && (insn->sib & 7) == 5) disp = 4;  // no base: disp32
    } else if (mod == 0 && rm == 5) {
      disp = 4;  // disp32 (RIP-relative in 64-bit mode)
    }
    if (mod == 1) {
      disp = 1;
    } else if (mod == 2) {
      disp = 4;
    }
  }
  const DecodeError err = Need(e + disp, len);
  if (err != DecodeError::kOk) return err;
  switch (disp) {
    case 1:
      insn->displacement = static_cast<int8_t>(bytes[e]);
      break;
    case 2:
      insn->displacement = static_cast<int16_t>(bytes[e] | (bytes[e + 1] << 8));
      break;
    case 4:
      insn->displacement = static_cast<int32_t>(
          uint32_t{bytes[e]} | (uint32_t{bytes[e + 1]} << 8) |
          (uint32_t{bytes[e + 2]} << 16) | (uint32_t{bytes[e + 3]} << 24));
      break;
    default:
      break;
  }
  *end = e + disp;
  return DecodeError::kOk;
}

}  // namespace

namespace {

// The sizes an instruction without prefixes has in each mode, indexed by Mode.
constexpr uint8_t kDefaultOperandSize[] = {16, 16, 32, 32};
constexpr uint8_t kDefaultAddressSize[] = {16, 16, 32, 64};

// The general path: any prefixes, any opcode. *out as DecodeInto says.
// Out of line, so that DecodeInto's fast path saves no registers for it.
ABSL_ATTRIBUTE_NOINLINE DecodeError DecodeGeneral(const uint8_t* bytes, size_t len,
                                                  Mode mode, Instruction* out,
                                                  uint8_t* error_offset);

}  // namespace

DecodeError DecodeInto(const uint8_t* bytes, size_t len, Mode mode,
                       Instruction* insn, uint8_t* error_offset) {
  // Fast path for the bulk of traps: an unprefixed 0F xx with no operands
  // (RDMSR, WRMSR, CPUID, RDTSC, ...). One table load decides it; the result
  // is written whole so readers of single fields are not stalled on it.
  if (len >= 2 && bytes[0] == 0x0F) {
    const uint8_t simple = kSimpleTwoByte[bytes[1]];
    if (simple != 0) {
      Instruction d;
      d.kind = static_cast<InsnKind>(simple - 1);
      d.length = 2;
      d.operand_size = kDefaultOperandSize[static_cast<uint8_t>(mode) & 3];
      d.address_size = kDefaultAddressSize[static_cast<uint8_t>(mode) & 3];
      *insn = d;
      return DecodeError::kOk;
    }
  }
  return DecodeGeneral(bytes, len, mode, insn, error_offset);
}

DecodeResult Decode(const uint8_t* bytes, size_t len, Mode mode) {
  DecodeResult r;
  r.error = DecodeInto(bytes, len, mode, &r.insn, &r.error_offset);
  return r;
}

namespace {

// Checks that CheckErrorConditions makes for some instructions only.
constexpr uint8_t kCheckMode = 1;       // valid only in 64-bit mode (SWAPGS)
constexpr uint8_t kCheckRegister = 2;   // MOV CR/DR of a register that does not exist
constexpr uint8_t kCheckNoPrefix = 4;   // the SDM marks it NP: 66/F2/F3 make it #UD

// What the phases of the general path share: the input, the position, and
// what the checks phase needs beyond the Instruction's own fields. Small, so
// that it lives in registers once the phases are inlined.
struct DecodeState {
  const uint8_t* bytes;
  size_t len;
  Mode mode;
  uint8_t* error_offset;  // where a failure reports the offset it stopped at
  size_t next = 0;        // the offset of the next byte to read
  uint8_t last_rep = 0;   // the last of F2/F3: it decides F3 0F 09
  // IN/OUT/INS/OUTS with a 16/32-bit operand: 66 toggles between 16 and 32
  // bits, and REX.W, which selects 64 bits elsewhere, caps them at 32.
  uint8_t io_operand_size = 32;
  uint8_t checks = 0;  // kCheck* bits for CheckErrorConditions
};

DecodeError Fail(DecodeState* state, DecodeError error, size_t offset) {
  *state->error_offset = static_cast<uint8_t>(offset);
  return error;
}

// A fetch failure stops at offset 15 (too long) or at the end of the input.
DecodeError FailFetch(DecodeState* state, DecodeError error) {
  return Fail(state, error,
              error == DecodeError::kTooLong ? static_cast<size_t>(kMaxInsnLength)
                                             : state->len);
}

// Reads the next byte (an opcode byte, ModRM or imm8).
DecodeError FetchByte(DecodeState* state, uint8_t* byte) {
  const DecodeError error = Need(state->next + 1, state->len);
  if (error != DecodeError::kOk) return FailFetch(state, error);
  *byte = state->bytes[state->next++];
  return DecodeError::kOk;
}

// Phase 1: legacy prefixes and REX, in any order and repeated, up to the
// opcode.
DecodeError CollectPrefixes(DecodeState* state, Instruction* insn) {
  const bool mode64 = state->mode == Mode::k64;
  // Bytes we may read: the caller's, and never more than 15. Running out
  // before offset 15 is truncation; reaching offset 15 is #GP.
  const size_t limit = state->len < static_cast<size_t>(kMaxInsnLength)
                           ? state->len
                           : static_cast<size_t>(kMaxInsnLength);
  size_t at = 0;
  uint8_t prefixes = 0;
  uint8_t rex = 0;
  Segment segment = Segment::kNone;
  for (;;) {
    if (at >= limit) {
      return Fail(state,
                  at >= static_cast<size_t>(kMaxInsnLength) ? DecodeError::kTooLong
                                                            : DecodeError::kTruncated,
                  at);
    }
    const uint8_t byte = state->bytes[at];
    const PrefixInfo& prefix = kPrefixTable[byte];
    if (prefix.rex) {
      if (!mode64) break;  // INC/DEC: the opcode
      rex = byte;          // a later REX replaces an earlier one
      ++at;
      continue;
    }
    if (prefix.bit == 0) break;
    // REX counts only immediately before the opcode: a legacy prefix after
    // it cancels it (SDM Vol. 2 2.2.1).
    rex = 0;
    prefixes |= prefix.bit;
    if (prefix.bit & (kPrefixRep | kPrefixRepne)) state->last_rep = byte;
    if (prefix.segment != Segment::kNone) segment = prefix.segment;
    ++at;
  }
  state->next = at;
  insn->opcode_offset = static_cast<uint8_t>(at);
  insn->prefixes = prefixes;
  insn->rex = rex;
  insn->segment = segment;
  return DecodeError::kOk;
}

// Phase 2: the operand and address sizes that REX.W, 66 and 67 select.
void ResolveSizes(DecodeState* state, Instruction* insn) {
  const bool mode64 = state->mode == Mode::k64;
  const bool mode16 = state->mode == Mode::kReal || state->mode == Mode::k16;
  const bool has66 = (insn->prefixes & kPrefixOperandSize) != 0;
  const bool has67 = (insn->prefixes & kPrefixAddressSize) != 0;
  const bool rex_w = (insn->rex & kRexW) != 0;
  state->io_operand_size = rex_w ? 32 : ((mode16 != has66) ? 16 : 32);
  insn->operand_size = rex_w ? 64 : state->io_operand_size;
  if (mode64) {
    insn->address_size = has67 ? 32 : 64;
  } else if (mode16) {
    insn->address_size = has67 ? 32 : 16;
  } else {
    insn->address_size = has67 ? 16 : 32;
  }
}

// Phase 4 for 0F 20-23, MOV to or from a control or debug register: the
// ModRM byte names both registers.
DecodeError DecodeMovSpecialRegister(DecodeState* state, uint8_t opcode,
                                     Instruction* insn) {
  uint8_t modrm;
  const DecodeError error = FetchByte(state, &modrm);
  if (error != DecodeError::kOk) return error;
  // The mod bits are ignored: the operand is always a register
  // (SDM Vol. 2, MOV—Move to/from Control Registers).
  const uint8_t reg = ((modrm >> 3) & 7) | ((insn->rex & kRexR) ? 8 : 0);
  insn->gpr = (modrm & 7) | ((insn->rex & kRexB) ? 8 : 0);
  insn->special_register = reg;
  insn->operand_size = state->mode == Mode::k64 ? 64 : 32;
  const bool control = (opcode & 1) == 0;
  const bool to = (opcode & 2) != 0;
  if (control) {
    insn->kind = to ? InsnKind::kMovToCr : InsnKind::kMovFromCr;
    if (!(reg == 0 || reg == 2 || reg == 3 || reg == 4 || reg == 8)) {
      state->checks |= kCheckRegister;
    }
  } else {
    insn->kind = to ? InsnKind::kMovToDr : InsnKind::kMovFromDr;
    if (reg >= 8) state->checks |= kCheckRegister;
  }
  return DecodeError::kOk;
}

// Phase 4 for 0F 01 (group 7): the ModRM byte picks the instruction, and
// the memory forms carry a memory operand.
DecodeError DecodeGroup7(DecodeState* state, Instruction* insn) {
  const size_t modrm_at = state->next;
  uint8_t modrm;
  DecodeError error = FetchByte(state, &modrm);
  if (error != DecodeError::kOk) return error;
  const uint8_t mod = modrm >> 6;
  const uint8_t reg = (modrm >> 3) & 7;
  if (mod == 3) {
    if (modrm == 0xD1) {
      insn->kind = InsnKind::kXsetbv;
      state->checks |= kCheckNoPrefix;
    } else if (modrm == 0xF8) {
      insn->kind = InsnKind::kSwapgs;
      state->checks |= kCheckMode;
    } else if (modrm == 0xF9) {
      insn->kind = InsnKind::kRdtscp;
    } else if (reg == 6) {
      insn->kind = InsnKind::kLmsw;
      insn->operand_size = 16;
      insn->gpr = (modrm & 7) | ((insn->rex & kRexB) ? 8 : 0);
    } else {
      // VMCALL, MONITOR, XGETBV, RDPKRU, MONITORX, CLZERO, ...
      return Fail(state, DecodeError::kNotPrivileged, insn->opcode_offset);
    }
    return DecodeError::kOk;
  }
  if (reg == 6) {
    insn->kind = InsnKind::kLmsw;
    insn->operand_size = 16;
  } else if (reg == 7) {
    insn->kind = InsnKind::kInvlpg;
    insn->operand_size = 8;
  } else {
    // SGDT, SIDT, LGDT, LIDT, SMSW: not emulated by pvemu.
    return Fail(state, DecodeError::kNotPrivileged, insn->opcode_offset);
  }
  insn->memory_operand = true;
  insn->modrm = modrm;
  size_t end = 0;
  error = MemoryOperand(state->bytes, state->len, modrm_at, insn->address_size,
                        insn, &end);
  if (error != DecodeError::kOk) return FailFetch(state, error);
  state->next = end;
  return DecodeError::kOk;
}

// Phase 3 for the 0F map. The operand-less opcodes of kSimpleTwoByte come
// first, by one table load (a switch's indirect jump mispredicts on a mixed
// trap stream); DecodeInto decides them already when they have no prefix.
DecodeError DecodeTwoByteOpcode(DecodeState* state, Instruction* insn) {
  uint8_t opcode;
  const DecodeError error = FetchByte(state, &opcode);
  if (error != DecodeError::kOk) return error;
  const uint8_t simple = kSimpleTwoByte[opcode];
  if (simple != 0) {
    insn->kind = static_cast<InsnKind>(simple - 1);
    return DecodeError::kOk;
  }
  switch (opcode) {
    case 0x09:
      insn->kind = state->last_rep == 0xF3 ? InsnKind::kWbnoinvd : InsnKind::kWbinvd;
      return DecodeError::kOk;
    case 0x20: case 0x21: case 0x22: case 0x23:
      return DecodeMovSpecialRegister(state, opcode, insn);
    case 0x01:
      return DecodeGroup7(state, insn);
    default:
      return Fail(state, DecodeError::kNotPrivileged, insn->opcode_offset);
  }
}

// Phase 3: the opcode, with the imm8 port of IN/OUT E4-E7.
DecodeError DecodeOpcode(DecodeState* state, Instruction* insn) {
  const uint8_t opcode = state->bytes[state->next++];
  if (opcode == 0x0F) return DecodeTwoByteOpcode(state, insn);
  const uint8_t width = (opcode & 1) ? state->io_operand_size : 8;
  switch (opcode) {
    case 0xE4: case 0xE5: case 0xE6: case 0xE7:
      insn->kind = (opcode & 2) ? InsnKind::kOut : InsnKind::kIn;
      insn->operand_size = width;
      insn->has_imm_port = true;
      return FetchByte(state, &insn->port);
    case 0xEC: case 0xED: case 0xEE: case 0xEF:
      insn->kind = (opcode & 2) ? InsnKind::kOut : InsnKind::kIn;
      insn->operand_size = width;
      return DecodeError::kOk;
    case 0x6C: case 0x6D: case 0x6E: case 0x6F:
      insn->kind = (opcode & 2) ? InsnKind::kOuts : InsnKind::kIns;
      insn->operand_size = width;
      return DecodeError::kOk;
    case 0xF4: insn->kind = InsnKind::kHlt; return DecodeError::kOk;
    case 0xFA: insn->kind = InsnKind::kCli; return DecodeError::kOk;
    case 0xFB: insn->kind = InsnKind::kSti; return DecodeError::kOk;
    default:
      return Fail(state, DecodeError::kNotPrivileged, insn->opcode_offset);
  }
}

// Phase 5: the checks that need the whole instruction, in the order the CPU
// (and Zydis) reports them.
DecodeError CheckErrorConditions(DecodeState* state, const Instruction& insn) {
  const uint8_t checks = state->checks;
  if ((checks | (insn.prefixes & kPrefixLock)) == 0) return DecodeError::kOk;
  DecodeError error = DecodeError::kOk;
  if ((checks & kCheckMode) && state->mode != Mode::k64) {
    error = DecodeError::kInvalidInMode;
  } else if (insn.prefixes & kPrefixLock) {
    error = DecodeError::kLockPrefix;
  } else if (checks & kCheckRegister) {
    error = DecodeError::kInvalidRegister;
  } else if ((checks & kCheckNoPrefix) &&
             (insn.prefixes & (kPrefixOperandSize | kPrefixRep | kPrefixRepne))) {
    error = DecodeError::kInvalidPrefix;
  }
  if (error == DecodeError::kOk) return error;
  return Fail(state, error, insn.opcode_offset);
}

DecodeError DecodeGeneral(const uint8_t* bytes, size_t len, Mode mode,
                          Instruction* out, uint8_t* error_offset) {
  DecodeState state{bytes, len, mode, error_offset};
  // Decoded in place, and reset on failure. Not built in a local and copied
  // out: the copy's wide loads would span the decoder's one-byte stores,
  // which the CPU cannot forward, and wait for them to reach the cache (a
  // quarter of DecodeInto's time in the trap mix). Nor saved first to be
  // put back: the caller has usually just built *out, and reading it back
  // whole stalls the same way.
  *out = Instruction{};
  Instruction& insn = *out;
  DecodeError error = CollectPrefixes(&state, &insn);
  if (error == DecodeError::kOk) {
    ResolveSizes(&state, &insn);
    error = DecodeOpcode(&state, &insn);
  }
  if (error == DecodeError::kOk) error = CheckErrorConditions(&state, insn);
  if (error != DecodeError::kOk) [[unlikely]] {
    *out = Instruction{};  // never half an instruction
    return error;
  }
  insn.length = static_cast<uint8_t>(state.next);
  return DecodeError::kOk;
}

}  // namespace

absl::string_view DecodeErrorMessage(DecodeError error) {
  switch (error) {
    case DecodeError::kOk:
      return "The instruction was decoded.";
    case DecodeError::kTruncated:
      return "The input ended before the instruction was complete (truncated "
             "fetch).";
    case DecodeError::kTooLong:
      return "The instruction exceeded the maximum length of 15 bytes.";
    case DecodeError::kLockPrefix:
      return "A lock-prefix (F0) was found while decoding an instruction that "
             "does not support locking.";
    case DecodeError::kInvalidInMode:
      return "The instruction is not valid in the current machine mode.";
    case DecodeError::kInvalidRegister:
      return "The instruction references a control or debug register that "
             "does not exist.";
    case DecodeError::kInvalidPrefix:
      return "An operand-size (66) or repeat (F2/F3) prefix was found on an "
             "instruction that does not allow one.";
    case DecodeError::kNotPrivileged:
      return "The instruction is not one of the privileged instructions "
             "pvemu emulates.";
  }
  return "Unknown decode error.";
}

bool DecodeErrorVector(DecodeError error, Vector* vector) {
  switch (error) {
    case DecodeError::kTooLong:
      *vector = Vector::kGP;
      return true;
    case DecodeError::kLockPrefix:
    case DecodeError::kInvalidInMode:
    case DecodeError::kInvalidRegister:
    case DecodeError::kInvalidPrefix:
      *vector = Vector::kUD;
      return true;
    case DecodeError::kOk:
    case DecodeError::kTruncated:
    case DecodeError::kNotPrivileged:
      break;
  }
  return false;
}

absl::string_view KindMnemonic(InsnKind kind) {
  switch (kind) {
    case InsnKind::kRdmsr: return "rdmsr";
    case InsnKind::kWrmsr: return "wrmsr";
    case InsnKind::kCpuid: return "cpuid";
    case InsnKind::kRdtsc: return "rdtsc";
    case InsnKind::kRdtscp: return "rdtscp";
    case InsnKind::kRdpmc: return "rdpmc";
    case InsnKind::kIn: return "in";
    case InsnKind::kOut: return "out";
    case InsnKind::kIns: return "ins";
    case InsnKind::kOuts: return "outs";
    case InsnKind::kMovFromCr:
    case InsnKind::kMovToCr:
    case InsnKind::kMovFromDr:
    case InsnKind::kMovToDr: return "mov";
    case InsnKind::kClts: return "clts";
    case InsnKind::kLmsw: return "lmsw";
    case InsnKind::kInvlpg: return "invlpg";
    case InsnKind::kWbinvd: return "wbinvd";
    case InsnKind::kWbnoinvd: return "wbnoinvd";
    case InsnKind::kInvd: return "invd";
    case InsnKind::kHlt: return "hlt";
    case InsnKind::kCli: return "cli";
    case InsnKind::kSti: return "sti";
    case InsnKind::kXsetbv: return "xsetbv";
    case InsnKind::kSwapgs: return "swapgs";
  }
  return "";
}

absl::string_view Mnemonic(const Instruction& insn) {
  // String instructions carry their element size in the mnemonic.
  if (insn.kind == InsnKind::kIns || insn.kind == InsnKind::kOuts) {
    const bool in = insn.kind == InsnKind::kIns;
    switch (insn.operand_size) {
      case 8: return in ? "insb" : "outsb";
      case 16: return in ? "insw" : "outsw";
      default: return in ? "insd" : "outsd";
    }
  }
  return KindMnemonic(insn.kind);
}

absl::Status DecodeStatus(const DecodeResult& result) {
  if (result.ok()) return absl::OkStatus();
  const std::string message = absl::StrFormat(
      "byte %d: %s", result.error_offset, DecodeErrorMessage(result.error));
  switch (result.error) {
    case DecodeError::kTruncated:
      return absl::OutOfRangeError(absl::StrCat(
          message, " Supply all bytes of the instruction (up to 15)."));
    case DecodeError::kNotPrivileged:
      return absl::InvalidArgumentError(absl::StrCat(
          message, " pvemu decodes only trapping privileged instructions "
                   "(rdmsr, wrmsr, cpuid, in, out, ...)."));
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          message, " The CPU raises an exception for these bytes."));
  }
}

void InstructionToProto(const Instruction& insn, pvemu::v1::Instruction* msg) {
  const absl::string_view mnemonic = Mnemonic(insn);
  msg->set_mnemonic(mnemonic.data(), mnemonic.size());
  msg->set_length(insn.length);
  msg->set_operand_size(insn.operand_size);
  msg->set_address_size(insn.address_size);
  const bool string_op =
      insn.kind == InsnKind::kIns || insn.kind == InsnKind::kOuts;
  msg->set_rep(string_op && insn.rep());
  if (insn.has_imm_port) msg->set_port(insn.port);
  switch (insn.kind) {
    case InsnKind::kMovFromCr:
    case InsnKind::kMovToCr:
      msg->set_control_register(insn.special_register);
      msg->set_gpr(insn.gpr);
      break;
    case InsnKind::kMovFromDr:
    case InsnKind::kMovToDr:
      msg->set_debug_register(insn.special_register);
      msg->set_gpr(insn.gpr);
      break;
    case InsnKind::kLmsw:
      if (!insn.memory_operand) msg->set_gpr(insn.gpr);
      break;
    default:
      break;
  }
  msg->set_memory_operand(insn.memory_operand);
}

}  // namespace pvemu::emulator
