#include "traplog/traplog.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/config.h"
#include "absl/base/optimization.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "emulator/trap_convert.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/text_format.h"
#include "base/status_macros.h"
#include "base/textproto.h"

namespace pvemu::traplog {

using emulator::kMaxInsnLength;
using emulator::kRax;
using emulator::kRbx;
using emulator::kRcx;
using emulator::kRdx;
using emulator::Mode;
using emulator::ModeFromProto;
using emulator::Regs;
using emulator::TrapFromProto;
using emulator::TrapToProto;
using emulator::OutcomeToProto;
using emulator::Outcome;
using emulator::OutcomeKind;
using emulator::Trap;
using emulator::Vector;
namespace {

namespace v1 = ::pvemu::v1;
using ::google::protobuf::io::CodedInputStream;
using ::google::protobuf::io::CodedOutputStream;

// Buffered bytes are handed to write(2) in chunks of about this size.
constexpr size_t kWriteChunk = size_t{1} << 16;

// Comments that tell editors and people what schema a text log follows.
constexpr absl::string_view kTextHeader =
    "# proto-file: pvemu/v1/trap.proto\n"
    "# proto-message: pvemu.v1.TrapLog\n";

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// fsync of the directory makes a rename durable, not only the file's data.
absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat(dir, ": cannot open"));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory; the data itself is synced.
  if (rc != 0 && err != EINVAL && err != EBADF) {
    return ErrnoStatus(err, absl::StrCat(dir, ": fsync"));
  }
  return absl::OkStatus();
}

