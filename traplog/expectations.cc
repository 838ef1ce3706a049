#include "traplog/expectations.h"

#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "emulator/trap_convert.h"

namespace pvemu::traplog {

using emulator::kRax;
using emulator::kRbx;
using emulator::kRcx;
using emulator::kRdx;
using emulator::Mode;
using emulator::Outcome;
using emulator::Trap;

namespace v1 = ::pvemu::v1;

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

// The one comparison (see CheckExpectation in expectations.h). Builds strings
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
