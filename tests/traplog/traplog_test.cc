// Trap-log files: round trips in every encoding (.textproto, PVTRAPS2, the
// old PVTRAPS1), the PVTRAPS2 layout byte for byte, every way a .traps file
// can be damaged, NextTrap against Next + TrapFromProto, writer refusals,
// streaming memory and allocations, and CheckExpectation in all its forms.
#include "traplog/traplog.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "emulator/trap_convert.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/heap_counter.h"
#include "tests/sanitizers.h"
#include "tests/status_matchers.h"

namespace pvemu::traplog {
namespace {

using namespace ::pvemu::emulator;  // the trap types the logs hold

namespace v1 = ::pvemu::v1;
using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::ElementsAreArray;
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
  EXPECT_THAT(ReadAll(path), StartsWith("PVTRAPS2"));
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
  // The body: 216 fixed bytes and the note.
  EXPECT_THAT(writer->Append(big),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "mem: record 1 is 1048792 bytes; the limit is "
                       "1048576"));
  EXPECT_EQ(writer->records_written(), 0);
  // The largest record that fits is accepted.
  big.set_note(std::string(kMaxTrapRecordBytes - 216, 'x'));
  EXPECT_THAT(writer->Append(big), IsOk());
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
        absl::string_view("PVTRAPS"), absl::string_view("PVTRAPS3\x02\x08"),
        absl::string_view("pvtraps2"), absl::string_view("record {}")}) {
    SCOPED_TRACE(bytes);
    std::stringstream in{std::string(bytes)};
    EXPECT_THAT(
        TrapLogReader::ForStream(&in, TrapLogEncoding::kBinary, "bad.traps"),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 "bad.traps: not a .traps file: the first 8 bytes are not "
                 "\"PVTRAPS2\" (or the older \"PVTRAPS1\")"));
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
  // And again through NextTrap.
  reader = TrapLogReader::Open(path);
  ASSERT_THAT(reader, IsOk());
  Trap trap;
  n = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->NextTrap(&trap, nullptr);
    ASSERT_THAT(more, IsOk());
    if (!*more) break;
    ASSERT_EQ(trap.regs.gpr[kRcx], static_cast<uint64_t>(n));
    ++n;
  }
  EXPECT_EQ(n, kRecords);
  // The file is ~75 MB; reading it must not hold it, only the reader's
  // 1 MiB buffer. (Not measurable under ASan, whose quarantine keeps freed
  // memory resident.)
  if (!::pvemu::testing::kUnderAddressSanitizer) {
    EXPECT_LT(MaxRssKb() - before, 4 * 1024);
  }
}

// ---------------------------------------------------------------------------
// The binary versions, NextTrap

// Writes `v` as `bytes` little-endian bytes at `offset`: the layout table's
// byte order, assembled independently of the codec under test.
void PutLe(std::string* out, size_t offset, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    (*out)[offset + static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  }
}

// A PVTRAPS1 file as the old writer made it: the magic, then per record a
// varint length and the serialized message.
std::string V1File(const std::vector<v1::TrapRecord>& records) {
  std::string out(kTrapsMagicV1);
  for (const v1::TrapRecord& r : records) {
    std::string body;
    EXPECT_TRUE(r.SerializeToString(&body));
    uint64_t n = body.size();
    while (n >= 0x80) {
      out.push_back(static_cast<char>(n | 0x80));
      n >>= 7;
    }
    out.push_back(static_cast<char>(n));
    out += body;
  }
  return out;
}

// The file TrapLogWriter makes of `records` in `encoding` (.traps: PVTRAPS2).
std::string WriterFile(const std::vector<v1::TrapRecord>& records,
                       TrapLogEncoding encoding = TrapLogEncoding::kBinary) {
  std::stringstream buf;
  auto writer = TrapLogWriter::ForStream(&buf, encoding, "w");
  for (const v1::TrapRecord& r : records) {
    EXPECT_THAT(writer->Append(r), IsOk()) << r.DebugString();
  }
  EXPECT_THAT(writer->Close(), IsOk());
  return buf.str();
}