// proto3 string fields must hold UTF-8: the binary parser rejects a record
// whose source or note does not, while the text parser and the serializer let
// it through. Checked on both sides so that whatever a writer accepts, a
// reader returns. (A TrapRecord has no other string fields.)
absl::Status CheckStrings(const v1::TrapRecord& record,
                          absl::string_view where) {
  for (const auto& [field, text] :
       {std::pair<absl::string_view, const std::string*>{"source",
                                                         &record.source()},
        {"note", &record.note()}}) {
    if (!google::protobuf::internal::IsStructurallyValidUTF8(
            text->data(), static_cast<int>(text->size()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, field, " is not valid UTF-8 (a proto3 string must be)"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// The PVTRAPS2 record layout (the table in traplog.h). Integers are stored
// with memcpy, which is little-endian only on a little-endian host.

#ifdef ABSL_IS_LITTLE_ENDIAN
constexpr bool kHostIsLittleEndian = true;
#else
constexpr bool kHostIsLittleEndian = false;
#endif
static_assert(kHostIsLittleEndian,
              "the PVTRAPS2 codec memcpy's little-endian integers; give "
              "Load*/Store* byte swaps before building for this host");

namespace v2 {
constexpr size_t kBodyBytes = 0;      // u32
constexpr size_t kDomain = 4;         // u32
constexpr size_t kVcpu = 8;           // u32
constexpr size_t kMode = 12;          // u8
constexpr size_t kCpl = 13;           // u8
constexpr size_t kInsnLen = 14;       // u8
constexpr size_t kFlags = 15;         // u8
constexpr size_t kInsn = 16;          // 15 bytes
constexpr size_t kExpectKind = 31;    // u8
constexpr size_t kExpectVector = 32;  // u8
constexpr size_t kPadding = 33;       // 3 bytes
constexpr size_t kRegs = 36;          // 18 x u64
constexpr size_t kHostTsc = 180;      // u64
constexpr size_t kExpectValue = 188;  // u64
constexpr size_t kExpectCpuid = 196;  // 4 x u32
constexpr size_t kSourceLen = 212;    // u32
constexpr size_t kNoteLen = 216;      // u32
constexpr size_t kFixed = 220;        // the strings follow
constexpr size_t kPrefix = kDomain;   // body_bytes counts from here
constexpr uint32_t kMinBody = kFixed - kPrefix;
constexpr int kNumRegs = 18;

static_assert(kInsn + kMaxInsnLength == kExpectKind);
static_assert(kRegs + 8 * kNumRegs == kHostTsc);
static_assert(kRegs % 4 == 0 && kSourceLen + 8 == kFixed);

constexpr uint8_t kExpectSet = 0x01;
constexpr uint8_t kVectorSet = 0x02;
constexpr uint8_t kValueSet = 0x04;
constexpr uint8_t kCpuidSet = 0x08;
constexpr uint8_t kTrapSet = 0x10;
constexpr uint8_t kRegsSet = 0x20;
constexpr uint8_t kKnownFlags = 0x3f;
constexpr uint8_t kExpectParts = kVectorSet | kValueSet | kCpuidSet;
}  // namespace v2

inline uint8_t Load8(const char* p) { return static_cast<uint8_t>(*p); }
inline uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store8(char* p, uint32_t v) { *p = static_cast<char>(v); }
inline void Store32(char* p, uint32_t v) { std::memcpy(p, &v, sizeof(v)); }
inline void Store64(char* p, uint64_t v) { std::memcpy(p, &v, sizeof(v)); }

bool AllZero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// Whether the insn bytes past `len` (<= 15) are zero: two overlapping 8-byte
// loads cover the 15 bytes, masked to the tail.
inline bool InsnTailIsZero(const char* r, unsigned len) {
  const uint64_t lo = Load64(r + v2::kInsn);      // insn[0..7]
  const uint64_t hi = Load64(r + v2::kInsn + 7);  // insn[7..14]
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

// Every Damage that applies to the record at `r`, one bit each: a valid
// record is 0. This is the definition of a valid record; FastValid() below
// only speeds up the common case.
uint32_t DamageOf(const char* r, uint32_t body) {
  using namespace v2;  // NOLINT: the layout's names
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

std::string HexByte(uint8_t b) {
  return absl::StrCat("0x", absl::Hex(b, absl::kZeroPad2));
}

// Per u8 value: whether it names a CpuMode (1), an Outcome.Kind (2), a
// Vector (4).
struct ByteClasses {
  uint8_t of[256];
};
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
const ByteClasses kByteClasses = MakeByteClasses();

// Per insn_len 0..15: the bits of the two overlapping 8-byte insn loads
// (insn[0..7], insn[7..14]) that lie past insn_len.
struct TailMask {
  uint64_t lo, hi;
};
constexpr std::array<TailMask, 16> MakeTailMasks() {
  std::array<TailMask, 16> m{};
  for (unsigned len = 0; len < 16; ++len) {
    for (unsigned i = 0; i < 8; ++i) {
      if (i >= len) m[len].lo |= uint64_t{0xff} << (8 * i);
      if (7 + i >= len) m[len].hi |= uint64_t{0xff} << (8 * i);
    }
  }
  return m;
}
constexpr std::array<TailMask, 16> kTailMasks = MakeTailMasks();

// True only for a valid record of the shape captures and replay files have:
// trap, registers and expectation set, no source or note. Branch-free: one
// accumulator of everything that must be zero. A record it turns down may
// still be valid; DamageOf decides. (It must never accept what DamageOf
// refuses; the damage tests run records of this shape through both.)
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool FastValid(const char* r,
                                                   uint32_t body) {
  using namespace v2;  // NOLINT: the layout's names
  const uint8_t flags = Load8(r + kFlags);
  const uint8_t len = Load8(r + kInsnLen);
  const uint8_t vector = Load8(r + kExpectVector);
  // All ones where the flag is clear: the field must then be zero.
  auto absent = [flags](uint8_t flag) -> uint64_t {
    return (flags & flag) ? 0 : ~uint64_t{0};
  };
  const TailMask& tail = kTailMasks[len & 15];
  uint64_t bad = static_cast<uint8_t>((flags | kExpectParts) ^ kKnownFlags);
  bad |= body ^ kMinBody;         // no strings ...
  bad |= Load64(r + kSourceLen);  // ... and lengths to match
  bad |= (Load8(r + kCpl) & ~3u) | (len & ~15u);
  bad |= (~kByteClasses.of[Load8(r + kMode)] & 1u) |
         (~kByteClasses.of[Load8(r + kExpectKind)] & 2u) |
         (~kByteClasses.of[vector] & 4u);
  bad |= Load32(r + kPadding - 1) >> 8;
  bad |= (Load64(r + kInsn) & tail.lo) | (Load64(r + kInsn + 7) & tail.hi);
  bad |= vector & absent(kVectorSet);
  bad |= Load64(r + kExpectValue) & absent(kValueSet);
  bad |= (Load64(r + kExpectCpuid) | Load64(r + kExpectCpuid + 8)) &
         absent(kCpuidSet);
  return bad == 0;
}

// What the first of `damage` (DamageOf's bits, not 0) means, for people.
std::string DescribeDamage(uint32_t damage, const char* r, uint32_t body) {
  using namespace v2;  // NOLINT: the layout's names
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

// Encodes `record` as one PVTRAPS2 record into *out (reusing its capacity).
// `where` prefixes errors ("NAME: record N").
absl::Status EncodeV2(const v1::TrapRecord& record, absl::string_view where,
                      std::string* out) {
  using namespace v2;  // NOLINT: the layout's names
  const v1::Trap& trap = record.trap();
  const v1::Expectation& expect = record.expect();
  // The limits TrapFromProto enforces, and the enums' names: a reader
  // refuses anything else.
  if (trap.insn().size() > static_cast<size_t>(kMaxInsnLength)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": trap.insn is ", trap.insn().size(),
        " bytes; an x86 instruction (and a .traps record) holds at most ",
        kMaxInsnLength));
  }
  if (trap.cpl() > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": trap.cpl is ", trap.cpl(), "; the privilege level is 0..3"));
  }
  if (!v1::CpuMode_IsValid(trap.mode())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": trap.mode is ", trap.mode(),
                     ", which is not a pvemu.v1.CpuMode"));
  }
  if (!v1::Outcome_Kind_IsValid(expect.kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expect.kind is ", expect.kind(),
                     ", which is not a pvemu.v1.Outcome.Kind"));
  }
  if (expect.has_vector() && !v1::Vector_IsValid(expect.vector())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expect.vector is ", expect.vector(),
                     ", which is not a pvemu.v1.Vector"));
  }
  // Whatever else TrapFromProto refuses (a reserved domain id): a .traps
  // record is one replay can use.
  if (record.has_trap()) {
    absl::StatusOr<Trap> converted = TrapFromProto(trap);
    if (!converted.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", converted.status().message()));
    }
  }
  const std::string& source = record.source();
  const std::string& note = record.note();
  const size_t body = kMinBody + source.size() + note.size();
  if (body > kMaxTrapRecordBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is ", body, " bytes; the limit is ", kMaxTrapRecordBytes));
  }

  out->assign(kFixed, '\0');  // every field not set below stays zero
  out->append(source);
  out->append(note);
  char* r = out->data();
  uint8_t flags = 0;
  Store32(r + kBodyBytes, static_cast<uint32_t>(body));
  if (record.has_trap()) {
    flags |= kTrapSet;
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
  }
  if (record.has_expect()) {
    flags |= kExpectSet;
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
  }
  Store8(r + kFlags, flags);
  Store32(r + kSourceLen, static_cast<uint32_t>(source.size()));
  Store32(r + kNoteLen, static_cast<uint32_t>(note.size()));
  return absl::OkStatus();
}

