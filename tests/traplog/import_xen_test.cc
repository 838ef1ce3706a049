// The xen-console importer on hand-written lines: every wording Xen has
// printed, domain ids, and the lines it skips or reports as malformed.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/traplog/import_test_util.h"
#include "traplog/import.h"

namespace pvemu::traplog {
namespace {

using namespace ::pvemu::traplog::test_util;  // helpers and matchers

TEST(XenImportTest, PvRdmsrUnimplemented) {
  v1::TrapRecord r =
      One("(XEN) arch/x86/pv/emul-priv-op.c:1029:d0v6 RDMSR 0x0000064e "
          "unimplemented");
  ExpectRdmsr(r, 0, 6, 0x64e);
  ExpectGp(r);
}

TEST(XenImportTest, WrmsrUnimplementedWithTimestamp) {
  v1::TrapRecord r =
      One("(XEN) [2023-10-01 12:00:00.123] emul-priv-op.c:1034:d5v2 WRMSR "
          "0x00000199 "
          "val 0x0000000000001d00 unimplemented");
  ExpectWrmsr(r, 5, 2, 0x199, 0x1d00);
  ExpectGp(r);
  ExpectGp(
      One("(XEN) [   12.345678] hvm.c:1600:d7v1 WRMSR 0xc0011020 val "
          "0x0006404000000000 unimplemented"));
}

TEST(XenImportTest, FakingRdmsrReadsZero) {
  v1::TrapRecord r = One("(XEN) d1v0 faking RDMSR 0xc0011020");
  ExpectRdmsr(r, 1, 0, 0xc0011020);
  ExpectReadValue(r, 0);
}

TEST(XenImportTest, OldTrapsCDomainAttemptedWrmsr) {
  v1::TrapRecord hl =
      One("(XEN) traps.c:2308:d0 Domain attempted WRMSR 00000000c0010004 from "
          "00003fe1:84091c70 to 00000000:00430076.");
  ExpectWrmsr(hl, 0, 0, 0xc0010004, 0x430076);
  ExpectCompleted(hl);
  v1::TrapRecord wide =
      One("(XEN) traps.c:2432:d3 Domain attempted WRMSR 00000000c0010201 from "
          "0x0000000000000000 to 0x000000000000ffff.");
  ExpectWrmsr(wide, 3, 0, 0xc0010201, 0xffff);
  ExpectCompleted(wide);
  v1::TrapRecord v4 =
      One("(XEN) emul-priv-op.c:1113:d0v2 Domain attempted WRMSR 0000001b from "
          "0x00000000fee00c00 to 0x00000000fee00800");
  ExpectWrmsr(v4, 0, 2, 0x1b, 0xfee00800);
  ExpectCompleted(v4);
  v1::TrapRecord v5 = One(
      "(XEN) d2v1 Domain attempted WRMSR 0x000001a0 from 0x0000000000850089 to "
      "0x0000000000850088");
  ExpectWrmsr(v5, 2, 1, 0x1a0, 0x850088);
}

TEST(XenImportTest, NonPrivDomainAttemptedWrmsr) {
  v1::TrapRecord r =
      One("(XEN) DOM3: (file=traps.c, line=1100) Non-priv domain attempted "
          "WRMSR(00000000000001a0,00000001,00000002).");
  ExpectWrmsr(r, 3, 0, 0x1a0, 0x200000001ull);
  ExpectCompleted(r);
}

TEST(XenImportTest, DomainIds) {
  ExpectRdmsr(
      One("(XEN) [   12.345678] d32767v0 RDMSR 0x00000034 unimplemented"),
      32767, 0, 0x34);
  ExpectRdmsr(One("(XEN) RDMSR 0x00000034 unimplemented"), 0, 0, 0x34);
  Imported idle = Import(
      "(XEN) emul-priv-op.c:1029:d[IDLE]v0 RDMSR 0x00000034 unimplemented\n");
  EXPECT_EQ(idle.stats.traps, 0);
  EXPECT_EQ(idle.stats.skipped, 1);
}

TEST(XenImportTest, WithoutTheXenPrefix) {
  // A paste that lost "(XEN) ".
  ExpectRdmsr(One("emul-priv-op.c:1029:d4v3 RDMSR 0x0000064e unimplemented",
                  "xen-console"),
              4, 3, 0x64e);
}

TEST(XenImportTest, OtherLinesSkippedAndMalformedReported) {
  Imported got = Import(
      "(XEN) HVM d5v0 save: CPU\n"
      "(XEN) common/grant_table.c:1882:d1v3 Expanding d1 grant table from 4 to "
      "5 frames\n"
      "(XEN) d0v1 RDMSR 0xnothex unimplemented\n"
      "(XEN) d0v0 WRMSR 0x00000010 unimplemented\n"
      "(XEN) traps.c:1:d0 Domain attempted WRMSR 0000001b from 0x1\n");
  EXPECT_EQ(got.stats.traps, 0);
  EXPECT_EQ(got.stats.skipped, 2);
  EXPECT_EQ(got.stats.malformed, 3);
  ASSERT_EQ(got.stats.malformed_lines.size(), 3u);
  EXPECT_EQ(got.stats.malformed_lines[0].line, 3);
  EXPECT_EQ(got.stats.malformed_lines[0].reason,
            "xen-console: RDMSR unimplemented: missing or invalid MSR index");
  EXPECT_EQ(got.stats.malformed_lines[1].reason,
            "xen-console: WRMSR unimplemented: missing \"val 0x...\"");
  EXPECT_EQ(got.stats.malformed_lines[2].reason,
            "xen-console: Domain attempted WRMSR: missing \"to VALUE\"");
}

}  // namespace
}  // namespace pvemu::traplog
