// The PVTRAPS2 codec (traps_format.h): record validity, the message
// encoder and decoder. The reader's per-record fast path is inline in
// traps_layout.h.
#include "traplog/traps_format.h"

#include <bit>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "emulator/trap_convert.h"
#include "google/protobuf/stubs/common.h"
#include "traplog/traps_layout.h"

namespace pvemu::traplog {
namespace traps_v2 {
namespace {

namespace v1 = ::pvemu::v1;

bool AllZero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// Whether the insn bytes past `len` (<= 15) are zero: two overlapping 8-byte
// loads cover the 15 bytes, masked to the tail.
inline bool InsnTailIsZero(const char* r, unsigned len) {
  const uint64_t lo = Load64(r + kInsn);      // insn[0..7]
  const uint64_t hi = Load64(r + kInsn + 7);  // insn[7..14]
  const uint64_t all = ~uint64_t{0};
  const uint64_t lo_mask = len >= 8 ? 0 : all << (8 * len);
  const uint64_t hi_mask =
      len <= 7 ? all : (len >= 15 ? 0 : all << (8 * (len - 7)));
  return ((lo & lo_mask) | (hi & hi_mask)) == 0;
}

// What can be wrong with a PVTRAPS2 record whose body_bytes is within the
// limits and whose bytes are all in memory, in the order a reader reports
// them (the first that applies).
enum class Damage : uint8_t {
  kFlags,
  kRegsWithoutTrap,
  kPartsWithoutExpect,
  kMode,
  kCpl,
  kInsnLen,
  kKind,
  kVector,
  kStrings,
  kPadding,
  kInsnTail,
  kAbsentTrap,
  kAbsentRegs,
  kAbsentExpect,
  kAbsentVector,
  kAbsentValue,
  kAbsentCpuid,
  kSourceUtf8,
  kNoteUtf8,
};

// The numbers an enum names, as a bitmap over the u8 range, from the
// generated _IsValid (so the schema stays the one authority), for lookups on
// the trap path without a call.
struct ByteSet {
  uint64_t bits[4] = {};
  bool Has(uint8_t v) const { return (bits[v >> 6] >> (v & 63)) & 1; }
};
ByteSet NamedBy(bool (*is_valid)(int)) {
  ByteSet set;
  for (int v = 0; v < 256; ++v) {
    if (is_valid(v)) set.bits[v >> 6] |= uint64_t{1} << (v & 63);
  }
  return set;
}
const ByteSet kCpuModes = NamedBy(&v1::CpuMode_IsValid);
const ByteSet kOutcomeKinds = NamedBy(&v1::Outcome_Kind_IsValid);
const ByteSet kVectors = NamedBy(&v1::Vector_IsValid);

constexpr uint32_t Bit(Damage d) { return uint32_t{1} << static_cast<int>(d); }

std::string HexByte(uint8_t b) {
  return absl::StrCat("0x", absl::Hex(b, absl::kZeroPad2));
}

ByteClasses MakeByteClasses() {
  ByteClasses c;
  for (int v = 0; v < 256; ++v) {
    const auto b = static_cast<uint8_t>(v);
    c.of[v] = static_cast<uint8_t>((kCpuModes.Has(b) ? 1 : 0) |
                                   (kOutcomeKinds.Has(b) ? 2 : 0) |
                                   (kVectors.Has(b) ? 4 : 0));
  }
  return c;
}

ModeTable MakeModeTable() {
  ModeTable t;
  for (int v = 0; v < 256; ++v) {
    t.of[v] = emulator::ModeFromProto(static_cast<v1::CpuMode>(v));
  }
  return t;
}

}  // namespace

const ByteClasses kByteClasses = MakeByteClasses();
const ModeTable kModeOf = MakeModeTable();

uint32_t DamageOf(const char* r, uint32_t body) {
  const uint8_t flags = Load8(r + kFlags);
  const uint8_t mode = Load8(r + kMode);
  const uint8_t cpl = Load8(r + kCpl);
  const uint8_t len = Load8(r + kInsnLen);
  const uint8_t kind = Load8(r + kExpectKind);
  const uint8_t vector = Load8(r + kExpectVector);
  const uint32_t source_len = Load32(r + kSourceLen);
  const uint32_t note_len = Load32(r + kNoteLen);
  const bool trap_set = flags & kTrapSet;
  const bool expect_set = flags & kExpectSet;
  auto bit = [](bool applies, Damage d) { return applies ? Bit(d) : 0u; };
  uint32_t damage =
      bit(flags & ~kKnownFlags, Damage::kFlags) |
      bit((flags & kRegsSet) && !trap_set, Damage::kRegsWithoutTrap) |
      bit((flags & kExpectParts) && !expect_set, Damage::kPartsWithoutExpect) |
      bit(!kCpuModes.Has(mode), Damage::kMode) | bit(cpl > 3, Damage::kCpl) |
      bit(len > kMaxInsnLength, Damage::kInsnLen) |
      bit(!kOutcomeKinds.Has(kind), Damage::kKind) |
      bit(!kVectors.Has(vector), Damage::kVector) |
      bit(uint64_t{source_len} + note_len != body - kMinBody,
          Damage::kStrings) |
      bit((Load32(r + kPadding - 1) >> 8) != 0, Damage::kPadding) |
      bit(len <= kMaxInsnLength && !InsnTailIsZero(r, len), Damage::kInsnTail) |
      bit(!trap_set && ((Load64(r + kDomain) | Load64(r + kHostTsc)) != 0 ||
                        (mode | cpl | len) != 0),
          Damage::kAbsentTrap) |
      bit(!expect_set && kind != 0, Damage::kAbsentExpect) |
      bit(!(flags & kVectorSet) && vector != 0, Damage::kAbsentVector) |
      bit(!(flags & kValueSet) && Load64(r + kExpectValue) != 0,
          Damage::kAbsentValue) |
      bit(!(flags & kCpuidSet) &&
              (Load64(r + kExpectCpuid) | Load64(r + kExpectCpuid + 8)) != 0,
          Damage::kAbsentCpuid);
  if (!(flags & kRegsSet)) [[unlikely]] {
    damage |= bit(!AllZero(r + kRegs, 8 * kNumRegs), Damage::kAbsentRegs);
  }
  // proto3 strings hold UTF-8 (see CheckStrings): what Next() returns, the
  // writer must accept. Only for lengths that fit the body.
  if ((source_len | note_len) != 0 && !(damage & Bit(Damage::kStrings))) {
    damage |= bit(!google::protobuf::internal::IsStructurallyValidUTF8(
                      r + kFixed, static_cast<int>(source_len)),
                  Damage::kSourceUtf8);
    damage |= bit(!google::protobuf::internal::IsStructurallyValidUTF8(
                      r + kFixed + source_len, static_cast<int>(note_len)),
                  Damage::kNoteUtf8);
  }
  return damage;
}

// What the first of `damage` (DamageOf's bits, not 0) means, for people.
std::string DescribeDamage(uint32_t damage, const char* r, uint32_t body) {
  const uint8_t flags = Load8(r + kFlags);
  switch (static_cast<Damage>(std::countr_zero(damage))) {
    case Damage::kFlags:
      return absl::StrCat("flags ", HexByte(flags), " has reserved bits ",
                          HexByte(flags & ~kKnownFlags), " set");
    case Damage::kRegsWithoutTrap:
      return absl::StrCat("flags ", HexByte(flags),
                          " mark trap.regs set but not the trap");
    case Damage::kPartsWithoutExpect:
      return absl::StrCat("flags ", HexByte(flags),
                          " mark expectation fields set but not the "
                          "expectation");
    case Damage::kMode:
      return absl::StrCat("mode ", Load8(r + kMode),
                          " is not a pvemu.v1.CpuMode");
    case Damage::kCpl:
      return absl::StrCat("cpl ", Load8(r + kCpl), " is above 3");
    case Damage::kInsnLen:
      return absl::StrCat("insn_len ", Load8(r + kInsnLen), " is above ",
                          kMaxInsnLength);
    case Damage::kKind:
      return absl::StrCat("expect_kind ", Load8(r + kExpectKind),
                          " is not a pvemu.v1.Outcome.Kind");
    case Damage::kVector:
      return absl::StrCat("expect_vector ", Load8(r + kExpectVector),
                          " is not a pvemu.v1.Vector");
    case Damage::kStrings:
      return absl::StrCat("source_len ", Load32(r + kSourceLen), " + note_len ",
                          Load32(r + kNoteLen), " do not fill the body: ", body,
                          " bytes leave ", body - kMinBody, " for the strings");
    case Damage::kPadding:
      return "padding bytes 33..35 are not zero";
    case Damage::kInsnTail:
      return absl::StrCat("insn bytes past insn_len ", Load8(r + kInsnLen),
                          " are not zero");
    case Damage::kAbsentTrap:
      return absl::StrCat("flags ", HexByte(flags),
                          " mark the trap absent but its fields are not zero");
    case Damage::kAbsentRegs:
      return absl::StrCat("flags ", HexByte(flags),
                          " mark trap.regs absent but regs are not zero");
    case Damage::kAbsentExpect:
      return absl::StrCat("flags ", HexByte(flags),
                          " mark the expectation absent but expect_kind is ",
                          Load8(r + kExpectKind));
    case Damage::kAbsentVector:
      return absl::StrCat("flags ", HexByte(flags),
                          " mark expect.vector absent but expect_vector is ",
                          Load8(r + kExpectVector));
    case Damage::kAbsentValue:
      return absl::StrCat("flags ", HexByte(flags),
                          " mark expect.value absent but expect_value is 0x",
                          absl::Hex(Load64(r + kExpectValue)));
    case Damage::kAbsentCpuid:
      return absl::StrCat("flags ", HexByte(flags),
                          " mark expect.cpuid absent but expect_cpuid is "
                          "not zero");
    case Damage::kSourceUtf8:
      return "source is not valid UTF-8 (a proto3 string must be)";
    case Damage::kNoteUtf8:
      return "note is not valid UTF-8 (a proto3 string must be)";
  }
  return absl::StrCat("damage bits 0x", absl::Hex(damage));
}

namespace {

// EncodeTrapsRecord's refusals: InvalidArgument, the message prefixed by
// `where`.
template <typename... Args>
absl::Status Refuse(absl::string_view where, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(where, args...));
}

// The limits TrapFromProto enforces, and the enums' names: a reader refuses
// anything else (see DamageOf).
absl::Status CheckLayoutLimits(const v1::Trap& trap,
                               const v1::Expectation& expect,
                               absl::string_view where) {
  if (trap.insn().size() > static_cast<size_t>(kMaxInsnLength)) {
    return Refuse(
        where, ": trap.insn is ", trap.insn().size(),
        " bytes; an x86 instruction (and a .traps record) holds at most ",
        kMaxInsnLength);
  }
  if (trap.cpl() > 3) {
    return Refuse(where, ": trap.cpl is ", trap.cpl(),
                  "; the privilege level is 0..3");
  }
  if (!v1::CpuMode_IsValid(trap.mode())) {
    return Refuse(where, ": trap.mode is ", trap.mode(),
                  ", which is not a pvemu.v1.CpuMode");
  }
  if (!v1::Outcome_Kind_IsValid(expect.kind())) {
    return Refuse(where, ": expect.kind is ", expect.kind(),
                  ", which is not a pvemu.v1.Outcome.Kind");
  }
  if (expect.has_vector() && !v1::Vector_IsValid(expect.vector())) {
    return Refuse(where, ": expect.vector is ", expect.vector(),
                  ", which is not a pvemu.v1.Vector");
  }
  return absl::OkStatus();
}

// Whatever else TrapFromProto refuses (a reserved domain id): a .traps
// record is one replay can use.
absl::Status CheckReplayable(const v1::Trap& trap, absl::string_view where) {
  absl::StatusOr<emulator::Trap> converted = emulator::TrapFromProto(trap);
  if (!converted.ok()) return Refuse(where, ": ", converted.status().message());
  return absl::OkStatus();
}

// The trap's fields into the record at `r` (zero-filled); returns the flags
// they set.
uint8_t StoreTrap(const v1::Trap& trap, char* r) {
  uint8_t flags = kTrapSet;
  Store32(r + kDomain, trap.domain());
  Store32(r + kVcpu, trap.vcpu());
  Store8(r + kMode, static_cast<uint32_t>(trap.mode()));
  Store8(r + kCpl, trap.cpl());
  Store8(r + kInsnLen, static_cast<uint32_t>(trap.insn().size()));
  std::memcpy(r + kInsn, trap.insn().data(), trap.insn().size());
  if (trap.has_regs()) {
    flags |= kRegsSet;
    const v1::Registers& g = trap.regs();
    const uint64_t regs[kNumRegs] = {
        g.rax(), g.rcx(), g.rdx(), g.rbx(), g.rsp(), g.rbp(),
        g.rsi(), g.rdi(), g.r8(),  g.r9(),  g.r10(), g.r11(),
        g.r12(), g.r13(), g.r14(), g.r15(), g.rip(), g.rflags()};
    for (int i = 0; i < kNumRegs; ++i) Store64(r + kRegs + 8 * i, regs[i]);
  }
  Store64(r + kHostTsc, trap.host_tsc());
  return flags;
}

// The expectation's fields into the record at `r` (zero-filled); returns the
// flags they set.
uint8_t StoreExpect(const v1::Expectation& expect, char* r) {
  uint8_t flags = kExpectSet;
  Store8(r + kExpectKind, static_cast<uint32_t>(expect.kind()));
  if (expect.has_vector()) {
    flags |= kVectorSet;
    Store8(r + kExpectVector, static_cast<uint32_t>(expect.vector()));
  }
  if (expect.has_value()) {
    flags |= kValueSet;
    Store64(r + kExpectValue, expect.value());
  }
  if (expect.has_cpuid()) {
    flags |= kCpuidSet;
    const v1::CpuidRegs& c = expect.cpuid();
    Store32(r + kExpectCpuid, c.eax());
    Store32(r + kExpectCpuid + 4, c.ebx());
    Store32(r + kExpectCpuid + 8, c.ecx());
    Store32(r + kExpectCpuid + 12, c.edx());
  }
  if (expect.relaxed()) flags |= kRelaxedSet;
  return flags;
}

}  // namespace

}  // namespace traps_v2

