// CheckExpectation in all its forms: what each expectation field compares,
// the value's width from the decoded instruction, and the struct form
// agreeing with the record form.
#include "traplog/expectations.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "emulator/decoder.h"
#include "emulator/trap_convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/traplog/traplog_test_util.h"

namespace pvemu::traplog {
namespace {

using namespace ::pvemu::emulator;            // the trap types the logs hold
using namespace ::pvemu::traplog::test_util;  // helpers and matchers

TEST(ExpectedOutcomeTest, FromProtoKeepsEveryNumber) {
  v1::Expectation e;
  EXPECT_TRUE(ExpectedOutcomeFromProto(e) == ExpectedOutcome());
  e.set_kind(static_cast<v1::Outcome::Kind>(7));
  e.set_vector(static_cast<v1::Vector>(99));
  e.set_value(0);
  e.mutable_cpuid()->set_ecx(5);
  ExpectedOutcome want;
  want.has_kind = true;
  want.kind = static_cast<v1::Outcome::Kind>(7);
  want.has_vector = true;
  want.vector = static_cast<v1::Vector>(99);
  want.has_value = true;
  want.has_cpuid = true;
  want.cpuid[2] = 5;
  const ExpectedOutcome got = ExpectedOutcomeFromProto(e);
  EXPECT_TRUE(got == want) << Describe(got);
}

v1::TrapRecord Rec(absl::string_view insn, v1::CpuMode mode = v1::MODE_64) {
  v1::TrapRecord r;
  r.mutable_trap()->set_insn(std::string(insn));
  r.mutable_trap()->set_mode(mode);
  return r;
}

v1::Outcome Completed(uint64_t rax, uint64_t rdx) {
  v1::Outcome o;
  o.set_kind(v1::Outcome::COMPLETED);
  o.mutable_regs()->set_rax(rax);
  o.mutable_regs()->set_rdx(rdx);
  return o;
}

v1::Outcome Fault(v1::Vector v) {
  v1::Outcome o;
  o.set_kind(v1::Outcome::EXCEPTION);
  o.mutable_exception()->set_vector(v);
  return o;
}

const absl::string_view kRdmsr("\x0f\x32", 2);

const absl::string_view kWrmsr("\x0f\x30", 2);

TEST(CheckExpectationTest, ExpectedGpGotCompleted) {
  v1::TrapRecord r = Rec(kRdmsr);
  r.mutable_expect()->set_kind(v1::Outcome::EXCEPTION);
  r.mutable_expect()->set_vector(v1::GP);
  std::string diff;
  EXPECT_THAT(
      CheckExpectation(r, Completed(0, 0), &diff),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "expected EXCEPTION #GP, got COMPLETED rax=0x0 rdx=0x0"));
  EXPECT_EQ(diff, "expected EXCEPTION #GP, got COMPLETED rax=0x0 rdx=0x0");
  EXPECT_THAT(CheckExpectation(r, Fault(v1::GP), &diff), IsOk());
  EXPECT_EQ(diff, "");
  EXPECT_THAT(CheckExpectation(r, Fault(v1::UD), &diff),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "expected EXCEPTION #GP, got EXCEPTION #UD"));
}

TEST(CheckExpectationTest, RdmsrValueIsEdxEax) {
  v1::TrapRecord r = Rec(kRdmsr);
  r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
  r.mutable_expect()->set_value(0x100000002ull);
  std::string diff;
  // Upper halves of RAX are not part of the value.
  EXPECT_THAT(CheckExpectation(r, Completed(0xdead000000000002ull, 1), &diff),
              IsOk());
  EXPECT_THAT(CheckExpectation(r, Completed(2, 0), &diff),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "expected COMPLETED value=0x100000002, got COMPLETED "
                       "rax=0x2 rdx=0x0"));
  // With a REX prefix the instruction is still RDMSR.
  r.mutable_trap()->set_insn(std::string("\x48\x0f\x32", 3));
  EXPECT_THAT(CheckExpectation(r, Completed(2, 1), &diff), IsOk());
}

