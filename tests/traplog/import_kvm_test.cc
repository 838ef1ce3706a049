// The kvm-dmesg importer on hand-written lines: every wording the kernel
// (and the illumos port) has printed, the prefixes log tools add, and the
// lines it skips or reports as malformed.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/traplog/import_test_util.h"
#include "traplog/import.h"

namespace pvemu::traplog {
namespace {

using namespace ::pvemu::traplog::test_util;  // helpers and matchers

TEST(KvmImportTest, DmesgIgnoredRdmsrWithTimestamp) {
  v1::TrapRecord r =
      One("[  829.050394] kvm [1887]: vcpu0, guest rIP: 0xfffff8046a9311ac "
          "ignored rdmsr: 0x641");
  ExpectRdmsr(r, 1887, 0, 0x641);
  EXPECT_EQ(r.trap().regs().rip(), 0xfffff8046a9311acull);
  ExpectReadValue(r, 0);
  EXPECT_EQ(r.source(), "test.log:1");
  EXPECT_EQ(r.note(),
            "[  829.050394] kvm [1887]: vcpu0, guest rIP: 0xfffff8046a9311ac "
            "ignored rdmsr: 0x641");
}

TEST(KvmImportTest, Kernel5IgnoredRdmsrPrintsData) {
  v1::TrapRecord r = One("kvm [99]: ignored rdmsr: 0x64e data 0x0");
  ExpectRdmsr(r, 99, 0, 0x64e);
  ExpectReadValue(r, 0);
  EXPECT_EQ(r.trap().regs().rip(), 0u);
}

TEST(KvmImportTest, UnhandledRdmsrIsGp) {
  v1::TrapRecord r = One("kvm [555]: unhandled rdmsr: 0xc0011029");
  ExpectRdmsr(r, 555, 0, 0xc0011029);
  ExpectGp(r);
}

TEST(KvmImportTest, IgnoredWrmsrOldKernelDataWithoutPrefix) {
  v1::TrapRecord r = One("kvm [555]: vcpu2 ignored wrmsr: 0x1a0 data 850089");
  ExpectWrmsr(r, 555, 2, 0x1a0, 0x850089);
  ExpectCompleted(r);
}

TEST(KvmImportTest, UnhandledWrmsrSplitsTheValue) {
  v1::TrapRecord r =
      One("[ 1234.567890] kvm [42]: vcpu7, guest rIP: 0xffffffff81000000 "
          "unhandled wrmsr: 0xc0010117 data 0x12345678abcdef");
  ExpectWrmsr(r, 42, 7, 0xc0010117, 0x12345678abcdefull);
  EXPECT_EQ(r.trap().regs().rip(), 0xffffffff81000000ull);
  ExpectGp(r);
}

TEST(KvmImportTest, SyslogAndJournalPrefixes) {
  Imported got = Import(
      "Mar  3 10:00:00 host kernel: [ 1234.567890] kvm [42]: vcpu1, guest rIP: "
      "0x1000 ignored wrmsr: 0x10 data 0x1\n"
      "Sep 04 22:56:17 vcpu9-host kernel: kvm_intel: kvm [43]: vcpu2, guest "
      "rIP: 0x2000 unhandled rdmsr: 0x34\n"
      "Sep 04 22:56:17 PC kernel: kvm: kvm [44]: ignored rdmsr: 0x35\n");
  ASSERT_EQ(got.records.size(), 3u);
  ExpectWrmsr(got.records[0], 42, 1, 0x10, 1);
  ExpectRdmsr(got.records[1], 43, 2, 0x34);  // not vcpu 9 from the hostname
  EXPECT_EQ(got.records[1].trap().regs().rip(), 0x2000u);
  ExpectRdmsr(got.records[2], 44, 0, 0x35);
  EXPECT_EQ(got.stats.by_format.at("kvm-dmesg"), 3);
}

TEST(KvmImportTest, Kernel63UnhandledWrmsrIsDroppedForMostMsrs) {
  // MSR_VM_IGNNE: svm_set_msr prints and returns 0.
  v1::TrapRecord r =
      One("Sep 04 22:56:17 PC kernel: kvm_amd: kvm [67539]: vcpu3, guest rIP: "
          "0xfffff8547ad7624d Unhandled WRMSR(0xc0010115) = 0x0");
  ExpectWrmsr(r, 67539, 3, 0xc0010115, 0);
  EXPECT_EQ(r.trap().regs().rip(), 0xfffff8547ad7624dull);
  ExpectCompleted(r);
  // Perf counters, DEBUGCTL: dropped too.
  ExpectCompleted(One(
      "kvm [1]: vcpu0, guest rIP: 0x0 Unhandled WRMSR(0xc0010004) = 0xffff"));
  ExpectCompleted(
      One("kvm [1]: vcpu0, guest rIP: 0x0 Unhandled WRMSR(0x1d9) = 0x1"));
}

TEST(KvmImportTest, Kernel63UnhandledWrmsrFaultsWhereTheKernelReturnsAnError) {
  // Hyper-V synthetic MSRs, HWCR, MMIO_CONF_BASE return 1: #GP.
  for (absl::string_view msr : {"0x40000021", "0xc0010015", "0xc0010058"}) {
    v1::TrapRecord r = One(absl::StrCat(
        "kvm [1]: vcpu0, guest rIP: 0x10 Unhandled WRMSR(", msr, ") = 0x5"));
    ExpectGp(r);
    EXPECT_EQ(r.trap().regs().rax(), 5u);
  }
  v1::TrapRecord r =
      One("kvm [1]: vcpu1, guest rIP: 0x10 Unhandled RDMSR(0x40000020)");
  ExpectRdmsr(r, 1, 1, 0x40000020);
  ExpectGp(r);
}

TEST(KvmImportTest, OtherKvmWordings) {
  v1::TrapRecord perf =
      One("kvm: disabled perfctr wrmsr: 0xc0010004 data 0xffff");
  ExpectWrmsr(perf, 0, 0, 0xc0010004, 0xffff);
  ExpectCompleted(perf);
  ExpectCompleted(
      One("kvm [3]: vcpu0 unimplemented perfctr wrmsr: 0xc1 data 0x1"));
  ExpectCompleted(
      One("kvm [3]: vcpu0 unimplemented wrmsr: 0xc0010115 data 0x0"));
  v1::TrapRecord hwcr = One("kvm [3]: vcpu0 unimplemented HWCR wrmsr: 0x40");
  ExpectWrmsr(hwcr, 3, 0, 0xc0010015, 0x40);
  ExpectGp(hwcr);
  v1::TrapRecord mmio =
      One("kvm [3]: vcpu0 unimplemented MMIO_CONF_BASE wrmsr: 0xe0000021");
  ExpectWrmsr(mmio, 3, 0, 0xc0010058, 0xe0000021);
  ExpectGp(mmio);
  v1::TrapRecord hv =
      One("kvm [3]: vcpu0, guest rIP: 0x0 Hyper-V unhandled wrmsr: 0x40000081 "
          "data 0x1");
  ExpectWrmsr(hv, 3, 0, 0x40000081, 1);
  ExpectGp(hv);
}

TEST(KvmImportTest, DebugCtlNop) {
  v1::TrapRecord r =
      One("kvm [77]: vcpu0, guest rIP: 0xffffffff8104f0c8 kvm_set_msr_common: "
          "MSR_IA32_DEBUGCTLMSR 0x1, nop");
  ExpectWrmsr(r, 77, 0, 0x1d9, 1);
  EXPECT_EQ(r.trap().regs().rip(), 0xffffffff8104f0c8ull);
  ExpectCompleted(r);
  ExpectWrmsr(One("kvm [7]: vcpu1 svm_set_msr: MSR_IA32_DEBUGCTL 0x2, nop"), 7,
              1, 0x1d9, 2);
  ExpectWrmsr(One("kvm [7]: vcpu1, guest rIP: 0x5 vmx_set_msr: BTF|LBR in "
                  "IA32_DEBUGCTLMSR 0x3, nop"),
              7, 1, 0x1d9, 3);
}

TEST(KvmImportTest, OldPrUnimplForm) {
  v1::TrapRecord r = One("kvm: 4321: cpu1 unhandled rdmsr: 0xc0010112");
  ExpectRdmsr(r, 4321, 1, 0xc0010112);
  ExpectGp(r);
}

TEST(KvmImportTest, IllumosPort) {
  v1::TrapRecord w = One(
      "Jan 12 10:11:12 smartos kvm: [ID 630174 kern.notice] unhandled wrmsr: "
      "0xc0010117 data 1f");
  ExpectWrmsr(w, 0, 0, 0xc0010117, 0x1f);
  ExpectGp(w);
  ExpectGp(
      One("Jan 12 10:11:12 smartos kvm: [ID 630174 kern.notice] "
          "unhandled rdmsr: 0xce"));
}

TEST(KvmImportTest, RateLimitAndOtherLinesAreSkipped) {
  Imported got = Import(
      "[  882.587879] vfio-pci 0000:00:02.0: ready 1023ms after FLR\n"
      "[  900.000000] kvm_set_msr_common: 12 callbacks suppressed\n"
      "[  900.000001] __kvm_set_msr: 5 callbacks suppressed\n"
      "\n"
      "   \n"
      "# a comment: kvm [1]: ignored rdmsr: 0xMSR\n");
  EXPECT_EQ(got.stats.lines, 6);
  EXPECT_EQ(got.stats.skipped, 6);
  EXPECT_EQ(got.stats.traps, 0);
  EXPECT_EQ(got.stats.malformed, 0);
}

TEST(KvmImportTest, MalformedLinesAreReportedWithLineNumbers) {
  Imported got = Import(
      "kvm [1]: vcpu0, guest rIP: 0x1 ignored rdmsr: 0x10\n"
      "kvm [1]: vcpu0, guest rIP: 0x1 ignored rdmsr: 0xZZ\n"
      "kvm [1]: vcpu0 unhandled wrmsr: 0x10\n"
      "kvm [1]: vcpu0 Unhandled WRMSR(0x10 = 0x1\n"
      "kvm [1]: vcpu0 ignored wrmsr: 0x123456789 data 0x1\n"
      "kvm [1]: vcpu0 ignored wrmsr: 0x10 data 0x1\n");
  EXPECT_EQ(got.stats.traps, 2);
  EXPECT_EQ(got.stats.malformed, 4);
  ASSERT_EQ(got.stats.malformed_lines.size(), 4u);
  EXPECT_EQ(got.stats.malformed_lines[0].line, 2);
  EXPECT_EQ(got.stats.malformed_lines[0].reason,
            "kvm-dmesg: ignored rdmsr: missing or invalid MSR index");
  EXPECT_EQ(got.stats.malformed_lines[1].line, 3);
  EXPECT_EQ(got.stats.malformed_lines[1].reason,
            "kvm-dmesg: unhandled wrmsr: missing the data value");
  EXPECT_EQ(got.stats.malformed_lines[2].line, 4);
  EXPECT_EQ(got.stats.malformed_lines[2].reason,
            "kvm-dmesg: Unhandled WRMSR: expected ')' after the MSR index");
  EXPECT_EQ(got.stats.malformed_lines[3].line, 5);
  EXPECT_EQ(got.records[1].source(), "test.log:6");
}

TEST(KvmImportTest, MalformedDetailsAreCappedButCounted) {
  std::string text;
  for (int i = 0; i < 150; ++i) text += "kvm [1]: ignored rdmsr: nope\n";
  Imported got = Import(text);
  EXPECT_EQ(got.stats.malformed, 150);
  EXPECT_EQ(got.stats.malformed_lines.size(), kMaxMalformedReported);
  EXPECT_EQ(got.stats.malformed_lines.back().line, 100);
}

}  // namespace
}  // namespace pvemu::traplog
