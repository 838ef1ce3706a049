// Trap-log files: round trips in both encodings, every way a .traps file can
// be damaged, streaming memory, and CheckExpectation.
#include "emulator/traplog.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/sanitizers.h"
#include "tests/status_matchers.h"

namespace pvemu::emulator {
namespace {

namespace v1 = ::pvemu::v1;
using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A temporary directory removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "traplog_test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* dir = mkdtemp(buf.data());
    if (dir != nullptr) path_ = dir;
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  std::string File(absl::string_view name) const {
    return absl::StrCat(path_, "/", name);
  }

 private:
  std::string path_;
};

bool Exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Records that use every kind of field, varied by `i`.
v1::TrapRecord MakeRecord(int i) {
  v1::TrapRecord r;
  v1::Trap* t = r.mutable_trap();
  t->set_domain(static_cast<uint32_t>(i % 7));
  t->set_vcpu(static_cast<uint32_t>(i % 3));
  t->set_mode(i % 2 ? v1::MODE_64 : v1::MODE_32);
  t->set_insn(i % 2 ? std::string("\x0f\x32", 2) : std::string("\x0f\x30", 2));
  t->mutable_regs()->set_rcx(0x1b0 + static_cast<uint64_t>(i));
  t->mutable_regs()->set_rip(0xffffffff81000000ull + static_cast<uint64_t>(i));
  t->set_host_tsc(1000000ull * static_cast<uint64_t>(i));
  if (i % 3 == 0) {
    r.mutable_expect()->set_kind(v1::Outcome::EXCEPTION);
    r.mutable_expect()->set_vector(v1::GP);
  } else if (i % 3 == 1) {
    r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
    r.mutable_expect()->set_value(static_cast<uint64_t>(i) << 33);
  }
  r.set_source(absl::StrCat("capture.log:", i + 1));
  r.set_note(absl::StrCat("line ", i, " \xc3\xa9 \"quoted\"\n"));
  return r;
}

void ExpectSame(const v1::TrapRecord& got, const v1::TrapRecord& want) {
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, want))
      << "got:\n"
      << got.DebugString() << "want:\n"
      << want.DebugString();
}

std::vector<v1::TrapRecord> ReadAllRecords(TrapLogReader* reader,
                                           absl::Status* end) {
  std::vector<v1::TrapRecord> out;
  v1::TrapRecord rec;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&rec);
    if (!more.ok()) {
      *end = more.status();
      return out;
    }
    if (!*more) {
      *end = absl::OkStatus();
      return out;
    }
    out.push_back(rec);
  }
}

// Writes `n` records to `path` and returns them.
std::vector<v1::TrapRecord> WriteLog(const std::string& path, int n) {
  std::vector<v1::TrapRecord> recs;
  auto writer = TrapLogWriter::Open(path);
  EXPECT_THAT(writer, IsOk());
  if (!writer.ok()) return recs;
  for (int i = 0; i < n; ++i) {
    recs.push_back(MakeRecord(i));
    EXPECT_THAT((*writer)->Append(recs.back()), IsOk());
  }
  EXPECT_THAT((*writer)->Close(), IsOk());
  return recs;
}

TEST(TrapLogEncodingTest, ChosenByExtension) {
  EXPECT_EQ(*TrapLogEncodingForPath("a/b.traps"), TrapLogEncoding::kBinary);
  EXPECT_EQ(*TrapLogEncodingForPath("x.textproto"), TrapLogEncoding::kText);
  EXPECT_THAT(TrapLogEncodingForPath("x.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.txt: unknown trap-log extension")));
}

class RoundTripTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RoundTripTest, FileRecordsComeBackIdentical) {
  TempDir dir;
  const std::string path = dir.File(absl::StrCat("log", GetParam()));
  std::vector<v1::TrapRecord> want = WriteLog(path, 50);
  auto reader = TrapLogReader::Open(path);
  ASSERT_THAT(reader, IsOk());
  absl::Status end;
  std::vector<v1::TrapRecord> got = ReadAllRecords(reader->get(), &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ExpectSame(got[i], want[i]);
  EXPECT_EQ((*reader)->records_read(), 50);
  // Past the end stays at the end.
  v1::TrapRecord rec;
  EXPECT_THAT((*reader)->Next(&rec), IsOk());
  EXPECT_FALSE(*(*reader)->Next(&rec));
}

TEST_P(RoundTripTest, EmptyLogReadsAsNoRecords) {
  TempDir dir;
  const std::string path = dir.File(absl::StrCat("empty", GetParam()));
  WriteLog(path, 0);
  auto reader = TrapLogReader::Open(path);
  ASSERT_THAT(reader, IsOk());
  v1::TrapRecord rec;
  absl::StatusOr<bool> more = (*reader)->Next(&rec);
  ASSERT_THAT(more, IsOk());
  EXPECT_FALSE(*more);
}

TEST_P(RoundTripTest, StreamRecordsComeBackIdentical) {
  TrapLogEncoding enc = *TrapLogEncodingForPath(absl::StrCat("x", GetParam()));
  std::stringstream buf;
  auto writer = TrapLogWriter::ForStream(&buf, enc, "mem");
  std::vector<v1::TrapRecord> want;
  for (int i = 0; i < 20; ++i) {
    want.push_back(MakeRecord(i));
    ASSERT_THAT(writer->Append(want.back()), IsOk());
  }
  ASSERT_THAT(writer->Close(), IsOk());
  EXPECT_THAT(writer->Close(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("closed twice")));
  auto reader = TrapLogReader::ForStream(&buf, enc, "mem");
  ASSERT_THAT(reader, IsOk());
  absl::Status end;
  std::vector<v1::TrapRecord> got = ReadAllRecords(reader->get(), &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ExpectSame(got[i], want[i]);
}

INSTANTIATE_TEST_SUITE_P(Encodings, RoundTripTest,
                         ::testing::Values(".traps", ".textproto"));

TEST(TrapLogWriterTest, NothingAtThePathUntilClose) {
  TempDir dir;
  const std::string path = dir.File("log.traps");
  {
    auto writer = TrapLogWriter::Open(path);
    ASSERT_THAT(writer, IsOk());
    ASSERT_THAT((*writer)->Append(MakeRecord(1)), IsOk());
    EXPECT_FALSE(Exists(path));
    ASSERT_THAT((*writer)->Close(), IsOk());
    EXPECT_TRUE(Exists(path));
    EXPECT_FALSE(Exists(path + ".tmp"));
    EXPECT_THAT((*writer)->Append(MakeRecord(2)),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("Append after Close")));
  }
  const std::string abandoned = dir.File("abandoned.traps");
  {
    auto writer = TrapLogWriter::Open(abandoned);
    ASSERT_THAT(writer, IsOk());
    ASSERT_THAT((*writer)->Append(MakeRecord(1)), IsOk());
  }
  EXPECT_FALSE(Exists(abandoned));
  EXPECT_FALSE(Exists(abandoned + ".tmp"));
}

TEST(TrapLogWriterTest, BinaryStartsWithMagic) {
  TempDir dir;
  const std::string path = dir.File("log.traps");
  WriteLog(path, 2);
  EXPECT_THAT(ReadAll(path), StartsWith("PVTRAPS1"));
}

TEST(TrapLogWriterTest, TextIsATrapLogInTextFormat) {
  TempDir dir;
  const std::string path = dir.File("log.textproto");
  WriteLog(path, 2);
  std::string text = ReadAll(path);
  EXPECT_THAT(text, StartsWith("# proto-file: pvemu/v1/trap.proto\n"
                               "# proto-message: pvemu.v1.TrapLog\n"
                               "record {\n  trap {\n"));
}

TEST(TrapLogWriterTest, OpenErrorsNameTheFile) {
  EXPECT_THAT(
      TrapLogWriter::Open("/nonexistent-dir/x.traps"),
      StatusIs(absl::StatusCode::kNotFound,
               HasSubstr("/nonexistent-dir/x.traps.tmp: cannot create")));
  EXPECT_THAT(TrapLogWriter::Open("x.log"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown trap-log extension")));
}

TEST(TrapLogWriterTest, OversizedRecordIsRefused) {
  std::stringstream buf;
  auto writer = TrapLogWriter::ForStream(&buf, TrapLogEncoding::kBinary, "mem");
  v1::TrapRecord big;
  big.set_note(std::string(kMaxTrapRecordBytes, 'x'));
  EXPECT_THAT(writer->Append(big),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mem: record 1 is 1048580 bytes; the limit is "
                                 "1048576")));
}

TEST(TrapLogReaderTest, OpenMissingFileIsNotFound) {
  EXPECT_THAT(TrapLogReader::Open("/nonexistent-dir/x.traps"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent-dir/x.traps: cannot open")));
}

TEST(TrapLogReaderTest, TruncatedAtEveryCutOfTheLastRecord) {
  TempDir dir;
  const std::string full_path = dir.File("full.traps");
  std::vector<v1::TrapRecord> want = WriteLog(full_path, 3);
  const std::string full = ReadAll(full_path);
  // The last record starts where the first two end.
  std::stringstream two;
  {
    auto w = TrapLogWriter::ForStream(&two, TrapLogEncoding::kBinary, "two");
    ASSERT_THAT(w->Append(want[0]), IsOk());
    ASSERT_THAT(w->Append(want[1]), IsOk());
    ASSERT_THAT(w->Close(), IsOk());
  }
  const size_t last = two.str().size();
  ASSERT_LT(last, full.size());
  ASSERT_EQ(full.substr(0, last), two.str());

  for (size_t cut = last; cut < full.size(); ++cut) {
    SCOPED_TRACE(absl::StrCat("cut at ", cut, " of ", full.size()));
    const std::string path = dir.File("cut.traps");
    WriteAll(path, absl::string_view(full).substr(0, cut));
    auto reader = TrapLogReader::Open(path);
    ASSERT_THAT(reader, IsOk());
    absl::Status end;
    std::vector<v1::TrapRecord> got = ReadAllRecords(reader->get(), &end);
    ASSERT_EQ(got.size(), 2u);
    ExpectSame(got[0], want[0]);
    ExpectSame(got[1], want[1]);
    if (cut == last) {
      EXPECT_THAT(end, IsOk());  // a clean end between records
      continue;
    }
    EXPECT_THAT(
        end, StatusIs(absl::StatusCode::kDataLoss,
                      HasSubstr(absl::StrCat(path, ": record 3 at byte offset ",
                                             last, ": truncated"))));
    // The error sticks.
    v1::TrapRecord rec;
    EXPECT_THAT((*reader)->Next(&rec),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("record 3")));
  }
}

TEST(TrapLogReaderTest, BadMagic) {
  for (absl::string_view bytes :
       {absl::string_view(""), absl::string_view("PVT"),
        absl::string_view("PVTRAPS2\x02\x08\x01"),
        absl::string_view("record {}")}) {
    SCOPED_TRACE(bytes);
    std::stringstream in{std::string(bytes)};
    EXPECT_THAT(
        TrapLogReader::ForStream(&in, TrapLogEncoding::kBinary, "bad.traps"),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("bad.traps: not a .traps file: the first 8 "
                           "bytes are not \"PVTRAPS1\"")));
  }
}

TEST(TrapLogReaderTest, OversizedLengthIsRefusedWithoutAllocating) {
  // 0x80 0x80 0x80 0x08 = 16 MiB; 0xff.. 0x0f = 4 GiB - 1.
  for (absl::string_view len : {absl::string_view("\x80\x80\x80\x08"),
                                absl::string_view("\xff\xff\xff\xff\x0f")}) {
    std::stringstream in{absl::StrCat("PVTRAPS1", len, "junk")};
    auto reader =
        TrapLogReader::ForStream(&in, TrapLogEncoding::kBinary, "big.traps");
    ASSERT_THAT(reader, IsOk());
    v1::TrapRecord rec;
    EXPECT_THAT(
        (*reader)->Next(&rec),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("big.traps: record 1 at byte offset 8: length ")));
  }
}