// The record at `r` (validated) as a message; `record` is clear.
void DecodeV2(const char* r, v1::TrapRecord* record) {
  using namespace v2;  // NOLINT: the layout's names
  const uint8_t flags = Load8(r + kFlags);
  if (flags & kTrapSet) {
    v1::Trap* trap = record->mutable_trap();
    trap->set_domain(Load32(r + kDomain));
    trap->set_vcpu(Load32(r + kVcpu));
    trap->set_mode(static_cast<v1::CpuMode>(Load8(r + kMode)));
    trap->set_cpl(Load8(r + kCpl));
    trap->set_insn(r + kInsn, Load8(r + kInsnLen));
    if (flags & kRegsSet) {
      Regs regs;
      std::memcpy(regs.gpr, r + kRegs, sizeof(regs.gpr));
      regs.rip = Load64(r + kRegs + 8 * 16);
      regs.rflags = Load64(r + kRegs + 8 * 17);  // as recorded
      RegsToProto(regs, trap->mutable_regs());
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

// ModeFromProto of every u8, looked up without a call.
struct ModeTable {
  Mode of[256];
};
ModeTable MakeModeTable() {
  ModeTable t;
  for (int v = 0; v < 256; ++v) {
    t.of[v] = ModeFromProto(static_cast<v1::CpuMode>(v));
  }
  return t;
}
const ModeTable kModeOf = MakeModeTable();

// Whether TrapFromProto might refuse a trap that passed the layout's checks
// (insn_len, cpl, mode): its one further rule, a reserved domain id. Only a
// hint for the fast path, which then asks TrapFromProto itself; the NextTrap
// tests compare with TrapFromProto at every limit.
inline bool TrapFromProtoMayRefuse(const Trap& trap) {
  return trap.domain == 0xffffffffu;
}

// The record at `r` (validated) as the trap-path structs, equal to what
// TrapFromProto and ExpectedOutcomeFromProto make of DecodeV2's message: the
// format's zeros for absent fields are the messages' defaults.
inline void DecodeV2Trap(const char* r, Trap* trap) {
  using namespace v2;  // NOLINT: the layout's names
  trap->domain = Load32(r + kDomain);
  trap->vcpu = Load32(r + kVcpu);
  trap->mode = kModeOf.of[Load8(r + kMode)];
  trap->cpl = Load8(r + kCpl);
  trap->insn_len = Load8(r + kInsnLen);
  std::memcpy(trap->insn, r + kInsn, kMaxInsnLength);  // the tail is zero
  // v1.Registers field order is the x86 register number order.
  std::memcpy(trap->regs.gpr, r + kRegs, sizeof(trap->regs.gpr));
  trap->regs.rip = Load64(r + kRegs + 8 * 16);
  trap->regs.rflags = Load64(r + kRegs + 8 * 17) | 0x2;  // as RegsFromProto
  trap->host_tsc = Load64(r + kHostTsc);
}

inline void DecodeV2Expect(const char* r, ExpectedOutcome* expect) {
  using namespace v2;  // NOLINT: the layout's names
  const uint8_t flags = Load8(r + kFlags);
  const uint8_t kind = Load8(r + kExpectKind);
  expect->has_kind = kind != v1::Outcome::KIND_UNSPECIFIED;
  expect->kind = static_cast<v1::Outcome::Kind>(kind);
  expect->has_vector = (flags & kVectorSet) != 0;
  expect->vector = static_cast<v1::Vector>(Load8(r + kExpectVector));
  expect->has_value = (flags & kValueSet) != 0;
  expect->value = Load64(r + kExpectValue);
  expect->has_cpuid = (flags & kCpuidSet) != 0;
  std::memcpy(expect->cpuid, r + kExpectCpuid, sizeof(expect->cpuid));
}

}  // namespace

absl::StatusOr<TrapLogEncoding> TrapLogEncodingForPath(absl::string_view path) {
  if (absl::EndsWith(path, ".textproto")) return TrapLogEncoding::kText;
  if (absl::EndsWith(path, ".traps")) return TrapLogEncoding::kBinary;
  return absl::InvalidArgumentError(
      absl::StrCat(path,
                   ": unknown trap-log extension; use .textproto (text) "
                   "or .traps (binary)"));
}

// ---------------------------------------------------------------------------
// TrapLogWriter

TrapLogWriter::TrapLogWriter(TrapLogEncoding encoding, std::string name)
    : encoding_(encoding), name_(std::move(name)) {}

TrapLogWriter::~TrapLogWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

absl::StatusOr<std::unique_ptr<TrapLogWriter>> TrapLogWriter::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(TrapLogEncoding encoding, TrapLogEncodingForPath(path));
  std::unique_ptr<TrapLogWriter> w(new TrapLogWriter(encoding, path));
  w->tmp_path_ = path + ".tmp";
  w->fd_ = ::open(w->tmp_path_.c_str(),
                  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) {
    return ErrnoStatus(errno, absl::StrCat(w->tmp_path_, ": cannot create"));
  }
  RETURN_IF_ERROR(w->Write(encoding == TrapLogEncoding::kBinary ? kTrapsMagic
                                                                : kTextHeader));
  return w;
}

std::unique_ptr<TrapLogWriter> TrapLogWriter::ForStream(
    std::ostream* out, TrapLogEncoding encoding, absl::string_view name) {
  std::unique_ptr<TrapLogWriter> w(
      new TrapLogWriter(encoding, std::string(name)));
  w->out_ = out;
  // A stream write error surfaces at the first Append or at Close.
  absl::string_view header =
      encoding == TrapLogEncoding::kBinary ? kTrapsMagic : kTextHeader;
  out->write(header.data(), static_cast<std::streamsize>(header.size()));
  return w;
}

absl::Status TrapLogWriter::Write(absl::string_view bytes) {
  if (out_ != nullptr) {
    out_->write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out_->good()) {
      return absl::DataLossError(absl::StrCat(name_, ": write failed"));
    }
    return absl::OkStatus();
  }
  buffer_.append(bytes.data(), bytes.size());
  if (buffer_.size() >= kWriteChunk) return FlushBuffer();
  return absl::OkStatus();
}