TEST(CheckExpectationTest, InValueIsMaskedToTheOperandWidth) {
  std::string diff;
  struct Case {
    std::string insn;
    v1::CpuMode mode;
    uint64_t want;
  } cases[] = {
      {"\xe4\x71", v1::MODE_64, 0x44},    // in al, 0x71
      {"\xec", v1::MODE_32, 0x44},        // in al, dx
      {"\x66\xed", v1::MODE_64, 0x3344},  // in ax, dx
      {"\xed", v1::MODE_64, 0x11223344},  // in eax, dx
      {"\xe5\x60", v1::MODE_16, 0x3344},  // 16-bit default: in ax, 0x60
      {"\x66\xed", v1::MODE_REAL, 0x11223344},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.insn.size());
    v1::TrapRecord r = Rec(c.insn, c.mode);
    r.mutable_expect()->set_value(c.want);
    EXPECT_THAT(CheckExpectation(r, Completed(0xaa11223344ull, 0), &diff),
                IsOk());
    r.mutable_expect()->set_value(c.want + 1);
    EXPECT_THAT(CheckExpectation(r, Completed(0xaa11223344ull, 0), &diff),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("got COMPLETED rax=0xaa11223344")));
  }
}

// The value's width is the decoder's operand size: REX.W takes precedence
// over 66 and IN has no 64-bit form, so 66 48 ED in 64-bit mode is
// "in eax, dx" (emulator::Decode), not the 16-bit IN that 66 alone selects.
TEST(CheckExpectationTest, InWithRexWAnd66IsA32BitIn) {
  const std::string insn("\x66\x48\xed", 3);
  v1::TrapRecord r = Rec(insn, v1::MODE_64);
  r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
  r.mutable_expect()->set_value(0x11223344);
  std::string diff;
  EXPECT_THAT(CheckExpectation(r, Completed(0xaa11223344ull, 0), &diff),
              IsOk());
  EXPECT_EQ(diff, "");
  absl::StatusOr<Trap> trap = TrapFromProto(r.trap());
  ASSERT_THAT(trap, IsOk());
  Outcome completed;
  completed.kind = OutcomeKind::kCompleted;
  completed.WriteGpr(kRax, 0xaa11223344ull);
  EXPECT_THAT(
      CheckExpectation(ExpectedOutcomeFromProto(r.expect()), *trap, completed),
      IsOk());
  r.mutable_expect()->set_value(0x3344);  // what a 16-bit IN would read
  EXPECT_THAT(CheckExpectation(r, Completed(0xaa11223344ull, 0), &diff),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "expected COMPLETED value=0x3344, got COMPLETED "
                       "rax=0xaa11223344"));
}

TEST(CheckExpectationTest, CpuidComparesTheFourRegisters) {
  v1::TrapRecord r = Rec(absl::string_view("\x0f\xa2", 2));
  r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
  r.mutable_expect()->mutable_cpuid()->set_eax(1);
  r.mutable_expect()->mutable_cpuid()->set_ebx(2);
  r.mutable_expect()->mutable_cpuid()->set_ecx(3);
  r.mutable_expect()->mutable_cpuid()->set_edx(4);
  v1::Outcome o = Completed(1, 4);
  o.mutable_regs()->set_rbx(2);
  o.mutable_regs()->set_rcx(3);
  std::string diff;
  EXPECT_THAT(CheckExpectation(r, o, &diff), IsOk());
  o.mutable_regs()->set_rcx(9);
  EXPECT_THAT(
      CheckExpectation(r, o, &diff),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "expected COMPLETED eax=0x1 ebx=0x2 ecx=0x3 edx=0x4, got "
               "COMPLETED rax=0x1 rbx=0x2 rcx=0x9 rdx=0x4"));
}

TEST(CheckExpectationTest, UnsetFieldsAreNotCompared) {
  std::string diff;
  v1::TrapRecord r = Rec(kWrmsr);
  EXPECT_THAT(CheckExpectation(r, Fault(v1::GP), &diff), IsOk());
  EXPECT_THAT(CheckExpectation(r, Completed(1, 2), &diff), IsOk());
  r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
  EXPECT_THAT(CheckExpectation(r, Completed(1, 2), &diff), IsOk());
  v1::Outcome unhandled;
  unhandled.set_kind(v1::Outcome::UNHANDLED);
  EXPECT_THAT(CheckExpectation(r, unhandled, &diff),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "expected COMPLETED, got UNHANDLED"));
}