std::unique_ptr<TrapLogReader> ReaderOf(std::stringstream* in,
                                        TrapLogEncoding encoding,
                                        absl::string_view name) {
  auto reader = TrapLogReader::ForStream(in, encoding, name);
  EXPECT_THAT(reader, IsOk());
  return reader.ok() ? std::move(*reader) : nullptr;
}

std::vector<v1::TrapRecord> ReadBytes(const std::string& bytes,
                                      TrapLogEncoding encoding,
                                      absl::Status* end) {
  std::stringstream in(bytes);
  std::unique_ptr<TrapLogReader> reader = ReaderOf(&in, encoding, "mem");
  if (reader == nullptr) return {};
  return ReadAllRecords(reader.get(), end);
}

struct TrapAndExpect {
  Trap trap;
  ExpectedOutcome expect;
};

std::vector<TrapAndExpect> ReadAllTraps(TrapLogReader* reader,
                                        absl::Status* end) {
  std::vector<TrapAndExpect> out;
  while (true) {
    TrapAndExpect t;
    absl::StatusOr<bool> more = reader->NextTrap(&t.trap, &t.expect);
    if (!more.ok() || !*more) {
      *end = more.status();
      return out;
    }
    out.push_back(t);
  }
}

std::string Describe(const ExpectedOutcome& e) {
  return absl::StrCat("{kind ", e.has_kind, "/", e.kind, " vector ",
                      e.has_vector, "/", e.vector, " value ", e.has_value, "/",
                      e.value, " cpuid ", e.has_cpuid, "/", e.cpuid[0], ",",
                      e.cpuid[1], ",", e.cpuid[2], ",", e.cpuid[3], "}");
}

void ExpectSameTrap(const Trap& got, const Trap& want) {
  EXPECT_EQ(got.domain, want.domain);
  EXPECT_EQ(got.vcpu, want.vcpu);
  EXPECT_EQ(got.mode, want.mode);
  EXPECT_EQ(got.cpl, want.cpl);
  EXPECT_EQ(got.insn_len, want.insn_len);
  EXPECT_THAT(got.insn, ElementsAreArray(want.insn));
  EXPECT_THAT(got.regs.gpr, ElementsAreArray(want.regs.gpr));
  EXPECT_EQ(got.regs.rip, want.regs.rip);
  EXPECT_EQ(got.regs.rflags, want.regs.rflags);
  EXPECT_EQ(got.host_tsc, want.host_tsc);
}

// NextTrap's answer for `rec`, by definition: TrapFromProto and
// ExpectedOutcomeFromProto of the message Next() returns.
void ExpectNextTrapOf(const TrapAndExpect& got, const v1::TrapRecord& rec) {
  absl::StatusOr<Trap> want = TrapFromProto(rec.trap());
  ASSERT_THAT(want, IsOk());
  ExpectSameTrap(got.trap, *want);
  const ExpectedOutcome want_expect = ExpectedOutcomeFromProto(rec.expect());
  EXPECT_TRUE(got.expect == want_expect)
      << Describe(got.expect) << " vs " << Describe(want_expect);
}