absl::Status TrapLogWriter::FlushBuffer() {
  size_t done = 0;
  while (done < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat(tmp_path_, ": write"));
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status TrapLogWriter::Append(const v1::TrapRecord& record) {
  if (closed_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": Append after Close"));
  }
  const std::string where = absl::StrCat(name_, ": record ", records_ + 1);
  RETURN_IF_ERROR(CheckStrings(record, absl::StrCat(where, ": ")));
  if (encoding_ == TrapLogEncoding::kBinary) {
    RETURN_IF_ERROR(EncodeV2(record, where, &scratch_));
    RETURN_IF_ERROR(Write(scratch_));
  } else {
    // One "record { ... }" block per record: the file stays a valid TrapLog
    // after every Append, and nothing needs to be held until Close.
    google::protobuf::TextFormat::Printer printer;
    printer.SetInitialIndentLevel(1);
    printer.SetUseShortRepeatedPrimitives(true);
    // Fields from a newer schema would print as bare numbers, which the
    // reader rejects; the text form keeps only what this schema names.
    printer.SetHideUnknownFields(true);
    scratch_ = "record {\n";
    std::string body;
    printer.PrintToString(record, &body);
    scratch_ += body;
    scratch_ += "}\n";
    RETURN_IF_ERROR(Write(scratch_));
  }
  ++records_;
  return absl::OkStatus();
}

absl::Status TrapLogWriter::Close() {
  if (closed_) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": closed twice"));
  }
  closed_ = true;
  if (out_ != nullptr) {
    out_->flush();
    if (!out_->good()) {
      return absl::DataLossError(absl::StrCat(name_, ": write failed"));
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(FlushBuffer());
  if (::fsync(fd_) != 0) {
    return ErrnoStatus(errno, absl::StrCat(tmp_path_, ": fsync"));
  }
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return ErrnoStatus(err, absl::StrCat(tmp_path_, ": close"));
  }
  if (::rename(tmp_path_.c_str(), name_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return ErrnoStatus(err, absl::StrCat("rename ", tmp_path_, " to ", name_));
  }
  return SyncDir(DirName(name_));
}

// ---------------------------------------------------------------------------
// TrapLogReader

class TrapLogReader::Impl {
 public:
  virtual ~Impl() = default;
  // As TrapLogReader::Next; `n` is the 1-based number of the record to read.
  virtual absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) = 0;

  // As TrapLogReader::NextTrap. This form reads the message with Next() and
  // converts it.
  virtual absl::StatusOr<bool> NextTrap(Trap* trap, ExpectedOutcome* expect,
                                        int64_t n) {
    ASSIGN_OR_RETURN(bool more, Next(&scratch_, n));
    if (!more) return false;
    absl::StatusOr<Trap> converted = TrapFromProto(scratch_.trap());
    if (!converted.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(n), converted.status().message()));
    }
    *trap = *converted;
    if (expect != nullptr)
      *expect = ExpectedOutcomeFromProto(scratch_.expect());
    return true;
  }

 protected:
  // "NAME: record N ...: " for record `n`, which Next() just read.
  virtual std::string Where(int64_t n) const = 0;

 private:
  v1::TrapRecord scratch_;  // NextTrap's, reused
};

namespace {

// PVTRAPS1. A fresh CodedInputStream per record keeps its 2 GiB total-bytes
// limit and position counter from ever mattering: offsets come from the
// underlying stream's 64-bit ByteCount.
class V1Impl final : public TrapLogReader::Impl {
 public:
  // `in` is just past the magic.
  V1Impl(std::unique_ptr<std::istream> owned, std::istream* in,
         std::string name)
      : owned_(std::move(owned)),
        in_(in),
        name_(std::move(name)),
        zin_(std::make_unique<google::protobuf::io::IstreamInputStream>(in)) {}

  absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) override {
    const int64_t start = Offset();
    start_ = start;
    auto where = [&] { return Where(n); };  // for this record
    uint32_t size = 0;
    bool have_body = false;
    {
      CodedInputStream coded(zin_.get());
      const void* data;
      int avail;
      if (!coded.GetDirectBufferPointer(&data, &avail)) {
        if (in_->bad()) {
          return absl::DataLossError(absl::StrCat(where(), "read failed"));
        }
        return false;  // clean end: between records
      }
      if (!coded.ReadVarint32(&size)) {
        return absl::DataLossError(
            absl::StrCat(where(), "truncated or corrupt length prefix"));
      }
      if (size > kMaxTrapRecordBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "length ", size, " exceeds the limit of ",
                         kMaxTrapRecordBytes, " bytes (corrupt file?)"));
      }
      have_body = coded.ReadString(&body_, static_cast<int>(size));
    }
    if (!have_body) {
      int64_t left =
          Offset() - start -
          static_cast<int64_t>(CodedOutputStream::VarintSize32(size));
      return absl::DataLossError(
          absl::StrCat(where(), "truncated: the record is ", size,
                       " bytes but only ", left < 0 ? 0 : left, " remain"));
    }
    record->Clear();
    if (!record->ParseFromString(body_)) {
      return absl::DataLossError(absl::StrCat(
          where(), "not a valid pvemu.v1.TrapRecord (", size, " bytes)"));
    }
    return true;
  }

 protected:
  std::string Where(int64_t n) const override {
    return absl::StrCat(name_, ": record ", n, " at byte offset ", start_,
                        ": ");
  }

 private:
  int64_t Offset() const {
    return static_cast<int64_t>(kTrapsMagicV1.size()) + zin_->ByteCount();
  }

  std::unique_ptr<std::istream> owned_;
  std::istream* in_;
  std::string name_;
  std::unique_ptr<google::protobuf::io::IstreamInputStream> zin_;
  std::string body_;   // reused: at most kMaxTrapRecordBytes
  int64_t start_ = 0;  // where the last record read starts
};