namespace v1 = ::pvemu::v1;

// Checks what a reader would refuse, then lays the record out: the fixed
// part zero-filled, the fields set, then the strings.
absl::Status EncodeTrapsRecord(const v1::TrapRecord& record,
                               absl::string_view where, std::string* out) {
  using namespace traps_v2;  // NOLINT: the layout's names
  RETURN_IF_ERROR(CheckLayoutLimits(record.trap(), record.expect(), where));
  if (record.has_trap()) {
    RETURN_IF_ERROR(CheckReplayable(record.trap(), where));
  }
  const std::string& source = record.source();
  const std::string& note = record.note();
  const size_t body = kMinBody + source.size() + note.size();
  if (body > kMaxTrapRecordBytes) {
    return Refuse(where, " is ", body, " bytes; the limit is ",
                  kMaxTrapRecordBytes);
  }

  out->assign(kFixed, '\0');  // every field not set below stays zero
  out->append(source);
  out->append(note);
  char* r = out->data();
  uint8_t flags = 0;
  Store32(r + kBodyBytes, static_cast<uint32_t>(body));
  if (record.has_trap()) flags |= StoreTrap(record.trap(), r);
  if (record.has_expect()) flags |= StoreExpect(record.expect(), r);
  Store8(r + kFlags, flags);
  Store32(r + kSourceLen, static_cast<uint32_t>(source.size()));
  Store32(r + kNoteLen, static_cast<uint32_t>(note.size()));
  return absl::OkStatus();
}