TEST(TrapLogReaderTest, GarbageRecordIsDataLoss) {
  std::stringstream in{std::string("PVTRAPS1\x03\xff\xff\xff", 12)};
  auto reader =
      TrapLogReader::ForStream(&in, TrapLogEncoding::kBinary, "g.traps");
  ASSERT_THAT(reader, IsOk());
  v1::TrapRecord rec;
  EXPECT_THAT((*reader)->Next(&rec),
              StatusIs(absl::StatusCode::kDataLoss,
                       "g.traps: record 1 at byte offset 8: not a valid "
                       "pvemu.v1.TrapRecord (3 bytes)"));
}

TEST(TrapLogReaderTest, CorruptLengthPrefix) {
  // Eleven continuation bytes: no varint32.
  std::stringstream in{std::string("PVTRAPS1") + std::string(11, '\x80')};
  auto reader =
      TrapLogReader::ForStream(&in, TrapLogEncoding::kBinary, "v.traps");
  ASSERT_THAT(reader, IsOk());
  v1::TrapRecord rec;
  EXPECT_THAT((*reader)->Next(&rec),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("record 1 at byte offset 8: truncated or "
                                 "corrupt length prefix")));
}

TEST(TrapLogReaderTest, TextErrorsHaveLineAndColumn) {
  TempDir dir;
  const std::string path = dir.File("bad.textproto");
  WriteAll(path, "record {\n  trap { domain: 1 }\n  bogus: 2\n}\n");
  EXPECT_THAT(TrapLogReader::Open(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat(
                           path,
                           ":3:8: Message type \"pvemu.v1.TrapRecord\" "
                           "has no field named \"bogus\""))));
}