// PVTRAPS2, through one buffer of about 1 MiB that can hold the largest
// record. When the next record is not whole in it, what is left moves to the
// front and one istream::read fills the rest. Records are decoded in place.
class V2Impl final : public TrapLogReader::Impl {
 public:
  static constexpr size_t kBufferBytes = v2::kPrefix + kMaxTrapRecordBytes;

  // `in` is just past the magic.
  V2Impl(std::unique_ptr<std::istream> owned, std::istream* in,
         std::string name)
      : owned_(std::move(owned)),
        in_(in),
        name_(std::move(name)),
        buf_(new char[kBufferBytes]),  // not zeroed: untouched pages stay free
        base_(static_cast<int64_t>(kTrapsMagic.size())) {}

  absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) override {
    const char* r;
    absl::Status error;
    if (!Frame(n, &r, &error)) {
      if (!error.ok()) return error;
      return false;
    }
    record->Clear();
    DecodeV2(r, record);
    return true;
  }

  absl::StatusOr<bool> NextTrap(Trap* trap, ExpectedOutcome* expect,
                                int64_t n) override {
    const char* r;
    absl::Status error;
    if (!Frame(n, &r, &error)) [[unlikely]] {
      if (!error.ok()) return error;
      return false;
    }
    DecodeV2Trap(r, trap);
    if (TrapFromProtoMayRefuse(*trap)) [[unlikely]] {
      RETURN_IF_ERROR(ConvertsLikeTrapFromProto(r, n));
    }
    if (expect != nullptr) DecodeV2Expect(r, expect);
    return true;
  }

 protected:
  // For the record at pos_: Frame's errors come before it consumes one.
  std::string Where(int64_t n) const override {
    return WhereAt(n, base_ + static_cast<int64_t>(pos_));
  }

 private:
  std::string WhereAt(int64_t n, int64_t offset) const {
    return absl::StrCat(name_, ": record ", n, " at byte offset ", offset,
                        ": ");
  }

  // TrapFromProto's verdict on the trap of the record at `r` (just framed),
  // as an error naming record `n` like the other encodings' NextTrap.
  ABSL_ATTRIBUTE_NOINLINE absl::Status ConvertsLikeTrapFromProto(const char* r,
                                                                 int64_t n) {
    v1::TrapRecord record;
    DecodeV2(r, &record);
    absl::StatusOr<Trap> converted = TrapFromProto(record.trap());
    if (converted.ok()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        WhereAt(n, base_ + (r - buf_.get())), converted.status().message()));
  }

  // Points *rec at the next record, whole in the buffer and valid, and
  // consumes it. Returns false at the end: *error stays OK at a clean end
  // and says what is wrong otherwise (record `n`).
  bool Frame(int64_t n, const char** rec, absl::Status* error) {
    const size_t have = end_ - pos_;
    if (have >= v2::kFixed) [[likely]] {
      const char* r = buf_.get() + pos_;
      const uint32_t body = Load32(r + v2::kBodyBytes);
      if (have >= v2::kPrefix + body && FastValid(r, body)) [[likely]] {
        *rec = r;
        pos_ += v2::kPrefix + body;
        return true;
      }
    }
    return FrameSlow(n, rec, error);
  }

  // Frame's path for a refill, the end, damage, and records of other shapes
  // than FastValid's.
  ABSL_ATTRIBUTE_NOINLINE bool FrameSlow(int64_t n, const char** rec,
                                         absl::Status* error) {
    if (!Fill(v2::kPrefix)) {
      const size_t have = end_ - pos_;
      if (read_failed_) {
        *error = absl::DataLossError(absl::StrCat(Where(n), "read failed"));
      } else if (have != 0) {
        *error = absl::DataLossError(absl::StrCat(Where(n), "truncated: only ",
                                                  have, " of the ", v2::kPrefix,
                                                  " length bytes remain"));
      }
      return false;  // else a clean end: between records
    }
    const uint32_t body = Load32(buf_.get() + pos_ + v2::kBodyBytes);
    if (body > kMaxTrapRecordBytes) {
      *error = absl::InvalidArgumentError(
          absl::StrCat(Where(n), "length ", body, " exceeds the limit of ",
                       kMaxTrapRecordBytes, " bytes (corrupt file?)"));
      return false;
    }
    if (body < v2::kMinBody) {
      *error = absl::DataLossError(
          absl::StrCat(Where(n), "length ", body, " is shorter than the ",
                       v2::kMinBody, "-byte fixed part of a PVTRAPS2 record"));
      return false;
    }
    if (!Fill(v2::kPrefix + body)) {
      *error = absl::DataLossError(
          read_failed_ ? absl::StrCat(Where(n), "read failed")
                       : absl::StrCat(Where(n), "truncated: the record is ",
                                      body, " bytes but only ",
                                      end_ - pos_ - v2::kPrefix, " remain"));
      return false;
    }
    const char* r = buf_.get() + pos_;
    const uint32_t damage = DamageOf(r, body);
    if (damage != 0) {
      *error = absl::DataLossError(
          absl::StrCat(Where(n), DescribeDamage(damage, r, body)));
      return false;
    }
    *rec = r;
    pos_ += v2::kPrefix + body;
    return true;
  }

  // Makes `need` (<= kBufferBytes) bytes available from pos_, moving what is
  // left to the front and filling the rest of the buffer. False if the
  // stream ends (or fails, read_failed_) first.
  bool Fill(size_t need) {
    if (end_ - pos_ >= need) return true;
    if (pos_ != 0) {
      std::memmove(buf_.get(), buf_.get() + pos_, end_ - pos_);
      base_ += static_cast<int64_t>(pos_);
      end_ -= pos_;
      pos_ = 0;
    }
    while (end_ < need && !eof_) {
      const size_t want = kBufferBytes - end_;
      in_->read(buf_.get() + end_, static_cast<std::streamsize>(want));
      const size_t got = static_cast<size_t>(in_->gcount());
      end_ += got;
      if (got < want) {
        eof_ = true;
        read_failed_ = in_->bad();
      }
    }
    return end_ >= need;
  }

  std::unique_ptr<std::istream> owned_;
  std::istream* in_;
  std::string name_;
  std::unique_ptr<char[]> buf_;
  size_t pos_ = 0;  // the next record starts at buf_[pos_]
  size_t end_ = 0;  // bytes read into buf_
  int64_t base_;    // the file offset of buf_[0]
  bool eof_ = false;
  bool read_failed_ = false;
};

