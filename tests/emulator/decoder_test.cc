// Hand-written SDM cases for the decoder: every form in every mode, every
// error cause, and the prefix rules.
#include "emulator/decoder.h"

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pvemu/v1/trap.pb.h"
#include "tests/emulator/hex.h"
#include "tests/status_matchers.h"

namespace pvemu::emulator {
namespace {

using ::pvemu::emulator::testing::Hex;
using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kReal: return "real";
    case Mode::k16: return "16";
    case Mode::k32: return "32";
    case Mode::k64: return "64";
  }
  return "?";
}

// Decodes from a heap copy of exactly the given bytes, so a sanitizer build
// catches any read past the end.
DecodeResult DecodeExact(const std::vector<uint8_t>& bytes, size_t len,
                         Mode mode) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[len == 0 ? 1 : len]);
  if (len > 0) std::memcpy(copy.get(), bytes.data(), len);
  return Decode(copy.get(), len, mode);
}

DecodeResult D(const std::string& hex, Mode mode) {
  const std::vector<uint8_t> b = Hex(hex);
  return DecodeExact(b, b.size(), mode);
}

struct Case {
  const char* hex;
  Mode mode;
  const char* mnemonic;
  int length;
  int operand_size;
  int address_size;
};

std::string CaseName(const Case& c) {
  return std::string(c.hex) + " in mode " + ModeName(c.mode);
}