TEST(CheckExpectationTest, ValueForAnInstructionWithoutOneIsInvalid) {
  v1::TrapRecord r = Rec(kWrmsr);
  r.mutable_expect()->set_value(1);
  std::string diff;
  EXPECT_THAT(
      CheckExpectation(r, Completed(1, 0), &diff),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("the instruction (bytes 0f 30) is not RDMSR or IN")));
}

TEST(CheckExpectationTest, ExpectationFormUsesTheDecodedInstruction) {
  v1::Expectation e;
  e.set_value(0xff);
  v1::Outcome o = Completed(0x12ff, 0);
  o.mutable_instruction()->set_mnemonic("in");
  o.mutable_instruction()->set_operand_size(8);
  std::string diff;
  EXPECT_THAT(CheckExpectation(e, o, &diff), IsOk());
  o.mutable_instruction()->set_operand_size(16);
  EXPECT_THAT(CheckExpectation(e, o, &diff),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "expected value=0xff, got COMPLETED rax=0x12ff"));
  o.mutable_instruction()->set_mnemonic("wrmsr");
  EXPECT_THAT(CheckExpectation(e, o, &diff),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the instruction (\"wrmsr\")")));
}

// The struct form: the same verdicts and messages as the record form, from
// one implementation.

// `outcome` as the emulator's struct.
Outcome OutcomeFromProto(const v1::Outcome& o) {
  Outcome out;
  out.kind = static_cast<OutcomeKind>(o.kind());
  out.vector = static_cast<Vector>(o.exception().vector());
  // The registers an instruction can write (EAX..EDX), as the message has
  // them after it, and RIP and RFLAGS.
  Regs after;
  RegsFromProto(o.regs(), &after);
  for (Gpr r : {kRax, kRbx, kRcx, kRdx}) out.WriteGpr(r, after.gpr[r]);
  out.rip = after.rip;
  out.rflags = after.rflags;
  return out;
}

absl::Status CheckStructs(const v1::TrapRecord& r, const v1::Outcome& o) {
  absl::StatusOr<Trap> trap = TrapFromProto(r.trap());
  EXPECT_THAT(trap, IsOk());
  if (!trap.ok()) return trap.status();
  const ExpectedOutcome expect = ExpectedOutcomeFromProto(r.expect());
  const Outcome outcome = OutcomeFromProto(o);
  const absl::Status from_bytes = CheckExpectation(expect, *trap, outcome);
  // Given the trap path's own decoding of the bytes, the same verdict.
  Instruction decoded;
  uint8_t error_offset = 0;
  const DecodeError error =
      DecodeInto(trap->insn, trap->insn_len, trap->mode, &decoded, &error_offset);
  EXPECT_EQ(CheckExpectation(expect, *trap, decoded, error, outcome), from_bytes);
  return from_bytes;
}

