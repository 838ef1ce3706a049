// TrapLogWriter: nothing at the path until Close, the file each encoding
// starts with, and the records it refuses because a reader would.
#include "traplog/writer.h"

#include <cerrno>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/durable_file.h"
#include "emulator/trap_convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/traplog/traplog_test_util.h"

namespace pvemu::traplog {
namespace {

using namespace ::pvemu::emulator;            // the trap types the logs hold
using namespace ::pvemu::traplog::test_util;  // helpers and matchers

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
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "create /nonexistent-dir/x.traps.tmp: No such file or directory"));
  EXPECT_THAT(TrapLogWriter::Open("x.log"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown trap-log extension")));
}

// The writer and the policy store share one durable write and one errno
// mapping (base/durable_file.h): a log whose rename cannot be made durable
// is not there, and Close says why.
TEST(TrapLogWriterTest, FailedDirectoryFsyncFailsCloseAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.File("log.traps");
  absl::StatusOr<std::unique_ptr<TrapLogWriter>> writer = TrapLogWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  base::SetSyncDirectoryFailureForTesting(EIO);
  const absl::Status closed = (*writer)->Close();
  base::SetSyncDirectoryFailureForTesting(0);
  EXPECT_THAT(closed, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("fsync of directory " + base::DirectoryOf(path))));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
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

}  // namespace
}  // namespace pvemu::traplog