// Every recognised form, with the SDM length, operand and address size.
const Case kValidCases[] = {
    // No-operand forms in every mode.
    {"0f32", Mode::k64, "rdmsr", 2, 32, 64},
    {"0f32", Mode::k32, "rdmsr", 2, 32, 32},
    {"0f32", Mode::k16, "rdmsr", 2, 16, 16},
    {"0f32", Mode::kReal, "rdmsr", 2, 16, 16},
    {"0f30", Mode::k64, "wrmsr", 2, 32, 64},
    {"0f30", Mode::k32, "wrmsr", 2, 32, 32},
    {"0f30", Mode::kReal, "wrmsr", 2, 16, 16},
    {"0fa2", Mode::k64, "cpuid", 2, 32, 64},
    {"0fa2", Mode::k16, "cpuid", 2, 16, 16},
    {"0f31", Mode::k64, "rdtsc", 2, 32, 64},
    {"0f31", Mode::kReal, "rdtsc", 2, 16, 16},
    {"0f01f9", Mode::k64, "rdtscp", 3, 32, 64},
    {"0f01f9", Mode::k32, "rdtscp", 3, 32, 32},
    {"0f01f9", Mode::kReal, "rdtscp", 3, 16, 16},
    {"0f33", Mode::k64, "rdpmc", 2, 32, 64},
    {"0f33", Mode::k32, "rdpmc", 2, 32, 32},
    {"0f06", Mode::k64, "clts", 2, 32, 64},
    {"0f06", Mode::kReal, "clts", 2, 16, 16},
    {"0f09", Mode::k64, "wbinvd", 2, 32, 64},
    {"0f09", Mode::k16, "wbinvd", 2, 16, 16},
    {"0f08", Mode::k64, "invd", 2, 32, 64},
    {"0f08", Mode::k32, "invd", 2, 32, 32},
    {"f4", Mode::k64, "hlt", 1, 32, 64},
    {"f4", Mode::kReal, "hlt", 1, 16, 16},
    {"fa", Mode::k64, "cli", 1, 32, 64},
    {"fa", Mode::k16, "cli", 1, 16, 16},
    {"fb", Mode::k32, "sti", 1, 32, 32},
    {"fb", Mode::kReal, "sti", 1, 16, 16},
    {"0f01d1", Mode::k64, "xsetbv", 3, 32, 64},
    {"0f01d1", Mode::k32, "xsetbv", 3, 32, 32},
    {"0f01d1", Mode::kReal, "xsetbv", 3, 16, 16},
    {"0f01f8", Mode::k64, "swapgs", 3, 32, 64},
    // REX.W widens the default operand size of instructions that have one.
    {"480f32", Mode::k64, "rdmsr", 3, 64, 64},
    // IN/OUT: imm8 and DX forms, 8/16/32 bits; 66 toggles 16/32.
    {"e460", Mode::k64, "in", 2, 8, 64},
    {"e560", Mode::k64, "in", 2, 32, 64},
    {"66e560", Mode::k64, "in", 3, 16, 64},
    {"e560", Mode::k16, "in", 2, 16, 16},
    {"66e560", Mode::k16, "in", 3, 32, 16},
    {"66e560", Mode::kReal, "in", 3, 32, 16},
    {"e680", Mode::k32, "out", 2, 8, 32},
    {"e780", Mode::k32, "out", 2, 32, 32},
    {"66e780", Mode::k32, "out", 3, 16, 32},
    {"ec", Mode::k64, "in", 1, 8, 64},
    {"ed", Mode::k64, "in", 1, 32, 64},
    {"66ed", Mode::k64, "in", 2, 16, 64},
    {"ed", Mode::kReal, "in", 1, 16, 16},
    {"ee", Mode::k32, "out", 1, 8, 32},
    {"ef", Mode::k32, "out", 1, 32, 32},
    {"66ef", Mode::k16, "out", 2, 32, 16},
    // REX.W does not make IN/OUT 64-bit.
    {"48ed", Mode::k64, "in", 2, 32, 64},
    {"48e5ff", Mode::k64, "in", 3, 32, 64},
    // INS/OUTS with REP; 67 changes the address size.
    {"6c", Mode::k64, "insb", 1, 8, 64},
    {"6d", Mode::k64, "insd", 1, 32, 64},
    {"666d", Mode::k64, "insw", 2, 16, 64},
    {"6d", Mode::k16, "insw", 1, 16, 16},
    {"666d", Mode::kReal, "insd", 2, 32, 16},
    {"f36c", Mode::k32, "insb", 2, 8, 32},
    {"6e", Mode::k32, "outsb", 1, 8, 32},
    {"6f", Mode::k32, "outsd", 1, 32, 32},
    {"f3666f", Mode::k32, "outsw", 3, 16, 32},
    {"676f", Mode::k32, "outsd", 2, 32, 16},
    {"676f", Mode::k64, "outsd", 2, 32, 32},
    {"676f", Mode::k16, "outsw", 2, 16, 32},
    {"486d", Mode::k64, "insd", 2, 32, 64},
    // REX.W wins over 66, and IN/OUT/INS/OUTS cap 64 at 32 bits.
    {"66486d", Mode::k64, "insd", 3, 32, 64},
    {"66486f", Mode::k64, "outsd", 3, 32, 64},
    {"6648ed", Mode::k64, "in", 3, 32, 64},
    {"6648e7 10", Mode::k64, "out", 4, 32, 64},
    // MOV CR/DR: always a register operand of the mode's full width.
    {"0f20c0", Mode::k64, "mov", 3, 64, 64},
    {"0f22d8", Mode::k64, "mov", 3, 64, 64},
    {"0f20c0", Mode::k32, "mov", 3, 32, 32},
    {"0f22e0", Mode::k16, "mov", 3, 32, 16},
    {"0f20c0", Mode::kReal, "mov", 3, 32, 16},
    {"660f20c0", Mode::k32, "mov", 4, 32, 32},
    {"440f20c0", Mode::k64, "mov", 4, 64, 64},
    {"0f21f8", Mode::k64, "mov", 3, 64, 64},
    {"0f23c0", Mode::k32, "mov", 3, 32, 32},
    {"0f2000", Mode::k64, "mov", 3, 64, 64},  // mod=00 ignored: no disp/SIB
    {"0f2004", Mode::k32, "mov", 3, 32, 32},  // rm=100 is no SIB here
    {"0f2045", Mode::k64, "mov", 3, 64, 64},  // mod=01 is no disp8 here
    // LMSW register and memory forms, INVLPG memory forms.
    {"0f01f0", Mode::k64, "lmsw", 3, 16, 64},
    {"0f01f3", Mode::kReal, "lmsw", 3, 16, 16},
    {"0f0130", Mode::k64, "lmsw", 3, 16, 64},
    {"0f0138", Mode::k64, "invlpg", 3, 8, 64},
    // 32/64-bit addressing: SIB, SIB without base, disp8/disp32, RIP-relative.
    {"0f013c24", Mode::k64, "invlpg", 4, 8, 64},
    {"0f013c25 11223344", Mode::k64, "invlpg", 8, 8, 64},
    {"0f017c2410", Mode::k32, "invlpg", 5, 8, 32},
    {"0f01bc2410203040", Mode::k32, "invlpg", 8, 8, 32},
    {"0f013d 11223344", Mode::k64, "invlpg", 7, 8, 64},  // [rip+disp32]
    {"0f013d 11223344", Mode::k32, "invlpg", 7, 8, 32},  // [disp32]
    {"0f0178 10", Mode::k32, "invlpg", 4, 8, 32},
    {"0f01b8 10203040", Mode::k64, "invlpg", 7, 8, 64},
    {"0f01b0 10203040", Mode::k32, "lmsw", 7, 16, 32},
    // REX.B changes the register, not the form: r13 base still needs disp,
    // r12 base still needs a SIB.
    {"410f013d 11223344", Mode::k64, "invlpg", 8, 8, 64},
    {"410f013c24", Mode::k64, "invlpg", 5, 8, 64},
    // 16-bit addressing: no SIB, [disp16] for mod=00 rm=110.
    {"0f013c", Mode::k16, "invlpg", 3, 8, 16},
    {"0f013e 1234", Mode::k16, "invlpg", 5, 8, 16},
    {"0f017e 12", Mode::kReal, "invlpg", 4, 8, 16},
    {"0f01be 1234", Mode::kReal, "invlpg", 5, 8, 16},
    {"0f0136 1234", Mode::kReal, "lmsw", 5, 16, 16},
    // 67 switches the addressing form.
    {"670f013c24", Mode::k16, "invlpg", 5, 8, 32},
    {"670f013c", Mode::k32, "invlpg", 4, 8, 16},
    {"670f013e 1234", Mode::k32, "invlpg", 6, 8, 16},
    {"670f013c24", Mode::k64, "invlpg", 5, 8, 32},
    {"670f013d 11223344", Mode::k64, "invlpg", 8, 8, 32},  // [eip+disp32]
    // Prefixes in any order, repeated; segment overrides kept.
    {"2e3e26366465f30f32", Mode::k32, "rdmsr", 9, 32, 32},
    {"6666ed", Mode::k32, "in", 3, 16, 32},
    {"f3f3f36c", Mode::k16, "insb", 4, 8, 16},
    {"f2f30f32", Mode::k64, "rdmsr", 4, 32, 64},
    {"66670f01f9", Mode::k64, "rdtscp", 5, 16, 32},
    {"26640f01f8", Mode::k64, "swapgs", 5, 32, 64},
    // 14 prefixes + 1-byte opcode: exactly 15 bytes is still valid.
    {"6666666666666666666666666666ed", Mode::k64, "in", 15, 16, 64},
    {"404040404040404040404040400f32", Mode::k64, "rdmsr", 15, 32, 64},
    // WBNOINVD is F3 0F 09; the last of F2/F3 decides.
    {"f30f09", Mode::k64, "wbnoinvd", 3, 32, 64},
    {"f30f09", Mode::kReal, "wbnoinvd", 3, 16, 16},
    {"f20f09", Mode::k64, "wbinvd", 3, 32, 64},
    {"f2f30f09", Mode::k32, "wbnoinvd", 4, 32, 32},
    {"f3f20f09", Mode::k32, "wbinvd", 4, 32, 32},
    // Mandatory-prefix-free instructions accept 66/F2/F3 (except XSETBV).
    {"f30f01f9", Mode::k64, "rdtscp", 4, 32, 64},
    {"660f01f8", Mode::k64, "swapgs", 4, 16, 64},
    {"f30f01f0", Mode::k32, "lmsw", 4, 16, 32},
};