// Reads the magic and picks the reader for the version it names.
absl::StatusOr<std::unique_ptr<TrapLogReader::Impl>> OpenBinary(
    std::unique_ptr<std::istream> owned, std::istream* in,
    const std::string& name) {
  static_assert(kTrapsMagic.size() == kTrapsMagicV1.size());
  char magic[8] = {};
  static_assert(sizeof(magic) == kTrapsMagic.size());
  in->read(magic, sizeof(magic));
  const std::streamsize got = in->gcount();
  if (in->bad()) {
    return absl::DataLossError(absl::StrCat(name, ": read failed"));
  }
  const absl::string_view seen(magic, static_cast<size_t>(got));
  if (seen == kTrapsMagic) {
    return std::make_unique<V2Impl>(std::move(owned), in, name);
  }
  if (seen == kTrapsMagicV1) {
    return std::make_unique<V1Impl>(std::move(owned), in, name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": not a .traps file: the first 8 bytes are not \"",
                   kTrapsMagic, "\" (or the older \"", kTrapsMagicV1, "\")"));
}

class TextImpl final : public TrapLogReader::Impl {
 public:
  absl::Status Load(std::istream* in, absl::string_view name) {
    name_ = std::string(name);
    std::string text(std::istreambuf_iterator<char>(*in), {});
    if (in->bad()) {
      return absl::DataLossError(absl::StrCat(name, ": read failed"));
    }
    return ParseTextProto(text, name, &log_);
  }

  absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) override {
    if (n > log_.record_size()) return false;
    record->Clear();
    record->Swap(log_.mutable_record(static_cast<int>(n - 1)));
    RETURN_IF_ERROR(CheckStrings(*record, Where(n)));
    return true;
  }

 protected:
  std::string Where(int64_t n) const override {
    return absl::StrCat(name_, ": record ", n, ": ");
  }

 private:
  std::string name_;
  v1::TrapLog log_;
};

}  // namespace

TrapLogReader::TrapLogReader(TrapLogEncoding encoding, std::string name)
    : encoding_(encoding), name_(std::move(name)) {}

TrapLogReader::~TrapLogReader() = default;

absl::StatusOr<std::unique_ptr<TrapLogReader>> TrapLogReader::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(TrapLogEncoding encoding, TrapLogEncodingForPath(path));
  auto file = std::make_unique<std::ifstream>();
  RETURN_IF_ERROR(OpenForReading(path, file.get()));
  std::unique_ptr<TrapLogReader> r(new TrapLogReader(encoding, path));
  if (encoding == TrapLogEncoding::kBinary) {
    std::istream* in = file.get();
    ASSIGN_OR_RETURN(r->impl_, OpenBinary(std::move(file), in, path));
  } else {
    auto impl = std::make_unique<TextImpl>();
    RETURN_IF_ERROR(impl->Load(file.get(), path));
    r->impl_ = std::move(impl);
  }
  return r;
}

absl::StatusOr<std::unique_ptr<TrapLogReader>> TrapLogReader::ForStream(
    std::istream* in, TrapLogEncoding encoding, absl::string_view name) {
  std::unique_ptr<TrapLogReader> r(
      new TrapLogReader(encoding, std::string(name)));
  if (encoding == TrapLogEncoding::kBinary) {
    ASSIGN_OR_RETURN(r->impl_, OpenBinary(nullptr, in, std::string(name)));
  } else {
    auto impl = std::make_unique<TextImpl>();
    RETURN_IF_ERROR(impl->Load(in, name));
    r->impl_ = std::move(impl);
  }
  return r;
}

absl::StatusOr<bool> TrapLogReader::Next(v1::TrapRecord* record) {
  if (!sticky_error_.ok()) return sticky_error_;
  absl::StatusOr<bool> got = impl_->Next(record, records_ + 1);
  if (!got.ok()) {
    sticky_error_ = got.status();
    return got;
  }
  if (*got) ++records_;
  return got;
}

absl::StatusOr<bool> TrapLogReader::NextTrap(Trap* trap,
                                             ExpectedOutcome* expect) {
  if (!sticky_error_.ok()) [[unlikely]]
    return sticky_error_;
  absl::StatusOr<bool> got = impl_->NextTrap(trap, expect, records_ + 1);
  if (!got.ok()) [[unlikely]] {
    sticky_error_ = got.status();
    return got;
  }
  if (*got) ++records_;
  return got;
}

// ---------------------------------------------------------------------------
// CheckExpectation
//
// All three forms convert to one representation (ExpectedOutcome, Observed,
// InsnRef) and share Check(); only the conversions differ.

