// The ftrace importer on hand-written traces: kvm_msr, kvm_cpuid and kvm_pio
// events, the vCPU and RIP kvm_exit gives them, and perf script text.
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

}  // namespace
}  // namespace pvemu::traplog
