#include "traplog/expectations.h"

#include <optional>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "emulator/decoder.h"
#include "emulator/trap_convert.h"

namespace pvemu::traplog {

using emulator::DecodeError;
using emulator::DecodeInto;
using emulator::Instruction;
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

// What a decoded instruction's result is read from. The decoder is the one
// authority on instructions: its kind and operand size (IN: 8, 16 or 32;
// REX.W does not widen it) say where the value is.
ValueSource SourceOf(emulator::InsnKind kind, int operand_size) {
  switch (kind) {
    case emulator::InsnKind::kRdmsr:
      return ValueSource::kRdmsr;
    case emulator::InsnKind::kCpuid:
      return ValueSource::kCpuid;
    case emulator::InsnKind::kIn:
      return operand_size == 8    ? ValueSource::kIn8
             : operand_size == 16 ? ValueSource::kIn16
                                  : ValueSource::kIn32;
    default:
      return ValueSource::kNone;
  }
}

// emulator::DecodeInto of the trap's bytes; kNone when they do not decode.
ValueSource SourceFromBytes(absl::string_view insn, Mode mode) {
  Instruction decoded;
  uint8_t error_offset;
  if (DecodeInto(reinterpret_cast<const uint8_t*>(insn.data()), insn.size(),
                 mode, &decoded, &error_offset) != DecodeError::kOk) {
    return ValueSource::kNone;
  }
  return SourceOf(decoded.kind, decoded.operand_size);
}

// The instruction message the emulator filled in (InstructionToProto).
ValueSource SourceFromInstruction(const v1::Instruction& insn) {
  if (insn.mnemonic() == "rdmsr") return ValueSource::kRdmsr;
  if (insn.mnemonic() == "cpuid") return ValueSource::kCpuid;
  if (insn.mnemonic() == "in") {
    return SourceOf(emulator::InsnKind::kIn, insn.operand_size());
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
  Mode mode = Mode::k64;
  const v1::Instruction* decoded = nullptr;  // the fallback; may be null
  // What `bytes` give, when the caller's decoder read them already (the
  // trap path's); unset decodes them here.
  std::optional<ValueSource> bytes_source;

  ValueSource Source() const {
    ValueSource src = ValueSource::kNone;
    if (use_bytes) src = bytes_source.has_value() ? *bytes_source : SourceFromBytes(bytes, mode);
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
Observed ObservedFromStruct(const Trap& trap, const Outcome& o) {
  Observed got;
  got.kind = static_cast<int>(o.kind);
  got.vector = static_cast<int>(o.vector);
  got.rax = o.GprAfter(kRax, trap.regs);
  got.rbx = o.GprAfter(kRbx, trap.regs);
  got.rcx = o.GprAfter(kRcx, trap.regs);
  got.rdx = o.GprAfter(kRdx, trap.regs);
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
  InsnRef insn;
  insn.use_bytes = true;
  insn.bytes = record.trap().insn();
  insn.mode = emulator::ModeFromProto(record.trap().mode());
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

namespace {

// The instruction as `trap`'s bytes and mode give it.
InsnRef BytesOf(const Trap& trap) {
  InsnRef insn;
  insn.use_bytes = true;
  insn.bytes = absl::string_view(reinterpret_cast<const char*>(trap.insn),
                                 trap.insn_len);
  insn.mode = trap.mode;
  return insn;
}

}  // namespace

absl::Status CheckExpectation(const ExpectedOutcome& expect, const Trap& trap,
                              const Outcome& outcome) {
  return Check(expect, ObservedFromStruct(trap, outcome), BytesOf(trap), nullptr);
}

absl::Status CheckExpectation(const ExpectedOutcome& expect, const Trap& trap,
                              const Instruction& decoded, DecodeError error,
                              const Outcome& outcome) {
  InsnRef insn = BytesOf(trap);
  insn.bytes_source = error == DecodeError::kOk
                          ? SourceOf(decoded.kind, decoded.operand_size)
                          : ValueSource::kNone;
  return Check(expect, ObservedFromStruct(trap, outcome), insn, nullptr);
}

}  // namespace pvemu::traplog
