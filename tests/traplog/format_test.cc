// The trap-log formats: the file extension picks the encoding; the PVTRAPS2
// layout byte for byte, every field through it, every way a record can be
// damaged and the error each gives; the old PVTRAPS1 files still read.
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/traplog/traplog_test_util.h"
#include "traplog/traps_format.h"

namespace pvemu::traplog {
namespace {

using namespace ::pvemu::emulator;            // the trap types the logs hold
using namespace ::pvemu::traplog::test_util;  // helpers and matchers

TEST(TrapLogEncodingTest, ChosenByExtension) {
  EXPECT_EQ(*TrapLogEncodingForPath("a/b.traps"), TrapLogEncoding::kBinary);
  EXPECT_EQ(*TrapLogEncodingForPath("x.textproto"), TrapLogEncoding::kText);
  EXPECT_THAT(TrapLogEncodingForPath("x.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.txt: unknown trap-log extension")));
}

TEST(TrapsV2Test, LayoutIsTheDocumentedTable) {
  v1::TrapRecord r;
  v1::Trap* t = r.mutable_trap();
  t->set_domain(0x11223344);
  t->set_vcpu(0x55667788);
  t->set_mode(v1::MODE_32);
  t->set_cpl(3);
  t->set_insn(std::string("\x0f\x32", 2));
  v1::Registers* g = t->mutable_regs();
  const google::protobuf::Reflection* refl = g->GetReflection();
  for (int f = 0; f < 18; ++f) {
    refl->SetUInt64(g, g->GetDescriptor()->field(f),
                    0x1000 + static_cast<uint64_t>(f));
  }
  t->set_host_tsc(0xa1a2a3a4a5a6a7a8ull);
  r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
  r.mutable_expect()->set_vector(v1::GP);
  r.mutable_expect()->set_value(0xb1b2b3b4b5b6b7b8ull);
  r.mutable_expect()->mutable_cpuid()->set_eax(0xc1);
  r.mutable_expect()->mutable_cpuid()->set_ebx(0xc2);
  r.mutable_expect()->mutable_cpuid()->set_ecx(0xc3);
  r.mutable_expect()->mutable_cpuid()->set_edx(0xc4);
  r.set_source("src");
  r.set_note("no");

  // The record, byte by byte, from the table in traplog.h.
  std::string want = "PVTRAPS2" + std::string(220 + 5, '\0');
  const size_t o = 8;
  PutLe(&want, o + 0, 216 + 5, 4);     // body_bytes
  PutLe(&want, o + 4, 0x11223344, 4);  // domain
  PutLe(&want, o + 8, 0x55667788, 4);  // vcpu
  want[o + 12] = 3;                    // mode: MODE_32
  want[o + 13] = 3;                    // cpl
  want[o + 14] = 2;                    // insn_len
  want[o + 15] = 0x3f;                 // flags: everything set
  want[o + 16] = 0x0f;                 // insn
  want[o + 17] = 0x32;
  want[o + 31] = 1;               // expect_kind: COMPLETED
  want[o + 32] = 13;              // expect_vector: GP
  for (int f = 0; f < 18; ++f) {  // regs rax .. rflags
    PutLe(&want, o + 36 + 8 * static_cast<size_t>(f),
          0x1000 + static_cast<uint64_t>(f), 8);
  }
  PutLe(&want, o + 180, 0xa1a2a3a4a5a6a7a8ull, 8);  // host_tsc
  PutLe(&want, o + 188, 0xb1b2b3b4b5b6b7b8ull, 8);  // expect_value
  PutLe(&want, o + 196, 0xc1, 4);                   // expect_cpuid
  PutLe(&want, o + 200, 0xc2, 4);
  PutLe(&want, o + 204, 0xc3, 4);
  PutLe(&want, o + 208, 0xc4, 4);
  PutLe(&want, o + 212, 3, 4);  // source_len
  PutLe(&want, o + 216, 2, 4);  // note_len
  want.replace(o + 220, 5, "srcno");

  EXPECT_EQ(WriterFile({r}), want);
  absl::Status end;
  std::vector<v1::TrapRecord> back =
      ReadBytes(want, TrapLogEncoding::kBinary, &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(back.size(), 1u);
  ExpectSame(back[0], r);
}

TEST(TrapsV2Test, EveryFieldRoundTrips) {
  const std::vector<v1::TrapRecord> want = EveryFieldRecords();
  const std::string bytes = WriterFile(want);
  absl::Status end;
  std::vector<v1::TrapRecord> got =
      ReadBytes(bytes, TrapLogEncoding::kBinary, &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectSame(got[i], want[i]);
  }
  // Each record has exactly one encoding: writing what was read gives the
  // same bytes.
  EXPECT_EQ(WriterFile(got), bytes);
}

TEST(TrapsV1Test, OldFilesStillRead) {
  std::vector<v1::TrapRecord> want = EveryFieldRecords();
  for (int i = 0; i < 50; ++i) want.push_back(MakeRecord(i));
  TempDir dir;
  const std::string path = dir.File("old.traps");
  WriteAll(path, V1File(want));
  auto reader = TrapLogReader::Open(path);
  ASSERT_THAT(reader, IsOk());
  absl::Status end;
  std::vector<v1::TrapRecord> got = ReadAllRecords(reader->get(), &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ExpectSame(got[i], want[i]);
  // Rewriting an old file gives the new version, same records.
  const std::string v2 = WriterFile(got);
  EXPECT_THAT(v2, StartsWith("PVTRAPS2"));
  std::vector<v1::TrapRecord> back =
      ReadBytes(v2, TrapLogEncoding::kBinary, &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(back.size(), want.size());
  for (size_t i = 0; i < back.size(); ++i) ExpectSame(back[i], want[i]);
}

TEST(TrapsV1Test, TruncatedLastRecord) {
  const std::vector<v1::TrapRecord> want = {MakeRecord(0), MakeRecord(1)};
  const std::string one = V1File({want[0]});
  const std::string full = V1File(want);
  for (size_t cut = one.size() + 1; cut < full.size(); ++cut) {
    SCOPED_TRACE(cut);
    absl::Status end;
    std::vector<v1::TrapRecord> got =
        ReadBytes(full.substr(0, cut), TrapLogEncoding::kBinary, &end);
    ASSERT_EQ(got.size(), 1u);
    ExpectSame(got[0], want[0]);
    EXPECT_THAT(end, StatusIs(absl::StatusCode::kDataLoss,
                              HasSubstr(absl::StrCat("mem: record 2 at byte "
                                                     "offset ",
                                                     one.size(), ": trunc"))));
  }
}

// Every way a PVTRAPS2 record can be damaged: the records before it come
// back, then the specific error, from Next and NextTrap alike, every time.
struct DamageCase {
  const char* name;
  // Damages record 2's bytes (`rec`, from its body_bytes on).
  std::function<void(std::string* rec)> damage;
  absl::StatusCode code;
  std::string message;  // after "FILE: record 2 at byte offset O: "
};

// The base record: trap, registers and an expectation of #GP, like a
// capture's; with `strings` also a source and a note. Without strings it
// has the shape the reader's fast path takes.
v1::TrapRecord DamageBase(bool strings) {
  v1::TrapRecord r;
  v1::Trap* t = r.mutable_trap();
  t->set_domain(1);
  t->set_mode(v1::MODE_64);
  t->set_insn(std::string("\x0f\x32", 2));
  t->mutable_regs()->set_rcx(0x1b0);
  t->mutable_regs()->set_rflags(0x2);
  t->set_host_tsc(5);
  r.mutable_expect()->set_kind(v1::Outcome::EXCEPTION);
  r.mutable_expect()->set_vector(v1::GP);
  if (strings) {
    r.set_source("dmesg:7");
    r.set_note("kvm: rdmsr");
  }
  return r;
}

std::vector<DamageCase> DamageCases(bool strings) {
  using absl::StatusCode;
  const uint32_t body = strings ? 216 + 7 + 10 : 216;
  auto set = [](size_t offset, uint64_t v, int bytes) {
    return [=](std::string* rec) { PutLe(rec, offset, v, bytes); };
  };
  std::vector<DamageCase> cases = {
      {"body over the limit", set(0, 1048577, 4), StatusCode::kInvalidArgument,
       "length 1048577 exceeds the limit of 1048576 bytes (corrupt file?)"},
      {"body shorter than the fixed part", set(0, 215, 4),
       StatusCode::kDataLoss,
       "length 215 is shorter than the 216-byte fixed part of a PVTRAPS2 "
       "record"},
      {"body past the end of the file", set(0, body + 100, 4),
       StatusCode::kDataLoss,
       absl::StrCat("truncated: the record is ", body + 100, " bytes but only ",
                    body, " remain")},
      {"reserved flag", set(15, 0xb3, 1), StatusCode::kDataLoss,
       "flags 0xb3 has reserved bits 0x80 set"},
      {"registers without the trap", set(15, 0x23, 1), StatusCode::kDataLoss,
       "flags 0x23 mark trap.regs set but not the trap"},
      {"expectation parts without it", set(15, 0x32, 1), StatusCode::kDataLoss,
       "flags 0x32 mark expectation fields set but not the expectation"},
      {"unknown mode", set(12, 5, 1), StatusCode::kDataLoss,
       "mode 5 is not a pvemu.v1.CpuMode"},
      {"cpl above 3", set(13, 4, 1), StatusCode::kDataLoss, "cpl 4 is above 3"},
      {"insn_len above 15", set(14, 16, 1), StatusCode::kDataLoss,
       "insn_len 16 is above 15"},
      {"unknown kind", set(31, 9, 1), StatusCode::kDataLoss,
       "expect_kind 9 is not a pvemu.v1.Outcome.Kind"},
      {"unknown vector", set(32, 9, 1), StatusCode::kDataLoss,
       "expect_vector 9 is not a pvemu.v1.Vector"},
      {"string lengths past the body", set(212, strings ? 8 : 1, 4),
       StatusCode::kDataLoss,
       absl::StrCat("source_len ", strings ? 8 : 1, " + note_len ",
                    strings ? 10 : 0, " do not fill the body: ", body,
                    " bytes leave ", body - 216, " for the strings")},
      {"padding", set(34, 1, 1), StatusCode::kDataLoss,
       "padding bytes 33..35 are not zero"},
      {"insn byte past insn_len", set(16 + 5, 0x90, 1), StatusCode::kDataLoss,
       "insn bytes past insn_len 2 are not zero"},
      {"last insn byte past insn_len", set(30, 1, 1), StatusCode::kDataLoss,
       "insn bytes past insn_len 2 are not zero"},
      {"trap absent but set", set(15, 0x03, 1), StatusCode::kDataLoss,
       "flags 0x03 mark the trap absent but its fields are not zero"},
      {"registers absent but set", set(15, 0x13, 1), StatusCode::kDataLoss,
       "flags 0x13 mark trap.regs absent but regs are not zero"},
      {"expectation absent but set", set(15, 0x30, 1), StatusCode::kDataLoss,
       "flags 0x30 mark the expectation absent but expect_kind is 2"},
      {"vector absent but set", set(15, 0x31, 1), StatusCode::kDataLoss,
       "flags 0x31 mark expect.vector absent but expect_vector is 13"},
      {"value absent but set", set(188, 0x1234, 8), StatusCode::kDataLoss,
       "flags 0x33 mark expect.value absent but expect_value is 0x1234"},
      {"cpuid absent but set", set(208, 1, 1), StatusCode::kDataLoss,
       "flags 0x33 mark expect.cpuid absent but expect_cpuid is not zero"},
  };
  if (strings) {
    cases.push_back({"string lengths short of the body", set(216, 9, 4),
                     StatusCode::kDataLoss,
                     "source_len 7 + note_len 9 do not fill the body: 233 "
                     "bytes leave 17 for the strings"});
    cases.push_back({"source not UTF-8", set(220, 0xff, 1),
                     StatusCode::kDataLoss,
                     "source is not valid UTF-8 (a proto3 string must be)"});
    cases.push_back({"note not UTF-8", set(227, 0xc3, 1), StatusCode::kDataLoss,
                     "note is not valid UTF-8 (a proto3 string must be)"});
  }
  return cases;
}

TEST(TrapsV2Test, EveryDamageHasItsError) {
  for (bool strings : {false, true}) {
    const v1::TrapRecord base = DamageBase(strings);
    const std::string intact = WriterFile({base, base, base});
    const size_t rec_size = (intact.size() - 8) / 3;
    const size_t start = 8 + rec_size;  // record 2
    for (const DamageCase& c : DamageCases(strings)) {
      SCOPED_TRACE(absl::StrCat(c.name, strings ? " (with strings)" : ""));
      // Record 2 is damaged; record 3 makes sure the reader stops at 2.
      std::string rec = intact.substr(start, rec_size);
      c.damage(&rec);
      const std::string bytes = absl::StrCat(
          intact.substr(0, start), rec,
          c.message.starts_with("truncated") ? ""
                                             : intact.substr(start + rec_size));
      const std::string message = absl::StrCat(
          "d.traps: record 2 at byte offset ", start, ": ", c.message);
      for (bool fast : {false, true}) {
        SCOPED_TRACE(fast ? "NextTrap" : "Next");
        std::stringstream in(bytes);
        std::unique_ptr<TrapLogReader> reader =
            ReaderOf(&in, TrapLogEncoding::kBinary, "d.traps");
        ASSERT_NE(reader, nullptr);
        absl::Status end;
        if (fast) {
          std::vector<TrapAndExpect> got = ReadAllTraps(reader.get(), &end);
          ASSERT_EQ(got.size(), 1u);
          ExpectNextTrapOf(got[0], base);
        } else {
          std::vector<v1::TrapRecord> got = ReadAllRecords(reader.get(), &end);
          ASSERT_EQ(got.size(), 1u);
          ExpectSame(got[0], base);
        }
        EXPECT_THAT(end, StatusIs(c.code, message));
        EXPECT_EQ(reader->records_read(), 1);
        Trap trap;
        EXPECT_THAT(reader->NextTrap(&trap, nullptr),
                    StatusIs(c.code, message));
        v1::TrapRecord rec2;
        EXPECT_THAT(reader->Next(&rec2), StatusIs(c.code, message));
      }
    }
  }
}

TEST(TrapsV2Test, TruncatedLengthPrefix) {
  const std::string one = WriterFile({DamageBase(false)});
  for (size_t extra = 1; extra < 4; ++extra) {
    SCOPED_TRACE(extra);
    absl::Status end;
    std::vector<v1::TrapRecord> got = ReadBytes(
        one + std::string(extra, '\x01'), TrapLogEncoding::kBinary, &end);
    EXPECT_EQ(got.size(), 1u);
    EXPECT_THAT(
        end, StatusIs(absl::StatusCode::kDataLoss,
                      absl::StrCat("mem: record 2 at byte offset ", one.size(),
                                   ": truncated: only ", extra,
                                   " of the 4 length bytes "
                                   "remain")));
  }
}

}  // namespace
}  // namespace pvemu::traplog