// Records that together use every field and edge of the PVTRAPS2 layout.
std::vector<v1::TrapRecord> EveryFieldRecords() {
  std::vector<v1::TrapRecord> out;
  const std::string insn15(
      "\xf0\x66\x67\x2e\x48\x0f\x32\x90\x90\x90\x90\x90"
      "\x90\x90\xff",
      15);
  // Every mode, every cpl, every instruction length 0..15, registers and
  // ids with their top bits set.
  for (int mode = 0; mode <= 4; ++mode) {
    for (uint32_t cpl = 0; cpl <= 3; ++cpl) {
      v1::TrapRecord r;
      v1::Trap* t = r.mutable_trap();
      const uint64_t k = static_cast<uint64_t>(mode) * 4 + cpl;
      t->set_domain(0xffffff00u + static_cast<uint32_t>(k));
      t->set_vcpu(0x80000000u | static_cast<uint32_t>(k));
      t->set_mode(static_cast<v1::CpuMode>(mode));
      t->set_cpl(cpl);
      t->set_insn(insn15.substr(0, k % 16));
      v1::Registers* g = t->mutable_regs();
      const google::protobuf::Reflection* refl = g->GetReflection();
      const google::protobuf::Descriptor* desc = g->GetDescriptor();
      EXPECT_EQ(desc->field_count(), 18) << "a register the layout lacks";
      for (int f = 0; f < desc->field_count(); ++f) {
        refl->SetUInt64(
            g, desc->field(f),
            0x8070605040302010ull * (static_cast<uint64_t>(f) + 1) + k);
      }
      g->set_rflags(k & 1 ? 0x246 : 0);  // bit 1 as recorded, clear or set
      t->set_host_tsc(~uint64_t{0} - k);
      out.push_back(r);
    }
  }
  v1::TrapRecord base = out[7];
  // Expectations: empty, each field alone, all together, zeros that are set.
  {
    v1::TrapRecord r = base;
    r.mutable_expect();
    out.push_back(r);
  }
  for (int kind = 0; kind <= 3; ++kind) {
    v1::TrapRecord r = base;
    r.mutable_expect()->set_kind(static_cast<v1::Outcome::Kind>(kind));
    out.push_back(r);
  }
  for (int vector = 0; vector < 32; ++vector) {
    if (!v1::Vector_IsValid(vector)) continue;
    v1::TrapRecord r = base;
    r.mutable_expect()->set_vector(static_cast<v1::Vector>(vector));
    out.push_back(r);
  }
  for (uint64_t value : {uint64_t{0}, uint64_t{0x6}, ~uint64_t{0}}) {
    v1::TrapRecord r = base;
    r.mutable_expect()->set_value(value);
    out.push_back(r);
  }
  {
    v1::TrapRecord r = base;
    r.mutable_expect()->mutable_cpuid();  // set, all zero
    out.push_back(r);
    r.mutable_expect()->mutable_cpuid()->set_eax(0xffffffffu);
    r.mutable_expect()->mutable_cpuid()->set_edx(0x80000001u);
    out.push_back(r);
  }
  {
    v1::TrapRecord r = base;
    v1::Expectation* e = r.mutable_expect();
    e->set_kind(v1::Outcome::EXCEPTION);
    e->set_vector(v1::XM);
    e->set_value(0x123456789abcdef0ull);
    e->mutable_cpuid()->set_eax(1);
    e->mutable_cpuid()->set_ebx(2);
    e->mutable_cpuid()->set_ecx(3);
    e->mutable_cpuid()->set_edx(4);
    out.push_back(r);
  }
  // Strings: NUL bytes, empty ones, UTF-8.
  for (const auto& [source, note] :
       {std::pair<std::string, std::string>{std::string("a\0b:1", 5),
                                            std::string("\0", 1)},
        {"", std::string("x\0\0y", 4)},
        {"kern.log:12", ""},
        {"\xc3\xa9", "\xe2\x82\xac \xf0\x9f\x98\x80"}}) {
    v1::TrapRecord r = base;
    r.set_source(source);
    r.set_note(note);
    out.push_back(r);
  }
  // No trap; a trap without registers; registers set but all zero.
  {
    v1::TrapRecord r;
    r.mutable_expect()->set_kind(v1::Outcome::UNHANDLED);
    r.set_note("no trap");
    out.push_back(r);
    r.mutable_trap()->set_domain(3);
    out.push_back(r);
    r.mutable_trap()->mutable_regs();
    out.push_back(r);
    r.Clear();  // nothing at all
    out.push_back(r);
  }
  return out;
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

// NextTrap must give what Next() + TrapFromProto give, whatever the encoding.
class NextTrapTest : public ::testing::TestWithParam<const char*> {
 protected:
  // The file of `records` in this test's encoding, and that encoding.
  std::string File(const std::vector<v1::TrapRecord>& records) {
    const std::string version = GetParam();
    if (version == "PVTRAPS1") return V1File(records);
    if (version == "PVTRAPS2") return WriterFile(records);
    return WriterFile(records, TrapLogEncoding::kText);
  }
  TrapLogEncoding Encoding() {
    return std::string(GetParam()) == "textproto" ? TrapLogEncoding::kText
                                                  : TrapLogEncoding::kBinary;
  }
};

TEST_P(NextTrapTest, SameAsNextAndTrapFromProto) {
  std::vector<v1::TrapRecord> want = EveryFieldRecords();
  for (int i = 0; i < 20; ++i) want.push_back(MakeRecord(i));
  const std::string bytes = File(want);

  std::stringstream in(bytes);
  std::unique_ptr<TrapLogReader> reader = ReaderOf(&in, Encoding(), "mem");
  ASSERT_NE(reader, nullptr);
  absl::Status end;
  std::vector<TrapAndExpect> got = ReadAllTraps(reader.get(), &end);
  EXPECT_THAT(end, IsOk());
  EXPECT_EQ(reader->records_read(), static_cast<int64_t>(want.size()));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectNextTrapOf(got[i], want[i]);
  }
  // Past the end stays at the end.
  Trap trap;
  absl::StatusOr<bool> more = reader->NextTrap(&trap, nullptr);
  ASSERT_THAT(more, IsOk());
  EXPECT_FALSE(*more);
}

