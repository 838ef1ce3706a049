// The PVTRAPS2 record layout (the table in traps_format.h) as code, for the
// codec (traps_format.cc) and the reader (reader.cc) only: field offsets,
// loads and stores, what makes a record valid, and the decoders into the
// trap-path structs. The reader runs FastValid and DecodeTrap once per
// record, so they are inline here rather than calls into the codec.
#ifndef PVEMU_TRAPLOG_TRAPS_LAYOUT_H_
#define PVEMU_TRAPLOG_TRAPS_LAYOUT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/base/attributes.h"
#include "absl/base/config.h"
#include "emulator/trap.h"
#include "traplog/expectations.h"

namespace pvemu::traplog::traps_v2 {

// Integers are stored with memcpy, which is little-endian only on a
// little-endian host.
#ifdef ABSL_IS_LITTLE_ENDIAN
constexpr bool kHostIsLittleEndian = true;
#else
constexpr bool kHostIsLittleEndian = false;
#endif
static_assert(kHostIsLittleEndian,
              "the PVTRAPS2 codec memcpy's little-endian integers; give "
              "Load*/Store* byte swaps before building for this host");

using emulator::kMaxInsnLength;

// Field offsets from the start of a record, and the flag bits.
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
// Expectation.relaxed: the answer a learning domain got where ENFORCE would
// fault (an MSR) or float (a port). Readers before it refuse the bit as
// reserved, never misread it.
constexpr uint8_t kRelaxedSet = 0x40;
constexpr uint8_t kKnownFlags = 0x7f;
constexpr uint8_t kExpectParts = kVectorSet | kValueSet | kCpuidSet | kRelaxedSet;

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

// Per u8 value: whether it names a CpuMode (1), an Outcome.Kind (2), a
// Vector (4). Built from the generated _IsValid (traps_format.cc), so the
// schema stays the one authority.
struct ByteClasses {
  uint8_t of[256];
};
extern const ByteClasses kByteClasses;

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
inline constexpr std::array<TailMask, 16> kTailMasks = MakeTailMasks();

// True only for a valid record of the shape captures and replay files have:
// trap, registers and expectation set, no source or note. Branch-free: one
// accumulator of everything that must be zero. A record it turns down may
// still be valid; DamageOf decides. (It must never accept what DamageOf
// refuses; the damage tests run records of this shape through both.)
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool FastValid(const char* r,
                                                   uint32_t body) {
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

// ModeFromProto of every u8, looked up without a call.
struct ModeTable {
  emulator::Mode of[256];
};
extern const ModeTable kModeOf;

// Whether TrapFromProto might refuse a trap that passed the layout's checks
// (insn_len, cpl, mode): its one further rule, a reserved domain id. Only a
// hint for the fast path, which then asks TrapFromProto itself; the NextTrap
// tests compare with TrapFromProto at every limit.
inline bool TrapFromProtoMayRefuse(const emulator::Trap& trap) {
  return trap.domain == 0xffffffffu;
}

// The record at `r` (validated) as the trap-path structs, equal to what
// TrapFromProto and ExpectedOutcomeFromProto make of DecodeTrapsRecord's
// message: the format's zeros for absent fields are the messages' defaults.
inline void DecodeTrap(const char* r, emulator::Trap* trap) {
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

inline void DecodeExpect(const char* r, ExpectedOutcome* expect) {
  const uint8_t flags = Load8(r + kFlags);
  const uint8_t kind = Load8(r + kExpectKind);
  expect->has_kind = kind != pvemu::v1::Outcome::KIND_UNSPECIFIED;
  expect->kind = static_cast<pvemu::v1::Outcome::Kind>(kind);
  expect->has_vector = (flags & kVectorSet) != 0;
  expect->vector = static_cast<pvemu::v1::Vector>(Load8(r + kExpectVector));
  expect->has_value = (flags & kValueSet) != 0;
  expect->value = Load64(r + kExpectValue);
  expect->has_cpuid = (flags & kCpuidSet) != 0;
  std::memcpy(expect->cpuid, r + kExpectCpuid, sizeof(expect->cpuid));
}

// Every way the record at `r` (body_bytes `body`, within the limits, all of
// it in memory) is damaged, one bit each: a valid record is 0. This is the
// definition of a valid record; FastValid only speeds up the common case.
uint32_t DamageOf(const char* r, uint32_t body);

// What the first of `damage` (DamageOf's bits, not 0) means, for people.
std::string DescribeDamage(uint32_t damage, const char* r, uint32_t body);

}  // namespace pvemu::traplog::traps_v2

#endif  // PVEMU_TRAPLOG_TRAPS_LAYOUT_H_
