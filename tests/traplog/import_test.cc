// ImportLog itself: per-line auto-detection, forced formats, errors, line
// limits, hostile input and merged statistics.
#include "traplog/import.h"

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/traplog/import_test_util.h"

namespace pvemu::traplog {
namespace {

using namespace ::pvemu::traplog::test_util;  // helpers and matchers

TEST(ImportLogTest, AutoDetectsPerLineInAMixedJournal) {
  Imported got = Import(
      "Sep 04 22:56:17 PC kernel: kvm_amd: kvm [67539]: vcpu3, guest rIP: 0x1 "
      "Unhandled WRMSR(0xc0010115) = 0x0\r\n"
      "Sep 04 22:56:18 PC xenconsoled: (XEN) d0v6 RDMSR 0x0000064e "
      "unimplemented\r\n"
      "Sep 04 22:56:19 PC systemd[1]: Started something.\r\n"
      " qemu-1 [000] .... 1.0: kvm_msr: msr_read 10 = 0x0\r\n");
  EXPECT_EQ(got.stats.lines, 4);
  EXPECT_EQ(got.stats.traps, 3);
  EXPECT_EQ(got.stats.skipped, 1);
  EXPECT_EQ(got.stats.by_format,
            (std::map<std::string, int64_t>{
                {"kvm-dmesg", 1}, {"xen-console", 1}, {"ftrace", 1}}));
  // CR is not part of the note.
  EXPECT_EQ(got.records[1].note(),
            "Sep 04 22:56:18 PC xenconsoled: (XEN) d0v6 RDMSR 0x0000064e "
            "unimplemented");
}

TEST(ImportLogTest, AForcedFormatSkipsTheOthers) {
  const std::string text =
      "kvm [1]: vcpu0 unhandled rdmsr: 0x10\n"
      "(XEN) d0v6 RDMSR 0x0000064e unimplemented\n"
      " qemu-1 [000] .... 1.0: kvm_msr: msr_read 10 = 0x0\n";
  for (absl::string_view format : {"kvm-dmesg", "xen-console", "ftrace"}) {
    Imported got = Import(text, format);
    EXPECT_EQ(got.stats.traps, 1) << format;
    EXPECT_EQ(got.stats.skipped, 2) << format;
    EXPECT_EQ(got.stats.by_format.at(std::string(format)), 1) << format;
  }
}

TEST(ImportLogTest, UnknownFormat) {
  std::istringstream in("x\n");
  EXPECT_THAT(ImportLog("qemu", in, "x",
                        [](v1::TrapRecord&&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown log format \"qemu\"; use auto, kvm-dmesg, "
                       "xen-console or ftrace"));
}

TEST(ImportLogTest, SinkErrorStopsTheImport) {
  std::istringstream in(
      "kvm [1]: unhandled rdmsr: 0x10\nkvm [1]: unhandled rdmsr: 0x11\n"
      "kvm [1]: unhandled rdmsr: 0x12\n");
  int calls = 0;
  EXPECT_THAT(ImportLog("auto", in, "x",
                        [&](v1::TrapRecord&&) {
                          return ++calls == 2
                                     ? absl::ResourceExhaustedError("disk full")
                                     : absl::OkStatus();
                        }),
              StatusIs(absl::StatusCode::kResourceExhausted, "disk full"));
  EXPECT_EQ(calls, 2);
}

TEST(ImportLogTest, MegabyteLinesAreSkippedNotStored) {
  const std::string huge(1 << 20, 'A');
  const std::string trap = "kvm [1]: unhandled rdmsr: 0x10";
  // A huge line, one that ends in a trap (still too long), a real trap, and
  // a huge last line without a newline.
  Imported got =
      Import(absl::StrCat(huge, "\n", huge, " ", trap, "\n", trap, "\n", huge));
  EXPECT_EQ(got.stats.lines, 4);
  EXPECT_EQ(got.stats.traps, 1);
  EXPECT_EQ(got.stats.skipped, 3);
  EXPECT_EQ(got.stats.too_long, 3);
  ASSERT_EQ(got.records.size(), 1u);
  EXPECT_EQ(got.records[0].source(), "test.log:3");
  // Exactly at the limit is still a line.
  Imported edge = Import(std::string(kMaxImportLineBytes, 'B') + "\n" + trap);
  EXPECT_EQ(edge.stats.too_long, 0);
  EXPECT_EQ(edge.stats.traps, 1);
}

TEST(ImportLogTest, BinaryJunkNeverCrashesAndNotesStayUtf8) {
  std::mt19937 rng(1234);
  std::string junk;
  for (int i = 0; i < 200000; ++i) junk += static_cast<char>(rng() & 0xff);
  // Splice some trap lines with invalid UTF-8 into the junk.
  junk += "\nkvm [1]: \xff\xfe\xc0\x80 ignored rdmsr: 0x10 \xed\xa0\x80\n";
  junk += std::string("\0\0(XEN) d0v1 RDMSR 0x10 unimplemented\0\n", 39);
  Imported got = Import(junk);
  ASSERT_GE(got.records.size(), 2u);
  for (const v1::TrapRecord& r : got.records) {
    std::string bytes;
    ASSERT_TRUE(r.SerializeToString(&bytes));
    v1::TrapRecord back;
    EXPECT_TRUE(back.ParseFromString(bytes)) << r.note();
  }
  const v1::TrapRecord& r = got.records[got.records.size() - 2];
  EXPECT_EQ(
      r.note(),
      "kvm [1]: \\xff\\xfe\\xc0\\x80 ignored rdmsr: 0x10 \\xed\\xa0\\x80");
}

TEST(ImportLogTest, MergeStats) {
  ImportStats a = Import("kvm [1]: unhandled rdmsr: 0x10\nx\n").stats;
  ImportStats b = Import("(XEN) d0v1 RDMSR 0xzz unimplemented\n").stats;
  MergeImportStats(b, &a);
  EXPECT_EQ(a.lines, 3);
  EXPECT_EQ(a.traps, 1);
  EXPECT_EQ(a.skipped, 1);
  EXPECT_EQ(a.malformed, 1);
  ASSERT_EQ(a.malformed_lines.size(), 1u);
  EXPECT_EQ(a.by_format.at("kvm-dmesg"), 1);
}

TEST(ImportLogTest, FileErrorsNameTheFile) {
  EXPECT_THAT(ImportLogFile("auto", "/nonexistent/x.log",
                            [](v1::TrapRecord&&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/x.log: cannot open")));
}

}  // namespace
}  // namespace pvemu::traplog