TEST_P(NextTrapTest, MixesWithNext) {
  std::vector<v1::TrapRecord> want;
  for (int i = 0; i < 6; ++i) want.push_back(MakeRecord(i));
  std::stringstream in(File(want));
  std::unique_ptr<TrapLogReader> reader = ReaderOf(&in, Encoding(), "mem");
  ASSERT_NE(reader, nullptr);
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    if (i % 2 == 0) {
      v1::TrapRecord rec;
      ASSERT_THAT(reader->Next(&rec), IsOk());
      ExpectSame(rec, want[i]);
    } else {
      TrapAndExpect t;
      absl::StatusOr<bool> more = reader->NextTrap(&t.trap, &t.expect);
      ASSERT_THAT(more, IsOk());
      ASSERT_TRUE(*more);
      ExpectNextTrapOf(t, want[i]);
    }
  }
  EXPECT_EQ(reader->records_read(), 6);
}

// PVTRAPS1 and text can hold a trap TrapFromProto refuses; NextTrap then
// fails naming the record, after the records before it, and stays failed.
// (PVTRAPS2 cannot hold more than 15 insn bytes: see
// WriterRefusesWhatTheReaderWould and EveryDamageHasItsError.)
class NextTrapOldEncodingsTest : public NextTrapTest {};

TEST_P(NextTrapOldEncodingsTest, ATrapThatDoesNotConvertIsAnError) {
  std::vector<v1::TrapRecord> records = {MakeRecord(0), MakeRecord(1)};
  records[1].mutable_trap()->set_insn(std::string(16, '\x90'));
  const std::string bytes = File(records);
  std::stringstream in(bytes);
  std::unique_ptr<TrapLogReader> reader = ReaderOf(&in, Encoding(), "bad");
  ASSERT_NE(reader, nullptr);
  absl::Status end;
  std::vector<TrapAndExpect> got = ReadAllTraps(reader.get(), &end);
  ASSERT_EQ(got.size(), 1u);
  ExpectNextTrapOf(got[0], records[0]);
  const std::string where =
      Encoding() == TrapLogEncoding::kText
          ? "bad: record 2: "
          : absl::StrCat("bad: record 2 at byte offset ",
                         V1File({records[0]}).size(), ": ");
  const std::string message = absl::StrCat(
      where,
      "trap for domain 1 vcpu 1 carries 16 instruction bytes; an x86 "
      "instruction is at most 15 bytes, send only the bytes at RIP");
  EXPECT_THAT(end, StatusIs(absl::StatusCode::kInvalidArgument, message));
  Trap trap;
  EXPECT_THAT(reader->NextTrap(&trap, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, message));
  v1::TrapRecord rec;
  EXPECT_THAT(reader->Next(&rec),
              StatusIs(absl::StatusCode::kInvalidArgument, message));

  // Next() reads the same record fine.
  std::stringstream again(bytes);
  reader = ReaderOf(&again, Encoding(), "bad");
  ASSERT_NE(reader, nullptr);
  std::vector<v1::TrapRecord> all = ReadAllRecords(reader.get(), &end);
  EXPECT_THAT(end, IsOk());
  EXPECT_EQ(all.size(), 2u);
}