ExpectedOutcome ExpectedOutcomeFromProto(const v1::Expectation& expect) {
  ExpectedOutcome e;
  e.has_kind = expect.kind() != v1::Outcome::KIND_UNSPECIFIED;
  e.kind = expect.kind();
  e.has_vector = expect.has_vector();
  e.vector = expect.vector();
  e.has_value = expect.has_value();
  e.value = expect.value();
  e.has_cpuid = expect.has_cpuid();
  e.cpuid[0] = expect.cpuid().eax();
  e.cpuid[1] = expect.cpuid().ebx();
  e.cpuid[2] = expect.cpuid().ecx();
  e.cpuid[3] = expect.cpuid().edx();
  return e;
}

namespace {

// What the expected `value` is read from.
enum class ValueSource { kNone, kRdmsr, kCpuid, kIn8, kIn16, kIn32 };

// A deliberately tiny look at the bytes: skip legacy prefixes and REX, then
// recognise the few opcodes whose result a log can record. The decoder is
// the authority on instructions; this only needs to know where to look.
ValueSource SourceFromBytes(absl::string_view insn, bool is64, bool default16) {
  bool opsize = false;
  size_t i = 0;
  for (; i < insn.size(); ++i) {
    uint8_t b = static_cast<uint8_t>(insn[i]);
    if (b == 0x66) {
      opsize = true;
    } else if (b == 0x67 || b == 0xf0 || b == 0xf2 || b == 0xf3 || b == 0x2e ||
               b == 0x36 || b == 0x3e || b == 0x26 || b == 0x64 || b == 0x65) {
      // other legacy prefixes do not change what is read
    } else if (is64 && (b & 0xf0) == 0x40) {
      // REX: IN has no 64-bit form, RDMSR/CPUID ignore REX.W
    } else {
      break;
    }
  }
  if (i >= insn.size()) return ValueSource::kNone;
  uint8_t op = static_cast<uint8_t>(insn[i]);
  if (op == 0xe4 || op == 0xec) return ValueSource::kIn8;
  if (op == 0xe5 || op == 0xed) {
    return (default16 != opsize) ? ValueSource::kIn16 : ValueSource::kIn32;
  }
  if (op == 0x0f && i + 1 < insn.size()) {
    uint8_t op2 = static_cast<uint8_t>(insn[i + 1]);
    if (op2 == 0x32) return ValueSource::kRdmsr;
    if (op2 == 0xa2) return ValueSource::kCpuid;
  }
  return ValueSource::kNone;
}

ValueSource SourceFromInstruction(const v1::Instruction& insn) {
  if (insn.mnemonic() == "rdmsr") return ValueSource::kRdmsr;
  if (insn.mnemonic() == "cpuid") return ValueSource::kCpuid;
  if (insn.mnemonic() == "in") {
    switch (insn.operand_size()) {
      case 8:
        return ValueSource::kIn8;
      case 16:
        return ValueSource::kIn16;
      default:
        return ValueSource::kIn32;
    }
  }
  return ValueSource::kNone;
}

std::string BytesHex(absl::string_view bytes) {
  std::string s;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i > 0) s += ' ';
    absl::StrAppend(&s,
                    absl::Hex(static_cast<uint8_t>(bytes[i]), absl::kZeroPad2));
  }
  return s;
}

// The instruction an expectation's value refers to, looked at only when a
// value is expected or a mismatch is described.
struct InsnRef {
  bool use_bytes = false;  // learn from bytes (else from `decoded`)
  absl::string_view bytes;
  bool is64 = false;
  bool default16 = false;
  const v1::Instruction* decoded = nullptr;  // the fallback; may be null

  ValueSource Source() const {
    ValueSource src = ValueSource::kNone;
    if (use_bytes) src = SourceFromBytes(bytes, is64, default16);
    if (src == ValueSource::kNone && decoded != nullptr) {
      src = SourceFromInstruction(*decoded);
    }
    return src;
  }
  std::string Describe() const {
    if (use_bytes) {
      return absl::StrCat("the instruction (bytes ", BytesHex(bytes), ")");
    }
    return absl::StrCat("the instruction (\"",
                        decoded != nullptr ? decoded->mnemonic() : "", "\")");
  }
};

// The parts of an outcome an expectation compares, in v1 numbering.
struct Observed {
  int kind = 0;    // v1.Outcome.Kind
  int vector = 0;  // v1.Vector; meaningful for EXCEPTION
  uint64_t rax = 0, rbx = 0, rcx = 0, rdx = 0;
};

Observed ObservedFromProto(const v1::Outcome& o) {
  Observed got;
  got.kind = o.kind();
  got.vector = o.exception().vector();
  got.rax = o.regs().rax();
  got.rbx = o.regs().rbx();
  got.rcx = o.regs().rcx();
  got.rdx = o.regs().rdx();
  return got;
}

// OutcomeKind and Vector values equal the v1 numbers (emulator/cpu.h).
Observed ObservedFromStruct(const Outcome& o) {
  Observed got;
  got.kind = static_cast<int>(o.kind);
  got.vector = static_cast<int>(o.vector);
  got.rax = o.regs.gpr[kRax];
  got.rbx = o.regs.gpr[kRbx];
  got.rcx = o.regs.gpr[kRcx];
  got.rdx = o.regs.gpr[kRdx];
  return got;
}

std::string Hex(uint64_t v) { return absl::StrCat("0x", absl::Hex(v)); }

uint64_t ValueOf(ValueSource src, const Observed& o) {
  switch (src) {
    case ValueSource::kRdmsr:
      return (o.rdx << 32) | (o.rax & 0xffffffffu);
    case ValueSource::kIn8:
      return o.rax & 0xffu;
    case ValueSource::kIn16:
      return o.rax & 0xffffu;
    case ValueSource::kIn32:
      return o.rax & 0xffffffffu;
    default:
      return o.rax;
  }
}

