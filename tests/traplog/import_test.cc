// Importers on hand-written lines: every format variant the kernel and Xen
// have printed, the prefixes log tools add, and hostile input.
#include "traplog/import.h"

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace pvemu::traplog {
namespace {

namespace v1 = ::pvemu::v1;
using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Imported {
  ImportStats stats;
  std::vector<v1::TrapRecord> records;
};

Imported Import(absl::string_view text, absl::string_view format = "auto") {
  Imported out;
  std::istringstream in{std::string(text)};
  absl::StatusOr<ImportStats> stats =
      ImportLog(format, in, "test.log", [&](v1::TrapRecord&& r) {
        out.records.push_back(std::move(r));
        return absl::OkStatus();
      });
  EXPECT_THAT(stats, IsOk());
  if (stats.ok()) out.stats = *stats;
  EXPECT_EQ(out.stats.lines,
            out.stats.traps + out.stats.skipped + out.stats.malformed);
  EXPECT_EQ(out.stats.traps, static_cast<int64_t>(out.records.size()));
  return out;
}

// One line that must give exactly one record.
v1::TrapRecord One(absl::string_view line, absl::string_view format = "auto") {
  Imported got = Import(line, format);
  EXPECT_EQ(got.records.size(), 1u) << line;
  EXPECT_EQ(got.stats.malformed, 0) << line;
  if (got.records.empty()) return v1::TrapRecord();
  return got.records[0];
}

const std::string kRdmsr("\x0f\x32", 2);
const std::string kWrmsr("\x0f\x30", 2);
const std::string kCpuid("\x0f\xa2", 2);

void ExpectRdmsr(const v1::TrapRecord& r, uint32_t domain, uint32_t vcpu,
                 uint32_t msr) {
  EXPECT_EQ(r.trap().insn(), kRdmsr);
  EXPECT_EQ(r.trap().domain(), domain);
  EXPECT_EQ(r.trap().vcpu(), vcpu);
  EXPECT_EQ(r.trap().regs().rcx(), msr);
  EXPECT_EQ(r.trap().mode(), v1::MODE_64);
  EXPECT_EQ(r.trap().cpl(), 0u);
}

void ExpectWrmsr(const v1::TrapRecord& r, uint32_t domain, uint32_t vcpu,
                 uint32_t msr, uint64_t value) {
  EXPECT_EQ(r.trap().insn(), kWrmsr);
  EXPECT_EQ(r.trap().domain(), domain);
  EXPECT_EQ(r.trap().vcpu(), vcpu);
  EXPECT_EQ(r.trap().regs().rcx(), msr);
  EXPECT_EQ(r.trap().regs().rax(), value & 0xffffffffu);
  EXPECT_EQ(r.trap().regs().rdx(), value >> 32);
}

void ExpectGp(const v1::TrapRecord& r) {
  EXPECT_EQ(r.expect().kind(), v1::Outcome::EXCEPTION) << r.note();
  EXPECT_TRUE(r.expect().has_vector());
  EXPECT_EQ(r.expect().vector(), v1::GP);
  EXPECT_FALSE(r.expect().has_value());
}

void ExpectCompleted(const v1::TrapRecord& r) {
  EXPECT_EQ(r.expect().kind(), v1::Outcome::COMPLETED) << r.note();
  EXPECT_FALSE(r.expect().has_vector());
}

void ExpectReadValue(const v1::TrapRecord& r, uint64_t value) {
  ExpectCompleted(r);
  ASSERT_TRUE(r.expect().has_value()) << r.note();
  EXPECT_EQ(r.expect().value(), value);
}

// ---------------------------------------------------------------------------
// KVM

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

// ---------------------------------------------------------------------------
// Xen

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

// ---------------------------------------------------------------------------
// ftrace

TEST(FtraceImportTest, ExitGivesVcpuAndRip) {
  Imported got = Import(
      " qemu-system-x86-8397    [002] d....  1404.389509: kvm_exit: vcpu 1 "
      "reason "
      "MSR_READ rip 0xffffffff81000130 info1 0x0000000000000000 info2 "
      "0x0000000000000000 intr_info 0x00000000 error_code 0x00000000\n"
      " qemu-system-x86-8397    [002] .....  1404.389509: kvm_msr: msr_read "
      "c0000080 = 0xd01\n"
      " qemu-system-x86-8397    [002] d....  1404.389510: kvm_entry: vcpu 1, "
      "rip "
      "0xffffffff81000132\n");
  ASSERT_EQ(got.records.size(), 1u);
  const v1::TrapRecord& r = got.records[0];
  ExpectRdmsr(r, 8397, 1, 0xc0000080);
  EXPECT_EQ(r.trap().regs().rip(), 0xffffffff81000130ull);
  ExpectReadValue(r, 0xd01);
  EXPECT_EQ(r.source(), "test.log:2");
  EXPECT_EQ(got.stats.skipped, 2);
  EXPECT_EQ(got.stats.by_format.at("ftrace"), 1);
}

TEST(FtraceImportTest, WriteAndGp) {
  v1::TrapRecord r =
      One("CPU 0/KVM-2345  [003]  5678.901234: kvm_msr:              msr_write "
          "1b0 = "
          "0x6 (#GP)");
  ExpectWrmsr(r, 2345, 0, 0x1b0, 6);
  ExpectGp(r);
  v1::TrapRecord w =
      One("CPU 3/KVM-2345  [003] .N..  5678.901234: kvm_msr: msr_write "
          "c0000103 = 0x1");
  ExpectWrmsr(w, 2345, 3, 0xc0000103, 1);
  ExpectCompleted(w);
  ExpectGp(One("CPU 3/KVM-2345 [003] 5.5: kvm_msr: msr_read 1b0 = 0x0 (#GP)"));
}

TEST(FtraceImportTest, PerfScriptAndOldCpuid) {
  v1::TrapRecord r = One(
      "CPU 1/KVM  2345 [003]  5678.901234: kvm:kvm_cpuid: func 1 rax 306a9 rbx "
      "2100800 rcx 7fbae3ff rdx bfebfbff");
  EXPECT_EQ(r.trap().insn(), kCpuid);
  EXPECT_EQ(r.trap().domain(), 2345u);
  EXPECT_EQ(r.trap().vcpu(), 1u);
  EXPECT_EQ(r.trap().regs().rax(), 1u);
  EXPECT_EQ(r.trap().regs().rcx(), 0u);
  ExpectCompleted(r);
  ASSERT_TRUE(r.expect().has_cpuid());
  EXPECT_EQ(r.expect().cpuid().eax(), 0x306a9u);
  EXPECT_EQ(r.expect().cpuid().ebx(), 0x2100800u);
  EXPECT_EQ(r.expect().cpuid().ecx(), 0x7fbae3ffu);
  EXPECT_EQ(r.expect().cpuid().edx(), 0xbfebfbffu);
  // perf "PID/TID".
  EXPECT_EQ(One("qemu-kvm 2300/2347 [001] 1.0: kvm:kvm_msr: msr_read 10 = 0x1")
                .trap()
                .domain(),
            2300u);
}

TEST(FtraceImportTest, NewerCpuidSuffixes) {
  v1::TrapRecord r = One(
      "CPU 0/KVM-9 [000] ..... 1.0: kvm_cpuid: func 7 idx 1 rax 0 rbx 0 rcx 0 "
      "rdx 0, cpuid entry not found, used max basic");
  EXPECT_EQ(r.trap().regs().rax(), 7u);
  EXPECT_EQ(r.trap().regs().rcx(), 1u);
  EXPECT_TRUE(r.expect().has_cpuid());
}

TEST(FtraceImportTest, RecordTgidGivesTheProcess) {
  v1::TrapRecord r =
      One(" CPU 2/KVM-2347  (   2300) [001] d..1.  1.000: kvm_msr: msr_read 10 "
          "= 0x123");
  ExpectRdmsr(r, 2300, 2, 0x10);
  ExpectReadValue(r, 0x123);
}

TEST(FtraceImportTest, AmdExitReasonsAndMismatches) {
  Imported got = Import(
      "CPU 0/KVM-5 [000] d.... 1.0: kvm_exit: vcpu 3 reason msr rip "
      "0xffffffff81070a14 info1 0x0000000000000001 info2 0x0 intr_info 0x0 "
      "error_code 0x0\n"
      "CPU 0/KVM-5 [000] ..... 1.1: kvm_msr: msr_write 38f = 0x70000000f\n"
      // An exit for CPUID does not explain a following MSR event.
      "CPU 0/KVM-5 [000] d.... 1.2: kvm_exit: vcpu 3 reason cpuid rip 0x1234 "
      "info1 0x0 info2 0x0\n"
      "CPU 0/KVM-5 [000] ..... 1.3: kvm_msr: msr_read 10 = 0x5\n"
      // Old kvm_exit without a vcpu field; another task's exit is not ours.
      "CPU 1/KVM-6 [001] d... 1.4: kvm_exit: reason CPUID rip 0xabc info 0 0\n"
      "CPU 0/KVM-5 [000] .... 1.5: kvm_cpuid: func 0 idx 0 rax d rbx 756e6547 "
      "rcx 6c65746e rdx 49656e69, cpuid entry found\n"
      "CPU 1/KVM-6 [001] .... 1.6: kvm_cpuid: func 0 rax d rbx 756e6547 rcx "
      "6c65746e rdx 49656e69\n");
  ASSERT_EQ(got.records.size(), 4u);
  ExpectWrmsr(got.records[0], 5, 3, 0x38f, 0x70000000full);
  EXPECT_EQ(got.records[0].trap().regs().rip(), 0xffffffff81070a14ull);
  ExpectRdmsr(got.records[1], 5, 3, 0x10);
  EXPECT_EQ(got.records[1].trap().regs().rip(), 0u);
  EXPECT_EQ(got.records[2].trap().vcpu(), 3u);
  EXPECT_EQ(got.records[2].trap().regs().rip(), 0u);
  EXPECT_EQ(got.records[3].trap().vcpu(), 1u);  // from "CPU 1/KVM"
  EXPECT_EQ(got.records[3].trap().regs().rip(), 0xabcu);
}

TEST(FtraceImportTest, HeadersSkippedMalformedReported) {
  Imported got = Import(
      "# tracer: nop\n"
      "#\n"
      "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n"
      "cpus=4\n"
      "CPU 0/KVM-5 [000] ..... 1.3: kvm_msr: msr_read zz = 0x5\n"
      "CPU 0/KVM-5 [000] ..... 1.3: kvm_msr: msr_poke 10 = 0x5\n"
      "CPU 0/KVM-5 [000] ..... 1.3: kvm_msr: msr_read 10\n"
      "CPU 0/KVM-5 [000] ..... 1.3: kvm_cpuid: func 1 rax 1\n",
      "ftrace");
  EXPECT_EQ(got.stats.traps, 0);
  EXPECT_EQ(got.stats.skipped, 4);
  ASSERT_EQ(got.stats.malformed_lines.size(), 4u);
  EXPECT_EQ(got.stats.malformed_lines[0].line, 5);
  EXPECT_EQ(got.stats.malformed_lines[0].reason,
            "ftrace: kvm_msr: missing or invalid MSR index");
  EXPECT_EQ(got.stats.malformed_lines[1].reason,
            "ftrace: kvm_msr: expected msr_read or msr_write");
  EXPECT_EQ(got.stats.malformed_lines[2].reason,
            "ftrace: kvm_msr: missing \"= 0xVALUE\"");
  EXPECT_EQ(got.stats.malformed_lines[3].reason,
            "ftrace: kvm_cpuid: missing one of rax/rbx/rcx/rdx");
}

TEST(FtraceImportTest, PortIo) {
  Imported got = Import(
      "CPU 0/KVM-5 [000] d.... 1.0: kvm_exit: vcpu 0 reason IO_INSTRUCTION rip "
      "0xffffffff8100abcd info1 0x0000000000700048 info2 0x0 intr_info 0x0 "
      "error_code 0x0\n"
      "CPU 0/KVM-5 [000] ..... 1.1: kvm_pio: pio_read at 0x71 size 1 count 1 "
      "val 0x26 \n"
      "CPU 0/KVM-5 [000] ..... 1.2: kvm_pio: pio_write at 0xcf8 size 4 count 1 "
      "val 0x80000000 \n"
      "CPU 0/KVM-5 [000] ..... 1.3: kvm_pio: pio_read at 0x1f0 size 2 count "
      "256 val 0x0 (...)\n"
      "CPU 0/KVM-5 [000] ..... 1.4: kvm_pio: pio_read at 0x60 size 2 count 1\n"
      "CPU 0/KVM-5 [000] ..... 1.5: kvm_pio: pio_read at 0x60 size 3 count 1 "
      "val 0x0\n");
  ASSERT_EQ(got.records.size(), 3u);
  EXPECT_EQ(got.stats.skipped, 2);  // the exit and the string operation
  EXPECT_EQ(got.stats.malformed, 1);
  const v1::TrapRecord& in = got.records[0];
  EXPECT_EQ(in.trap().insn(), "\xec");
  EXPECT_EQ(in.trap().regs().rdx(), 0x71u);
  EXPECT_EQ(in.trap().regs().rip(), 0xffffffff8100abcdull);
  ExpectReadValue(in, 0x26);
  const v1::TrapRecord& out = got.records[1];
  EXPECT_EQ(out.trap().insn(), "\xef");
  EXPECT_EQ(out.trap().regs().rdx(), 0xcf8u);
  EXPECT_EQ(out.trap().regs().rax(), 0x80000000u);
  ExpectCompleted(out);
  EXPECT_FALSE(out.expect().has_value());
  const v1::TrapRecord& old = got.records[2];  // no val: nothing to compare
  EXPECT_EQ(old.trap().insn(), "\x66\xed");
  ExpectCompleted(old);
  EXPECT_FALSE(old.expect().has_value());
}

// ---------------------------------------------------------------------------
// The driver

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