// A trap the layout can hold but TrapFromProto refuses (today: the reserved
// domain id 0xffffffff). The PVTRAPS2 writer refuses it, so that file is
// patched by hand. NextTrap answers as TrapFromProto does, in every encoding.
TEST_P(NextTrapTest, RefusesWhatTrapFromProtoRefuses) {
  std::vector<v1::TrapRecord> records = {MakeRecord(0), MakeRecord(1),
                                         MakeRecord(2)};
  std::string bytes;
  if (std::string(GetParam()) == "PVTRAPS2") {
    bytes = WriterFile(records);
    const size_t rec_size = (bytes.size() - 8) / 3;  // all the same size
    ASSERT_EQ(rec_size * 3 + 8, bytes.size());
    PutLe(&bytes, 8 + rec_size + 4, 0xffffffffu, 4);  // record 2's domain
  }
  records[1].mutable_trap()->set_domain(0xffffffffu);
  if (bytes.empty()) bytes = File(records);
  const absl::StatusOr<Trap> verdict = TrapFromProto(records[1].trap());

  std::stringstream in(bytes);
  std::unique_ptr<TrapLogReader> reader = ReaderOf(&in, Encoding(), "d");
  ASSERT_NE(reader, nullptr);
  absl::Status end;
  std::vector<TrapAndExpect> got = ReadAllTraps(reader.get(), &end);
  if (verdict.ok()) {  // the rule is gone: the record reads like any other
    EXPECT_THAT(end, IsOk());
    EXPECT_EQ(got.size(), 3u);
    return;
  }
  ASSERT_EQ(got.size(), 1u);
  ExpectNextTrapOf(got[0], records[0]);
  const size_t start =
      std::string(GetParam()) == "PVTRAPS1"   ? V1File({records[0]}).size()
      : std::string(GetParam()) == "PVTRAPS2" ? 8 + (bytes.size() - 8) / 3
                                              : 0;
  const std::string where =
      Encoding() == TrapLogEncoding::kText
          ? "d: record 2: "
          : absl::StrCat("d: record 2 at byte offset ", start, ": ");
  EXPECT_THAT(end, StatusIs(absl::StatusCode::kInvalidArgument,
                            absl::StrCat(where, verdict.status().message())));
  // Next() reads it; the message is what the file holds.
  std::stringstream again(bytes);
  reader = ReaderOf(&again, Encoding(), "d");
  ASSERT_NE(reader, nullptr);
  std::vector<v1::TrapRecord> all = ReadAllRecords(reader.get(), &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(all.size(), 3u);
  ExpectSame(all[1], records[1]);
}

INSTANTIATE_TEST_SUITE_P(Encodings, NextTrapTest,
                         ::testing::Values("PVTRAPS1", "PVTRAPS2",
                                           "textproto"));
INSTANTIATE_TEST_SUITE_P(Encodings, NextTrapOldEncodingsTest,
                         ::testing::Values("PVTRAPS1", "textproto"));

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
      {"reserved flag", set(15, 0x73, 1), StatusCode::kDataLoss,
       "flags 0x73 has reserved bits 0x40 set"},
      {"registers without the trap", set(15, 0x23, 1), StatusCode::kDataLoss,
       "flags 0x23 mark trap.regs set but not the trap"},
      {"expectation parts without it", set(15, 0x32, 1), StatusCode::kDataLoss,
       "flags 0x32 mark expectation fields set but not the expectation"},
      {"unknown mode", set(12, 5, 1), StatusCode::kDataLoss,
       "mode 5 is not a pvemu.v1.CpuMode"},
      {"cpl above 3", set(13, 4, 1), StatusCode::kDataLoss, "cpl 4 is above 3"},
      {"insn_len above 15", set(14, 16, 1), StatusCode::kDataLoss,
       "insn_len 16 is above 15"},
      {"unknown kind", set(31, 4, 1), StatusCode::kDataLoss,
       "expect_kind 4 is not a pvemu.v1.Outcome.Kind"},
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

// Records of every size, up to the largest, across the reader's refills.
TEST(TrapsV2Test, RecordsOfEverySizeAcrossBufferRefills) {
  std::vector<v1::TrapRecord> want;
  for (int i = 0; i < 400; ++i) {
    v1::TrapRecord r = MakeRecord(i);
    r.set_note(std::string(static_cast<size_t>(i) * 7919 % 30011, 'n'));
    if (i % 50 == 7) r.set_note(std::string(300000 + i, 'b'));
    want.push_back(r);
  }
  v1::TrapRecord largest = MakeRecord(1);
  largest.set_source("");
  largest.set_note(std::string(kMaxTrapRecordBytes - 216, 'L'));
  want.insert(want.begin() + 3, largest);
  want.push_back(largest);
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
  std::stringstream in(bytes);
  std::unique_ptr<TrapLogReader> reader =
      ReaderOf(&in, TrapLogEncoding::kBinary, "mem");
  ASSERT_NE(reader, nullptr);
  std::vector<TrapAndExpect> traps = ReadAllTraps(reader.get(), &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(traps.size(), want.size());
  for (size_t i = 0; i < traps.size(); ++i) ExpectNextTrapOf(traps[i], want[i]);
}

TEST(TrapLogWriterTest, WriterRefusesWhatTheReaderWould) {
  struct Case {
    std::function<void(v1::TrapRecord*)> set;
    std::string message;  // after "w.traps: record 2: "
  } cases[] = {
      {[](v1::TrapRecord* r) {
         r->mutable_trap()->set_insn(std::string(16, '\x90'));
       },
       "trap.insn is 16 bytes; an x86 instruction (and a .traps record) "
       "holds at most 15"},
      {[](v1::TrapRecord* r) { r->mutable_trap()->set_cpl(4); },
       "trap.cpl is 4; the privilege level is 0..3"},
      {[](v1::TrapRecord* r) { r->mutable_trap()->set_cpl(300); },
       "trap.cpl is 300; the privilege level is 0..3"},
      {[](v1::TrapRecord* r) {
         r->mutable_trap()->set_mode(static_cast<v1::CpuMode>(9));
       },
       "trap.mode is 9, which is not a pvemu.v1.CpuMode"},
      {[](v1::TrapRecord* r) {
         r->mutable_expect()->set_kind(static_cast<v1::Outcome::Kind>(7));
       },
       "expect.kind is 7, which is not a pvemu.v1.Outcome.Kind"},
      {[](v1::TrapRecord* r) {
         r->mutable_expect()->set_vector(static_cast<v1::Vector>(9));
       },
       "expect.vector is 9, which is not a pvemu.v1.Vector"},
      {[](v1::TrapRecord* r) { r->set_note("\xc3"); },
       "note is not valid UTF-8 (a proto3 string must be)"},
      // And whatever else TrapFromProto refuses, in its words.
      {[](v1::TrapRecord* r) { r->mutable_trap()->set_domain(0xffffffffu); },
       [] {
         v1::TrapRecord r = MakeRecord(1);
         r.mutable_trap()->set_domain(0xffffffffu);
         absl::StatusOr<Trap> t = TrapFromProto(r.trap());
         return t.ok() ? std::string("(accepted)")
                       : std::string(t.status().message());
       }()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    v1::TrapRecord bad = MakeRecord(1);
    c.set(&bad);
    if (c.message == "(accepted)") continue;  // TrapFromProto has no such rule
    std::stringstream buf;
    auto writer =
        TrapLogWriter::ForStream(&buf, TrapLogEncoding::kBinary, "w.traps");
    ASSERT_THAT(writer->Append(MakeRecord(0)), IsOk());
    EXPECT_THAT(writer->Append(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("w.traps: record 2: ", c.message)));
    // Nothing of it was written; the writer goes on.
    ASSERT_THAT(writer->Append(MakeRecord(2)), IsOk());
    ASSERT_THAT(writer->Close(), IsOk());
    EXPECT_EQ(writer->records_written(), 2);
    absl::Status end;
    std::vector<v1::TrapRecord> got =
        ReadBytes(buf.str(), TrapLogEncoding::kBinary, &end);
    EXPECT_THAT(end, IsOk());
    ASSERT_EQ(got.size(), 2u);
    ExpectSame(got[0], MakeRecord(0));
    ExpectSame(got[1], MakeRecord(2));
  }
}

TEST(TrapLogWriterTest, UnknownFieldsAreDropped) {
  v1::TrapRecord rec = MakeRecord(1);
  rec.GetReflection()->MutableUnknownFields(&rec)->AddVarint(99, 7);
  absl::Status end;
  std::vector<v1::TrapRecord> got =
      ReadBytes(WriterFile({rec}), TrapLogEncoding::kBinary, &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(got.size(), 1u);
  ExpectSame(got[0], MakeRecord(1));
}

TEST(TrapsV2Test, ReplayFastPathDoesNotAllocate) {
  // Records whose expectations the outcomes below meet.
  std::vector<v1::TrapRecord> records;
  for (int i = 0; i < 1000; ++i) {
    v1::TrapRecord r = MakeRecord(i);
    r.clear_source();
    r.clear_note();
    // A value is for RDMSR only (MakeRecord's even records are WRMSR).
    if (i % 2 == 0) r.mutable_expect()->clear_value();
    records.push_back(r);
  }
  std::stringstream in(WriterFile(records));
  std::unique_ptr<TrapLogReader> reader =
      ReaderOf(&in, TrapLogEncoding::kBinary, "mem");
  ASSERT_NE(reader, nullptr);
  Trap trap;
  ExpectedOutcome expect;
  ASSERT_THAT(reader->NextTrap(&trap, &expect), IsOk());  // the first refill
  const uint64_t before = ::pvemu::testing::HeapAllocations();
  int n = 1, mismatches = 0;
  while (true) {
    absl::StatusOr<bool> more = reader->NextTrap(&trap, &expect);
    if (!more.ok() || !*more) break;
    Outcome out(trap.regs);
    if (expect.has_vector) {
      out.kind = OutcomeKind::kException;
      out.vector = Vector::kGP;
    } else {
      out.kind = OutcomeKind::kCompleted;
      out.regs.gpr[kRdx] = expect.value >> 32;
      out.regs.gpr[kRax] = expect.value & 0xffffffffu;
    }
    if (!CheckExpectation(expect, trap, out).ok()) ++mismatches;
    ++n;
  }
  const uint64_t allocations = ::pvemu::testing::HeapAllocations() - before;
  EXPECT_EQ(n, 1000);
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(allocations, 0u);
}

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
  Outcome completed(trap->regs);
  completed.kind = OutcomeKind::kCompleted;
  completed.regs.gpr[kRax] = 0xaa11223344ull;
  EXPECT_THAT(CheckExpectation(ExpectedOutcomeFromProto(r.expect()), *trap,
                               completed),
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
  RegsFromProto(o.regs(), &out.regs);
  return out;
}

absl::Status CheckStructs(const v1::TrapRecord& r, const v1::Outcome& o) {
  absl::StatusOr<Trap> trap = TrapFromProto(r.trap());
  EXPECT_THAT(trap, IsOk());
  if (!trap.ok()) return trap.status();
  return CheckExpectation(ExpectedOutcomeFromProto(r.expect()), *trap,
                          OutcomeFromProto(o));
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
  Outcome completed(trap.regs);
  completed.kind = OutcomeKind::kCompleted;
  EXPECT_THAT(CheckExpectation(expect, trap, completed),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "expected EXCEPTION #GP, got COMPLETED rax=0x0 "
                       "rdx=0x0"));
  Outcome fault(trap.regs);
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