TEST(DecoderTest, DecodesEveryFormWithSdmLengthAndSizes) {
  for (const Case& c : kValidCases) {
    SCOPED_TRACE(CaseName(c));
    const DecodeResult r = D(c.hex, c.mode);
    ASSERT_TRUE(r.ok()) << DecodeErrorMessage(r.error);
    EXPECT_EQ(Mnemonic(r.insn), c.mnemonic);
    EXPECT_EQ(r.insn.length, c.length);
    EXPECT_EQ(r.insn.operand_size, c.operand_size);
    EXPECT_EQ(r.insn.address_size, c.address_size);
  }
}

TEST(DecoderTest, EveryCutOfAValidInstructionIsATruncatedFetch) {
  int cuts = 0;
  for (const Case& c : kValidCases) {
    const std::vector<uint8_t> bytes = Hex(c.hex);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      SCOPED_TRACE(CaseName(c) + " cut at " + std::to_string(cut));
      const DecodeResult r = DecodeExact(bytes, cut, c.mode);
      EXPECT_EQ(r.error, DecodeError::kTruncated);
      EXPECT_EQ(r.error_offset, cut);
      ++cuts;
    }
  }
  EXPECT_GT(cuts, 300);
}

TEST(DecoderTest, ExtraBytesAfterTheInstructionAreNotPartOfIt) {
  const DecodeResult r = D("0f32 90 90 90", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.length, 2);
}