void DecodeTrapsRecord(const char* r, v1::TrapRecord* record) {
  using namespace traps_v2;  // NOLINT: the layout's names
  const uint8_t flags = Load8(r + kFlags);
  if (flags & kTrapSet) {
    v1::Trap* trap = record->mutable_trap();
    trap->set_domain(Load32(r + kDomain));
    trap->set_vcpu(Load32(r + kVcpu));
    trap->set_mode(static_cast<v1::CpuMode>(Load8(r + kMode)));
    trap->set_cpl(Load8(r + kCpl));
    trap->set_insn(r + kInsn, Load8(r + kInsnLen));
    if (flags & kRegsSet) {
      emulator::Regs regs;
      std::memcpy(regs.gpr, r + kRegs, sizeof(regs.gpr));
      regs.rip = Load64(r + kRegs + 8 * 16);
      regs.rflags = Load64(r + kRegs + 8 * 17);  // as recorded
      emulator::RegsToProto(regs, trap->mutable_regs());
    }
    trap->set_host_tsc(Load64(r + kHostTsc));
  }
  if (flags & kExpectSet) {
    v1::Expectation* expect = record->mutable_expect();
    expect->set_kind(static_cast<v1::Outcome::Kind>(Load8(r + kExpectKind)));
    if (flags & kVectorSet) {
      expect->set_vector(static_cast<v1::Vector>(Load8(r + kExpectVector)));
    }
    if (flags & kValueSet) expect->set_value(Load64(r + kExpectValue));
    if (flags & kRelaxedSet) expect->set_relaxed(true);
    if (flags & kCpuidSet) {
      v1::CpuidRegs* c = expect->mutable_cpuid();
      c->set_eax(Load32(r + kExpectCpuid));
      c->set_ebx(Load32(r + kExpectCpuid + 4));
      c->set_ecx(Load32(r + kExpectCpuid + 8));
      c->set_edx(Load32(r + kExpectCpuid + 12));
    }
  }
  const uint32_t source_len = Load32(r + kSourceLen);
  record->set_source(r + kFixed, source_len);
  record->set_note(r + kFixed + source_len, Load32(r + kNoteLen));
}

}  // namespace pvemu::traplog