std::string DescribeExpected(const ExpectedOutcome& e) {
  std::vector<std::string> parts;
  if (e.has_kind) {
    parts.push_back(v1::Outcome::Kind_Name(e.kind));
  } else if (e.has_vector) {
    parts.push_back("EXCEPTION");
  }
  if (e.has_vector)
    parts.push_back(absl::StrCat("#", v1::Vector_Name(e.vector)));
  if (e.has_value) parts.push_back(absl::StrCat("value=", Hex(e.value)));
  if (e.has_cpuid) {
    parts.push_back(
        absl::StrCat("eax=", Hex(e.cpuid[0]), " ebx=", Hex(e.cpuid[1]),
                     " ecx=", Hex(e.cpuid[2]), " edx=", Hex(e.cpuid[3])));
  }
  if (parts.empty()) return "anything";
  return absl::StrJoin(parts, " ");
}

std::string DescribeGot(const Observed& o, ValueSource src) {
  std::string s =
      v1::Outcome::Kind_Name(static_cast<v1::Outcome::Kind>(o.kind));
  if (s.empty()) s = absl::StrCat("kind ", o.kind);
  if (o.kind == v1::Outcome::EXCEPTION) {
    std::string name = v1::Vector_Name(static_cast<v1::Vector>(o.vector));
    if (name.empty()) name = absl::StrCat(o.vector);
    absl::StrAppend(&s, " #", name);
  } else if (o.kind == v1::Outcome::COMPLETED) {
    switch (src) {
      case ValueSource::kIn8:
      case ValueSource::kIn16:
      case ValueSource::kIn32:
        absl::StrAppend(&s, " rax=", Hex(o.rax));
        break;
      case ValueSource::kCpuid:
        absl::StrAppend(&s, " rax=", Hex(o.rax), " rbx=", Hex(o.rbx),
                        " rcx=", Hex(o.rcx), " rdx=", Hex(o.rdx));
        break;
      default:
        absl::StrAppend(&s, " rax=", Hex(o.rax), " rdx=", Hex(o.rdx));
        break;
    }
  }
  return s;
}

ABSL_ATTRIBUTE_NOINLINE absl::Status NoValueToCompare(const InsnRef& insn) {
  return absl::InvalidArgumentError(
      absl::StrCat("the expectation has a value, but ", insn.Describe(),
                   " is not RDMSR or IN, so there is no value to compare"));
}

ABSL_ATTRIBUTE_NOINLINE absl::Status Mismatch(const ExpectedOutcome& e,
                                              const Observed& o,
                                              ValueSource src,
                                              std::string* diff) {
  std::string message = absl::StrCat("expected ", DescribeExpected(e), ", got ",
                                     DescribeGot(o, src));
  if (diff != nullptr) *diff = message;
  return absl::FailedPreconditionError(message);
}

// The one comparison (see CheckExpectation in traplog.h). Builds strings
// only for a mismatch; `diff` may be null.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status Check(const ExpectedOutcome& e,
                                                       const Observed& o,
                                                       const InsnRef& insn,
                                                       std::string* diff) {
  if (diff != nullptr) diff->clear();
  bool ok = true;
  if (e.has_kind && e.kind != o.kind) ok = false;
  if (e.has_vector &&
      (o.kind != v1::Outcome::EXCEPTION || o.vector != e.vector)) {
    ok = false;
  }
  ValueSource src = ValueSource::kNone;
  bool have_src = false;
  if (e.has_value) {
    src = insn.Source();
    have_src = true;
    if (src == ValueSource::kNone || src == ValueSource::kCpuid) {
      return NoValueToCompare(insn);
    }
    if (o.kind != v1::Outcome::COMPLETED || ValueOf(src, o) != e.value) {
      ok = false;
    }
  }
  if (e.has_cpuid) {
    if (o.kind != v1::Outcome::COMPLETED ||
        static_cast<uint32_t>(o.rax) != e.cpuid[0] ||
        static_cast<uint32_t>(o.rbx) != e.cpuid[1] ||
        static_cast<uint32_t>(o.rcx) != e.cpuid[2] ||
        static_cast<uint32_t>(o.rdx) != e.cpuid[3]) {
      ok = false;
    }
  }
  if (ok) [[likely]]
    return absl::OkStatus();
  return Mismatch(e, o, have_src ? src : insn.Source(), diff);
}

}  // namespace

absl::Status CheckExpectation(const v1::TrapRecord& record,
                              const v1::Outcome& outcome, std::string* diff) {
  const v1::CpuMode mode = record.trap().mode();
  InsnRef insn;
  insn.use_bytes = true;
  insn.bytes = record.trap().insn();
  insn.is64 = mode == v1::MODE_64 || mode == v1::CPU_MODE_UNSPECIFIED;
  insn.default16 = mode == v1::MODE_REAL || mode == v1::MODE_16;
  insn.decoded = &outcome.instruction();
  return Check(ExpectedOutcomeFromProto(record.expect()),
               ObservedFromProto(outcome), insn, diff);
}

absl::Status CheckExpectation(const v1::Expectation& expect,
                              const v1::Outcome& outcome, std::string* diff) {
  InsnRef insn;
  insn.decoded = &outcome.instruction();
  return Check(ExpectedOutcomeFromProto(expect), ObservedFromProto(outcome),
               insn, diff);
}

absl::Status CheckExpectation(const ExpectedOutcome& expect, const Trap& trap,
                              const Outcome& outcome) {
  InsnRef insn;
  insn.use_bytes = true;
  insn.bytes = absl::string_view(reinterpret_cast<const char*>(trap.insn),
                                 trap.insn_len);
  insn.is64 = trap.mode == Mode::k64;
  insn.default16 = trap.mode == Mode::kReal || trap.mode == Mode::k16;
  return Check(expect, ObservedFromStruct(outcome), insn, nullptr);
}

}  // namespace pvemu::traplog