TEST(DecoderTest, KindsMatchOpcodes) {
  EXPECT_EQ(D("0f32", Mode::k64).insn.kind, InsnKind::kRdmsr);
  EXPECT_EQ(D("0f30", Mode::k64).insn.kind, InsnKind::kWrmsr);
  EXPECT_EQ(D("0f20c0", Mode::k64).insn.kind, InsnKind::kMovFromCr);
  EXPECT_EQ(D("0f22c0", Mode::k64).insn.kind, InsnKind::kMovToCr);
  EXPECT_EQ(D("0f21c0", Mode::k64).insn.kind, InsnKind::kMovFromDr);
  EXPECT_EQ(D("0f23c0", Mode::k64).insn.kind, InsnKind::kMovToDr);
  EXPECT_EQ(D("6c", Mode::k64).insn.kind, InsnKind::kIns);
  EXPECT_EQ(D("6f", Mode::k64).insn.kind, InsnKind::kOuts);
  EXPECT_EQ(D("e4 10", Mode::k64).insn.kind, InsnKind::kIn);
  EXPECT_EQ(D("ef", Mode::k64).insn.kind, InsnKind::kOut);
}

TEST(DecoderTest, InOutImmediatePortIsRecordedAndDxFormHasNone) {
  DecodeResult r = D("e5 71", Mode::k32);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.insn.has_imm_port);
  EXPECT_EQ(r.insn.port, 0x71);
  r = D("e6 ff", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.port, 0xff);
  r = D("ed", Mode::k32);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.insn.has_imm_port);
}

TEST(DecoderTest, MovCrRegisterNumbersIncludingCr8ViaRexR) {
  DecodeResult r = D("0f20d8", Mode::k64);  // mov rax, cr3
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.special_register, 3);
  EXPECT_EQ(r.insn.gpr, kRax);
  r = D("440f20c1", Mode::k64);  // mov rcx, cr8
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.special_register, 8);
  EXPECT_EQ(r.insn.gpr, kRcx);
  r = D("450f22c7", Mode::k64);  // mov cr8, r15
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.kind, InsnKind::kMovToCr);
  EXPECT_EQ(r.insn.special_register, 8);
  EXPECT_EQ(r.insn.gpr, kR15);
  r = D("0f22e3", Mode::k32);  // mov cr4, ebx
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.special_register, 4);
  EXPECT_EQ(r.insn.gpr, kRbx);
  r = D("0f21fe", Mode::k64);  // mov rsi, dr7
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.special_register, 7);
  EXPECT_EQ(r.insn.gpr, kRsi);
}