TEST(CheckExpectationStructTest, AgreesWithTheRecordForm) {
  struct Case {
    v1::TrapRecord record;
    v1::Outcome outcome;
  };
  std::vector<Case> cases;
  auto add = [&](v1::TrapRecord r, std::vector<v1::Outcome> outcomes) {
    for (v1::Outcome& o : outcomes) cases.push_back({r, std::move(o)});
  };
  v1::Outcome cpuid_out = Completed(1, 4);
  cpuid_out.mutable_regs()->set_rbx(2);
  cpuid_out.mutable_regs()->set_rcx(3);
  v1::Outcome cpuid_bad = cpuid_out;
  cpuid_bad.mutable_regs()->set_rcx(9);
  v1::Outcome unhandled;
  unhandled.set_kind(v1::Outcome::UNHANDLED);
  const std::vector<v1::Outcome> all = {Completed(0, 0),
                                        Completed(2, 1),
                                        Completed(0xdead000000000002ull, 1),
                                        Completed(0xaa11223344ull, 0),
                                        Fault(v1::GP),
                                        Fault(v1::UD),
                                        Fault(v1::PF),
                                        cpuid_out,
                                        cpuid_bad,
                                        unhandled};
  {
    v1::TrapRecord r = Rec(kRdmsr);
    add(r, all);  // no expectation
    r.mutable_expect()->set_kind(v1::Outcome::EXCEPTION);
    r.mutable_expect()->set_vector(v1::GP);
    add(r, all);
    r.mutable_expect()->clear_kind();
    add(r, all);  // a vector alone
    r.mutable_expect()->Clear();
    r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
    r.mutable_expect()->set_value(0x100000002ull);
    add(r, all);
    r.mutable_trap()->set_insn(std::string("\x48\x0f\x32", 3));
    add(r, all);
  }
  for (const auto& [insn, mode] :
       {std::pair<std::string, v1::CpuMode>{"\xe4\x71", v1::MODE_64},
        {"\xec", v1::MODE_32},
        {"\x66\xed", v1::MODE_64},
        {"\xed", v1::MODE_64},
        {"\xe5\x60", v1::MODE_16},
        {"\x66\xed", v1::MODE_REAL}}) {
    v1::TrapRecord r = Rec(insn, mode);
    for (uint64_t want : {0x44ull, 0x3344ull, 0x11223344ull, 0x45ull}) {
      r.mutable_expect()->set_value(want);
      add(r, all);
    }
  }
  {
    v1::TrapRecord r = Rec(absl::string_view("\x0f\xa2", 2));
    r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
    r.mutable_expect()->mutable_cpuid()->set_eax(1);
    r.mutable_expect()->mutable_cpuid()->set_ebx(2);
    r.mutable_expect()->mutable_cpuid()->set_ecx(3);
    r.mutable_expect()->mutable_cpuid()->set_edx(4);
    add(r, all);
    r.mutable_expect()->set_value(1);  // CPUID has no value: InvalidArgument
    add(r, all);
  }
  {
    v1::TrapRecord r = Rec(absl::string_view("\x0f\xff", 2));  // does not decode
    r.mutable_expect()->set_value(1);
    add(r, all);
  }
  {
    v1::TrapRecord r = Rec(kWrmsr);
    add(r, all);
    r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
    add(r, all);
    r.mutable_expect()->set_value(1);
    add(r, all);
  }
  int matches = 0, mismatches = 0, invalid = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.record.ShortDebugString(), " / ",
                              c.outcome.ShortDebugString()));
    std::string diff;
    const absl::Status want = CheckExpectation(c.record, c.outcome, &diff);
    EXPECT_EQ(CheckStructs(c.record, c.outcome), want);
    matches += want.ok();
    mismatches += absl::IsFailedPrecondition(want);
    invalid += absl::IsInvalidArgument(want);
  }
  // The table exercises every verdict.
  EXPECT_GT(matches, 10);
  EXPECT_GT(mismatches, 10);
  EXPECT_GT(invalid, 5);
}

TEST(CheckExpectationStructTest, MessagesOnMismatch) {
  Trap trap;
  trap.insn_len = 2;
  trap.insn[0] = 0x0f;
  trap.insn[1] = 0x32;
  ExpectedOutcome expect;
  expect.has_kind = true;
  expect.kind = v1::Outcome::EXCEPTION;
  expect.has_vector = true;
  expect.vector = v1::GP;
  Outcome completed;
  completed.kind = OutcomeKind::kCompleted;
  EXPECT_THAT(CheckExpectation(expect, trap, completed),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "expected EXCEPTION #GP, got COMPLETED rax=0x0 "
                       "rdx=0x0"));
  Outcome fault;
  fault.kind = OutcomeKind::kException;
  fault.vector = Vector::kGP;
  EXPECT_THAT(CheckExpectation(expect, trap, fault), IsOk());
  ExpectedOutcome value;
  value.has_value = true;
  value.value = 7;
  trap.insn[1] = 0x30;  // WRMSR reads no value
  EXPECT_THAT(CheckExpectation(value, trap, completed),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the expectation has a value, but the instruction "
                       "(bytes 0f 30) is not RDMSR or IN, so there is no "
                       "value to compare"));
}

}  // namespace
}  // namespace pvemu::traplog