// Found by traplog_fuzz: the text parser accepts a note that is not UTF-8,
// which the binary reader would then reject; both sides now refuse it.
TEST(TrapLogReaderTest, StringsMustBeUtf8) {
  std::stringstream text{
      std::string("record { source: \"a:1\" }\nrecord { note: \"kvm [1]\xcf "
                  "unhandled\" }\n")};
  auto reader =
      TrapLogReader::ForStream(&text, TrapLogEncoding::kText, "u.textproto");
  ASSERT_THAT(reader, IsOk());
  v1::TrapRecord rec;
  EXPECT_THAT((*reader)->Next(&rec), IsOk());
  EXPECT_THAT((*reader)->Next(&rec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "u.textproto: record 2: note is not valid UTF-8 (a "
                       "proto3 string must be)"));

  std::stringstream out;
  auto writer =
      TrapLogWriter::ForStream(&out, TrapLogEncoding::kBinary, "w.traps");
  v1::TrapRecord bad;
  bad.set_source("x\xff");
  EXPECT_THAT(
      writer->Append(bad),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("w.traps: record 1: source is not valid UTF-8")));
}

long MaxRssKb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

TEST(TrapLogReaderTest, MemoryStaysFlatOnALongLog) {
  TempDir dir;
  const std::string path = dir.File("long.traps");
  constexpr int kRecords = 300000;
  {
    auto writer = TrapLogWriter::Open(path);
    ASSERT_THAT(writer, IsOk());
    v1::TrapRecord rec = MakeRecord(1);
    for (int i = 0; i < kRecords; ++i) {
      rec.mutable_trap()->mutable_regs()->set_rcx(static_cast<uint64_t>(i));
      ASSERT_THAT((*writer)->Append(rec), IsOk());
    }
    ASSERT_THAT((*writer)->Close(), IsOk());
  }
  const long before = MaxRssKb();
  auto reader = TrapLogReader::Open(path);
  ASSERT_THAT(reader, IsOk());
  v1::TrapRecord rec;
  int n = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&rec);
    ASSERT_THAT(more, IsOk());
    if (!*more) break;
    ASSERT_EQ(rec.trap().regs().rcx(), static_cast<uint64_t>(n));
    ++n;
  }
  EXPECT_EQ(n, kRecords);
  // The file is ~20 MB; reading it must not hold it. (Not measurable under
  // ASan, whose quarantine keeps freed memory resident.)
  if (!::pvemu::testing::kUnderAddressSanitizer) {
    EXPECT_LT(MaxRssKb() - before, 4 * 1024);
  }
}

// ---------------------------------------------------------------------------
// CheckExpectation

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

}  // namespace
}  // namespace pvemu::emulator