TEST(DecoderTest, NonexistentControlAndDebugRegistersAreUd) {
  for (const char* hex : {"0f20c8", "0f22e8", "0f20f0", "0f22f8", "440f20c8",
                          "440f20d0", "440f22f8", "440f21c0", "440f23f8"}) {
    SCOPED_TRACE(hex);
    const DecodeResult r = D(hex, Mode::k64);
    EXPECT_EQ(r.error, DecodeError::kInvalidRegister);
    Vector v;
    ASSERT_TRUE(DecodeErrorVector(r.error, &v));
    EXPECT_EQ(v, Vector::kUD);
  }
  // Outside 64-bit mode 44 is INC SP: not a REX, not a privileged insn.
  EXPECT_EQ(D("440f20c0", Mode::k32).error, DecodeError::kNotPrivileged);
}

TEST(DecoderTest, LmswRegisterFormRecordsTheRegister) {
  const DecodeResult r = D("410f01f5", Mode::k64);  // lmsw r13w
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.kind, InsnKind::kLmsw);
  EXPECT_FALSE(r.insn.memory_operand);
  EXPECT_EQ(r.insn.gpr, kR13);
  const DecodeResult m = D("0f0130", Mode::k64);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m.insn.memory_operand);
}

TEST(DecoderTest, MemoryFormsRecordModrmSibAndSignExtendedDisplacement) {
  DecodeResult r = D("0f01bc24 f0ffffff", Mode::k64);  // invlpg [rsp-16]
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.modrm, 0xbc);
  EXPECT_EQ(r.insn.sib, 0x24);
  EXPECT_EQ(r.insn.displacement, -16);
  r = D("0f017e 80", Mode::kReal);  // invlpg [bp-128]
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.displacement, -128);
  EXPECT_EQ(r.insn.sib, 0);
  r = D("0f013e 3412", Mode::k16);  // invlpg [0x1234]
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.displacement, 0x1234);
  r = D("0f013d 78563412", Mode::k64);  // invlpg [rip+0x12345678]
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.displacement, 0x12345678);
  r = D("0f0138", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.displacement, 0);
}

TEST(DecoderTest, RegisterFormsOf0f01Slash7AreOtherInstructions) {
  EXPECT_EQ(D("0f01f8", Mode::k64).insn.kind, InsnKind::kSwapgs);
  EXPECT_EQ(D("0f01f9", Mode::k64).insn.kind, InsnKind::kRdtscp);
  for (const char* hex : {"0f01fa", "0f01fb", "0f01fc", "0f01fd", "0f01fe",
                          "0f01ff"}) {
    SCOPED_TRACE(hex);
    EXPECT_EQ(D(hex, Mode::k64).error, DecodeError::kNotPrivileged);
  }
}

TEST(DecoderTest, LockPrefixOnEveryRecognisedInstructionIsUd) {
  for (const Case& c : kValidCases) {
    SCOPED_TRACE(CaseName(c));
    if (Hex(c.hex).size() >= 15) continue;
    const DecodeResult r = D(std::string("f0") + c.hex, c.mode);
    EXPECT_EQ(r.error, DecodeError::kLockPrefix);
    Vector v;
    ASSERT_TRUE(DecodeErrorVector(r.error, &v));
    EXPECT_EQ(v, Vector::kUD);
  }
  // LOCK after other prefixes, and LOCK MOV CR0 (AMD's CR8 alias) too.
  EXPECT_EQ(D("66f00f32", Mode::k32).error, DecodeError::kLockPrefix);
  EXPECT_EQ(D("f00f20c0", Mode::k32).error, DecodeError::kLockPrefix);
  EXPECT_EQ(D("f00f22c0", Mode::k64).error, DecodeError::kLockPrefix);
}

TEST(DecoderTest, LockedButTruncatedIsTruncated) {
  EXPECT_EQ(D("f00f", Mode::k64).error, DecodeError::kTruncated);
  EXPECT_EQ(D("f00f013d1122", Mode::k64).error, DecodeError::kTruncated);
}

TEST(DecoderTest, MoreThanFifteenBytesIsGp) {
  // 15 prefixes: the opcode would be the 16th byte.
  DecodeResult r = D("666666666666666666666666666666 0f32", Mode::k64);
  EXPECT_EQ(r.error, DecodeError::kTooLong);
  EXPECT_EQ(r.error_offset, 15);
  Vector v;
  ASSERT_TRUE(DecodeErrorVector(r.error, &v));
  EXPECT_EQ(v, Vector::kGP);
  // 14 prefixes + 2-byte opcode = 16 bytes.
  r = D("6666666666666666666666666666 0f32", Mode::k32);
  EXPECT_EQ(r.error, DecodeError::kTooLong);
  // Too long even when the caller gave only 15 bytes.
  r = D("666666666666666666666666666666", Mode::k64);
  EXPECT_EQ(r.error, DecodeError::kTooLong);
  // A displacement running past byte 15.
  r = D("6666666666666666 0f01bc24 10203040", Mode::k64);
  EXPECT_EQ(r.error, DecodeError::kTooLong);
  // But fewer than 15 bytes that end early are truncated, not too long.
  r = D("66666666666666666666666666", Mode::k64);
  EXPECT_EQ(r.error, DecodeError::kTruncated);
}

TEST(DecoderTest, NonPrivilegedInstructionsHaveNoException) {
  for (const char* hex : {"90", "89d8", "0f0b", "0f01c8", "0f01d0", "0f01d8",
                          "0f0110", "0f0100", "0f00d8", "0f1f00", "cc", "e8",
                          "0f34", "0f05", "0fa3c0", "f1", "0f01ee"}) {
    SCOPED_TRACE(hex);
    const DecodeResult r = D(hex, Mode::k64);
    EXPECT_EQ(r.error, DecodeError::kNotPrivileged);
    Vector v;
    EXPECT_FALSE(DecodeErrorVector(r.error, &v));
  }
  // 40-4F are INC/DEC outside 64-bit mode.
  EXPECT_EQ(D("48ed", Mode::k32).error, DecodeError::kNotPrivileged);
  EXPECT_EQ(D("40", Mode::kReal).error, DecodeError::kNotPrivileged);
}

TEST(DecoderTest, SwapgsOutsideLongModeIsUd) {
  for (Mode mode : {Mode::kReal, Mode::k16, Mode::k32}) {
    SCOPED_TRACE(ModeName(mode));
    EXPECT_EQ(D("0f01f8", mode).error, DecodeError::kInvalidInMode);
  }
}

TEST(DecoderTest, XsetbvWithOperandSizeOrRepPrefixIsUd) {
  for (const char* hex : {"660f01d1", "f30f01d1", "f20f01d1"}) {
    SCOPED_TRACE(hex);
    EXPECT_EQ(D(hex, Mode::k64).error, DecodeError::kInvalidPrefix);
  }
  // Address-size and segment prefixes are allowed.
  EXPECT_TRUE(D("672e0f01d1", Mode::k64).ok());
}

TEST(DecoderTest, RexFollowedByLegacyPrefixIsIgnored) {
  // 48 66 ED: REX.W dropped, 66 applies: in ax, dx.
  DecodeResult r = D("4866ed", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.operand_size, 16);
  EXPECT_EQ(r.insn.rex, 0);
  EXPECT_EQ(r.insn.length, 3);
  // 44 66 0F 20 C0: REX.R dropped: CR0, not CR8.
  r = D("44660f20c0", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.special_register, 0);
  // 41 2E 0F 01 F5: REX.B dropped: lmsw bp, not r13w.
  r = D("412e0f01f5", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.gpr, kRbp);
  // A REX after the legacy prefix counts; the last REX wins.
  r = D("66440f20c0", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.special_register, 8);
  r = D("44410f20c0", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.special_register, 0);
  EXPECT_EQ(r.insn.gpr, kR8);
}

TEST(DecoderTest, RepeatedPrefixesAreRecordedOnceAndLastSegmentWins) {
  DecodeResult r = D("2e26f3f36e", Mode::k32);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.insn.rep());
  EXPECT_EQ(r.insn.segment, Segment::kEs);
  EXPECT_EQ(r.insn.opcode_offset, 4);
  r = D("64656f", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.insn.segment, Segment::kGs);
  EXPECT_FALSE(r.insn.rep());
  r = D("f26c", Mode::k64);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.insn.rep());
}

TEST(DecoderTest, ErrorMessagesAreSpecificSentences) {
  const DecodeError all[] = {
      DecodeError::kTruncated,       DecodeError::kTooLong,
      DecodeError::kLockPrefix,      DecodeError::kInvalidInMode,
      DecodeError::kInvalidRegister, DecodeError::kInvalidPrefix,
      DecodeError::kNotPrivileged};
  std::vector<std::string> seen;
  for (DecodeError e : all) {
    const std::string m(DecodeErrorMessage(e));
    EXPECT_FALSE(m.empty());
    EXPECT_EQ(m.back(), '.');
    for (const std::string& other : seen) EXPECT_NE(m, other);
    seen.push_back(m);
  }
  EXPECT_THAT(std::string(DecodeErrorMessage(DecodeError::kTooLong)),
              HasSubstr("15 bytes"));
  EXPECT_THAT(std::string(DecodeErrorMessage(DecodeError::kLockPrefix)),
              HasSubstr("lock-prefix (F0)"));
}

TEST(DecoderTest, DecodeStatusNamesCodeOffsetAndRemedy) {
  EXPECT_TRUE(DecodeStatus(D("0f32", Mode::k64)).ok());
  EXPECT_THAT(DecodeStatus(D("660f", Mode::k64)),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("byte 2: The input ended")));
  EXPECT_THAT(DecodeStatus(D("66f00f32", Mode::k64)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("byte 2: A lock-prefix (F0)")));
  EXPECT_THAT(DecodeStatus(D("90", Mode::k64)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not one of the privileged")));
}

TEST(DecoderTest, DecodeErrorVectorHasNoneForNoExceptionErrors) {
  Vector v = Vector::kDE;
  EXPECT_FALSE(DecodeErrorVector(DecodeError::kOk, &v));
  EXPECT_FALSE(DecodeErrorVector(DecodeError::kTruncated, &v));
  EXPECT_FALSE(DecodeErrorVector(DecodeError::kNotPrivileged, &v));
  EXPECT_EQ(v, Vector::kDE);
}

TEST(DecoderTest, EveryKindHasAMnemonic) {
  for (int k = 0; k < kNumInsnKinds; ++k) {
    EXPECT_FALSE(KindMnemonic(static_cast<InsnKind>(k)).empty()) << k;
  }
}

TEST(DecoderTest, InstructionToProtoFillsOperands) {
  pvemu::v1::Instruction msg;
  InstructionToProto(D("66e5 70", Mode::k64).insn, &msg);
  EXPECT_EQ(msg.mnemonic(), "in");
  EXPECT_EQ(msg.length(), 3u);
  EXPECT_EQ(msg.operand_size(), 16u);
  EXPECT_EQ(msg.address_size(), 64u);
  ASSERT_TRUE(msg.has_port());
  EXPECT_EQ(msg.port(), 0x70u);
  EXPECT_FALSE(msg.has_control_register());

  msg.Clear();
  InstructionToProto(D("440f22c3", Mode::k64).insn, &msg);
  EXPECT_EQ(msg.mnemonic(), "mov");
  ASSERT_TRUE(msg.has_control_register());
  EXPECT_EQ(msg.control_register(), 8u);
  EXPECT_EQ(msg.gpr(), 3u);
  EXPECT_FALSE(msg.has_port());
  EXPECT_FALSE(msg.has_debug_register());

  msg.Clear();
  InstructionToProto(D("0f21c8", Mode::k32).insn, &msg);
  ASSERT_TRUE(msg.has_debug_register());
  EXPECT_EQ(msg.debug_register(), 1u);

  msg.Clear();
  InstructionToProto(D("f3676d", Mode::k32).insn, &msg);
  EXPECT_EQ(msg.mnemonic(), "insd");
  EXPECT_TRUE(msg.rep());
  EXPECT_EQ(msg.address_size(), 16u);

  msg.Clear();
  InstructionToProto(D("0f0138", Mode::k64).insn, &msg);
  EXPECT_EQ(msg.mnemonic(), "invlpg");
  EXPECT_TRUE(msg.memory_operand());
  EXPECT_FALSE(msg.has_gpr());
}

// Every field of an Instruction, to compare two whole.
auto Fields(const Instruction& i) {
  return std::make_tuple(i.kind, i.length, i.opcode_offset, i.operand_size, i.address_size,
                         i.prefixes, i.rex, i.segment, i.has_imm_port, i.port,
                         i.special_register, i.gpr, i.memory_operand, i.modrm, i.sib,
                         i.displacement);
}

// The trap path reuses one Instruction: whatever it held before, a decode
// leaves exactly what a fresh one would hold, success or failure (the
// decoder writes in place, so a failure halfway must not leave half).
TEST(DecoderTest, DecodeIntoLeavesNothingOfTheInstructionBefore) {
  struct Step {
    const char* hex;
    Mode mode;
  };
  // A memory form with every field set; failures at the prefixes, the
  // opcode, the ModRM and the final checks; the one-table fast path.
  const Step kSteps[] = {{"2e 66 41 0f01bc24 f0ffffff", Mode::k64},
                         {"66 f0 0f32", Mode::k32},
                         {"0f01fa", Mode::k64},
                         {"0f01bc", Mode::k64},
                         {"66 0f01d1", Mode::k64},
                         {"0f32", Mode::k64},
                         {"0f20e8", Mode::k64}};
  for (const Step& first : kSteps) {
    for (const Step& then : kSteps) {
      SCOPED_TRACE(absl::StrCat(first.hex, " then ", then.hex));
      const std::vector<uint8_t> a = Hex(first.hex), b = Hex(then.hex);
      Instruction reused;
      uint8_t offset = 0;
      DecodeInto(a.data(), a.size(), first.mode, &reused, &offset);
      const DecodeError error = DecodeInto(b.data(), b.size(), then.mode, &reused, &offset);
      const DecodeResult fresh = Decode(b.data(), b.size(), then.mode);
      EXPECT_EQ(error, fresh.error);
      EXPECT_EQ(Fields(reused), Fields(fresh.ok() ? fresh.insn : Instruction{}));
    }
  }
}

TEST(DecoderTest, ZeroLengthInputIsTruncatedAtOffsetZero) {
  const DecodeResult r = Decode(nullptr, 0, Mode::k64);
  EXPECT_EQ(r.error, DecodeError::kTruncated);
  EXPECT_EQ(r.error_offset, 0);
}

TEST(DecoderTest, LongInputsReadAtMostFifteenBytes) {
  std::vector<uint8_t> bytes(64, 0x66);
  const DecodeResult r = Decode(bytes.data(), bytes.size(), Mode::k64);
  EXPECT_EQ(r.error, DecodeError::kTooLong);
}

}  // namespace
}  // namespace pvemu::emulator
