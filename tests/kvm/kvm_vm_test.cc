// The kvm suite: our own guests (tests/kvm/guests/*.S)
// run under the reference runner pvemu-vm with test policies
// (tests/kvm/policies/). Each test checks what the guest itself saw, as it
// printed it on the console, and the runner's JSON summary (`-o json`, the
// last line of stdout), whose exit counters prove what left the kernel.
//
// Where /dev/kvm is missing the tests say why and skip; where it exists, a
// test that cannot run fails. run-kvm-suite.sh runs this binary inside a
// QEMU guest with nested KVM when this machine has no /dev/kvm.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/textproto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pvemu/v1/host.pb.h"
#include "tests/kvm/kvm_test_util.h"
#include "x86/msr_catalog.h"

namespace pvemu::testing {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

// The domain every test runs as; msr-actions.textproto has a layer for it.
constexpr int kDomain = 1;

std::string Hex64(uint64_t value) { return absl::StrFormat("0x%016x", value); }


v1::HostProfile DefaultSimProfile() {
  v1::HostProfile profile;
  absl::Status status = ParseTextProtoFile(DefaultSimProfilePath(), &profile);
  EXPECT_TRUE(status.ok()) << status;
  return profile;
}

// The sim profile's value of `name`, the index the guest uses for it checked
// against the catalog so the two cannot drift apart.
uint64_t SimMsrValue(const std::string& name, uint32_t index_in_guest) {
  absl::StatusOr<uint32_t> index = x86::ParseMsr(name);
  EXPECT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index.value_or(0), index_in_guest) << name;
  v1::HostProfile profile = DefaultSimProfile();
  for (const auto& msr : profile.msr()) {
    if (msr.msr() == name) return msr.value();
  }
  ADD_FAILURE() << name << " is not in " << DefaultSimProfilePath();
  return 0;
}

class KvmVmTest : public ::testing::Test {
 protected:
  void SetUp() override { PVEMU_REQUIRE_KVM(); }
};

// ---------------------------------------------------------------------------
// The runner's contract (section 4): entry state, output, ending.

using KvmRunnerTest = KvmVmTest;

TEST_F(KvmRunnerTest, EveryVcpuEntersLongModeWithTheContractsRegistersAndSegments) {
  int vcpus = std::min(KvmRecommendedVcpus(), 2);
  ASSERT_GE(vcpus, 1);
  const VmRun& run = CachedRun(VmArgs("entry_state", "minimal", {absl::StrCat("--vcpus=", vcpus)}));
  ASSERT_CLEAN_RUN(run);
  for (int i = 0; i < vcpus; ++i) {
    SCOPED_TRACE(absl::StrCat("vCPU ", i));
    std::string cpu = absl::StrCat("cpu", i, ": ");
    // RSP = top of RAM (64 MiB by default) minus index x 64 KiB.
    EXPECT_THAT(run.lines, Contains(absl::StrFormat("%srdi 0x%x rsi 0x%x rsp 0x%x", cpu, i, vcpus,
                                                    (64 << 20) - i * (64 << 10))))
        << run.Describe();
    EXPECT_THAT(run.lines, Contains(cpu + "other gprs or 0x0 rflags 0x2 idt limit 0x0"))
        << run.Describe();
    EXPECT_THAT(run.lines, Contains(MatchesRegex(cpu + "cr0.pe\\|pg 0x80000001 cr4.pae 0x20 "
                                                       "efer.lme\\|lma 0x500 cr3 0x[0-9a-f]{1,5}")))
        << "CR3 must be below 0x100000" << run.Describe();
    EXPECT_THAT(run.lines, Contains(cpu + "cs 0x8 ds 0x10 es 0x10 ss 0x10 fs 0x10 gs 0x10"))
        << run.Describe();
    EXPECT_THAT(run.lines, Contains(cpu + "image at 0x100000")) << run.Describe();
  }
  EXPECT_EQ(Count(run, kExits, "hlt"), static_cast<uint64_t>(vcpus)) << run.Describe();
}

TEST_F(KvmRunnerTest, StdoutHoldsOnlyTheConsoleThenTheSummaryWithTheContractsKeys) {
  const VmRun& run = CachedRun(VmArgs("entry_state", "minimal", {"--vcpus=1"}));
  ASSERT_CLEAN_RUN(run);
  for (const std::string& line : run.lines) EXPECT_THAT(line, StartsWith("cpu0: "));
  EXPECT_EQ(run.Number({"exit_status"}), 0.0) << run.Describe();
  for (const char* key : {"rdmsr", "wrmsr", "io", "hlt"}) {
    EXPECT_TRUE(run.Number({kExits, key}).has_value()) << key << run.Describe();
  }
  for (const char* key : {kCompleted, kException, kDevice}) {
    EXPECT_TRUE(run.Number({kOutcomes, key}).has_value()) << key << run.Describe();
  }
  EXPECT_TRUE(run.Number({"pvemu_ns_per_exit"}).has_value()) << run.Describe();
  // Each console byte is one OUT to 0x3f8: one I/O exit, for the device.
  EXPECT_EQ(Count(run, kExits, "io"), run.console.size()) << run.Describe();
  EXPECT_EQ(Count(run, kOutcomes, kDevice), run.console.size()) << run.Describe();
}

TEST_F(KvmRunnerTest, WithoutJsonStdoutIsTheConsoleAloneAndStatsGoToStderr) {
  std::vector<std::string> argv = {PvemuVmPath(), absl::StrCat("--domain=", kDomain),
                                   "--policy=" + TestPolicyPath("minimal"), "--stats",
                                   GuestPath("entry_state")};
  VmRun run = RunVmCommand(argv, /*json=*/false);
  ASSERT_EQ(run.status, 0) << run.Describe();
  EXPECT_THAT(run.console, Not(HasSubstr("{"))) << run.Describe();
  for (const std::string& line : run.lines) EXPECT_THAT(line, StartsWith("cpu0: "));
  EXPECT_THAT(run.stderr_text, AllOf(HasSubstr("rdmsr"), HasSubstr("wrmsr"), HasSubstr("hlt")))
      << run.Describe();
}

TEST_F(KvmRunnerTest, OutToPortF4EndsTheRunWithTheValuesLowByte) {
  const VmRun& run = CachedRun(VmArgs("exit_status", "minimal"));
  EXPECT_EQ(run.status, 0x34) << run.Describe();
  EXPECT_THAT(run.lines, ElementsAre("cpu0: exiting with 0x1234")) << run.Describe();
  EXPECT_EQ(run.Number({"exit_status"}), 0x34) << run.Describe();
}

TEST_F(KvmRunnerTest, TimeoutEndsAGuestThatNeverStopsWithStatus124) {
  VmRun run = RunVmCommand({PvemuVmPath(), absl::StrCat("--domain=", kDomain),
                            "--policy=" + TestPolicyPath("minimal"), "--timeout=2",
                            GuestPath("spin")},
                           /*json=*/false);
  EXPECT_EQ(run.status, 124) << run.Describe();
  EXPECT_FALSE(run.timed_out) << run.Describe();
  EXPECT_THAT(run.lines, ElementsAre("cpu0: spinning")) << run.Describe();
  EXPECT_THAT(absl::AsciiStrToLower(run.stderr_text), HasSubstr("timeout")) << run.Describe();
  EXPECT_LT(run.elapsed, std::chrono::seconds(30)) << run.Describe();
}

TEST_F(KvmRunnerTest, TripleFaultEndsTheRunWithStatus3NamingTheExitAndRip) {
  const VmRun& run = CachedRun(VmArgs("triple_fault", "minimal"));
  EXPECT_EQ(run.status, 3) << run.Describe();
  // On SVM, KVM resets the vCPU on a shutdown, so the RIP the runner can name
  // is the reset vector's (it says so), not the UD2's at 0x100000.
  EXPECT_THAT(absl::AsciiStrToLower(run.stderr_text),
              AllOf(HasSubstr("shutdown"), ContainsRegex("rip[ =:]*0x[0-9a-f]+")))
      << run.Describe();
}

// ---------------------------------------------------------------------------
// Every action (msr_actions.S under msr-actions.textproto).

class KvmMsrActionTest : public KvmVmTest {
 protected:
  const VmRun& Run() { return CachedRun(VmArgs("msr_actions", "msr-actions")); }
};

TEST_F(KvmMsrActionTest, PassthroughReadsTheSimProfilesValue) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  uint64_t platform_info = SimMsrValue("MSR_PLATFORM_INFO", 0xce);
  EXPECT_THAT(run.lines, Contains("cpu0: rdmsr 0xce = " + Hex64(platform_info))) << run.Describe();
}

TEST_F(KvmMsrActionTest, ConstReadsTheRulesValue) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, Contains("cpu0: rdmsr 0x12345600 = 0x0123456789abcdef")) << run.Describe();
}

TEST_F(KvmMsrActionTest, ZeroReadsZero) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, Contains("cpu0: rdmsr 0x12345601 = 0x0000000000000000")) << run.Describe();
}

TEST_F(KvmMsrActionTest, GpFaultsReadsAndWritesAndTheGuestsHandlerCountsEachFault) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, IsSupersetOf({
                             "cpu0: wrmsr 0x12345600 <- 0x0000000000000001 #GP",
                             "cpu0: rdmsr 0x12345602 #GP",
                             "cpu0: wrmsr 0x12345602 <- 0x0000000000000001 #GP",
                         }))
      << run.Describe();
  // Those three and the reserved-bit write below; no other access faulted.
  EXPECT_THAT(run.lines, Contains("cpu0: gp 4")) << run.Describe();
  EXPECT_EQ(Count(run, kOutcomes, kException), 4u) << run.Describe();
}

// The summary's MSR rows (pvemu_kvm_msr_counts): one per (MSR, access,
// action), as `pvemuctl stats --msrs` counts them, exactly what the guest did.
TEST_F(KvmMsrActionTest, TheSummaryHasOneRowPerMsrAccessAndAction) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  for (const char* row : {
           R"({"msr":"0xce","access":"read","action":"PASSTHROUGH","count":1})",
           R"({"msr":"0x12345600","access":"write","action":"GP","count":1})",
           R"({"msr":"0x12345602","access":"read","action":"GP","count":1})",
           R"({"msr":"0x12345605","access":"write","action":"SHADOW","count":2})",
           R"({"msr":"0x1b0","access":"read","action":"SHADOW","count":2})",
       }) {
    EXPECT_THAT(run.summary_line, HasSubstr(row)) << run.Describe();
  }
}

TEST_F(KvmMsrActionTest, IgnoreCompletesTheWriteAndKeepsTheValue) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, IsSupersetOf({"cpu0: wrmsr 0x12345603 <- 0x0000000000000077 ok",
                                       "cpu0: rdmsr 0x12345603 = 0x0000000000000005"}))
      << run.Describe();
}

TEST_F(KvmMsrActionTest, ShadowReadsBackTheWrite) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, IsSupersetOf({"cpu0: wrmsr 0x12345604 <- 0xfeedfacecafef00d ok",
                                       "cpu0: rdmsr 0x12345604 = 0xfeedfacecafef00d"}))
      << run.Describe();
}

TEST_F(KvmMsrActionTest, ShadowWithoutAValueStartsFromTheSimProfilesValue) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  uint64_t energy_perf_bias = SimMsrValue("IA32_ENERGY_PERF_BIAS", 0x1b0);
  EXPECT_THAT(run.lines, IsSupersetOf(std::vector<std::string>{
                             "cpu0: rdmsr 0x1b0 = " + Hex64(energy_perf_bias),
                             "cpu0: wrmsr 0x1b0 <- 0x0000000000000001 ok",
                             "cpu0: rdmsr 0x1b0 = 0x0000000000000001"}))
      << run.Describe();
}

TEST_F(KvmMsrActionTest, AWriteChangingABitOutsideWritableMaskFaultsAndChangesNothing) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, IsSupersetOf({"cpu0: wrmsr 0x12345605 <- 0x000000000000ff42 ok",
                                       "cpu0: wrmsr 0x12345605 <- 0x0000000000000042 #GP",
                                       "cpu0: rdmsr 0x12345605 = 0x000000000000ff42"}))
      << run.Describe();
}

TEST_F(KvmMsrActionTest, WithReservedDropSuchAWriteCompletesAndIsDropped) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, IsSupersetOf({"cpu0: wrmsr 0x12345606 <- 0x000000000001ff42 ok",
                                       "cpu0: rdmsr 0x12345606 = 0x000000000000ff00"}))
      << run.Describe();
}

TEST_F(KvmMsrActionTest, EachAccessToANamedMsrIsOneUserSpaceExit) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  // msr_actions.S makes 10 RDMSRs and 8 WRMSRs, all of named MSRs.
  EXPECT_EQ(Count(run, kExits, "rdmsr"), 10u) << run.Describe();
  EXPECT_EQ(Count(run, kExits, "wrmsr"), 8u) << run.Describe();
  EXPECT_EQ(Count(run, kOutcomes, kCompleted), 18u - 4u) << run.Describe();
  EXPECT_EQ(Count(run, kExits, "hlt"), 1u) << run.Describe();
  EXPECT_GT(run.Number({"pvemu_ns_per_exit"}).value_or(0), 0) << run.Describe();
}

// SHADOW is per vCPU: shadow_per_vcpu.S on two vCPUs, turn by turn.
TEST_F(KvmVmTest, ShadowIsPerVcpuSoAWriteOnVcpu0IsNotSeenByVcpu1) {
  ASSERT_GE(KvmRecommendedVcpus(), 2)
      << "this test needs 2 vCPUs and KVM_CAP_NR_VCPUS is " << KvmRecommendedVcpus()
      << " here (run-kvm-suite.sh gives the nested guest 2 CPUs)";
  const VmRun& run = CachedRun(VmArgs("shadow_per_vcpu", "msr-actions", {"--vcpus=2"}));
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, ElementsAre("cpu0: rdmsr 0x12345607 = 0x0000000000000005",
                                     "cpu0: wrmsr 0x12345607 <- 0x0000000000001111 ok",
                                     "cpu0: rdmsr 0x12345607 = 0x0000000000001111",
                                     "cpu1: rdmsr 0x12345607 = 0x0000000000000005",
                                     "cpu1: wrmsr 0x12345607 <- 0x0000000000002222 ok",
                                     "cpu1: rdmsr 0x12345607 = 0x0000000000002222",
                                     "cpu1: gp 0",
                                     "cpu0: rdmsr 0x12345607 = 0x0000000000001111",
                                     "cpu0: gp 0"))
      << run.Describe();
  EXPECT_EQ(Count(run, kExits, "rdmsr"), 5u) << run.Describe();
  EXPECT_EQ(Count(run, kExits, "wrmsr"), 2u) << run.Describe();
  EXPECT_EQ(Count(run, kExits, "hlt"), 2u) << run.Describe();
}

// ---------------------------------------------------------------------------
// Unknown MSRs (unknown_msr.S): 0x87654321 is unnamed and unknown to KVM.

using KvmUnknownMsrTest = KvmVmTest;

TEST_F(KvmUnknownMsrTest, InGpModeReadsAndWritesFault) {
  const VmRun& run = CachedRun(VmArgs("unknown_msr", "unknown-gp"));
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, IsSupersetOf({"cpu0: rdmsr 0x87654321 #GP",
                                       "cpu0: wrmsr 0x87654321 <- 0x0000000000000001 #GP",
                                       "cpu0: gp 3"}))
      << run.Describe();
}

TEST_F(KvmUnknownMsrTest, InRelaxedModeReadsAreZeroAndWritesComplete) {
  const VmRun& run = CachedRun(VmArgs("unknown_msr", "unknown-relaxed"));
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, IsSupersetOf({"cpu0: rdmsr 0x87654321 = 0x0000000000000000",
                                       "cpu0: wrmsr 0x87654321 <- 0x0000000000000001 ok",
                                       "cpu0: gp 1"}))
      << run.Describe();
}

TEST_F(KvmUnknownMsrTest, AValueKvmRejectsFaultsInBothModes) {
  for (const char* policy : {"unknown-gp", "unknown-relaxed"}) {
    SCOPED_TRACE(policy);
    const VmRun& run = CachedRun(VmArgs("unknown_msr", policy));
    ASSERT_CLEAN_RUN(run);
    // EFER with reserved bit 63: KVM's INVAL exit, #GP whatever unknown_msr says.
    EXPECT_THAT(run.lines,
                Contains(MatchesRegex("cpu0: wrmsr 0xc0000080 <- 0x8[0-9a-f]{15} #GP")))
        << run.Describe();
    // The EFER read stayed with KVM: one RDMSR exit, two WRMSR exits.
    EXPECT_EQ(Count(run, kExits, "rdmsr"), 1u) << run.Describe();
    EXPECT_EQ(Count(run, kExits, "wrmsr"), 2u) << run.Describe();
  }
}

// ---------------------------------------------------------------------------
// What stays with KVM costs no exit (msr_in_kernel.S).

TEST_F(KvmVmTest, UnnamedMsrsKvmEmulatesMakeNoUserSpaceExit) {
  const VmRun& run = CachedRun(VmArgs("msr_in_kernel", "in-kernel"));
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, ElementsAre("cpu0: read 0x10 and 0x1b 1000 times, tsc advanced yes",
                                     "cpu0: gp 0", "cpu0: rdmsr 0x12345600 = 0x0000000000000005"))
      << run.Describe();
  // 2002 RDMSRs of IA32_TSC and IA32_APIC_BASE, none named: only the one
  // read of the named MSR left the kernel.
  EXPECT_EQ(Count(run, kExits, "rdmsr"), 1u) << run.Describe();
  EXPECT_EQ(Count(run, kExits, "wrmsr"), 0u) << run.Describe();
}

// KVM's filter limit: 16 ranges. MSRs too far apart to share one each take
// a range; 16 fit, and each still exits (filter_16_ranges.S).
TEST_F(KvmVmTest, SixteenFilterRangesFitAndEveryNamedMsrInThemExits) {
  const VmRun& run = CachedRun(VmArgs("filter_16_ranges", "filter-16-ranges"));
  ASSERT_CLEAN_RUN(run);
  std::vector<std::string> expected;
  for (uint32_t k = 1; k <= 16; ++k) {
    expected.push_back(absl::StrFormat("cpu0: rdmsr 0x%x = %s", k * 0x0f000000u + 0x10, Hex64(k)));
  }
  expected.push_back("cpu0: gp 0");
  EXPECT_THAT(run.lines, ::testing::ElementsAreArray(expected)) << run.Describe();
  EXPECT_EQ(Count(run, kExits, "rdmsr"), 16u) << run.Describe();
}

// ---------------------------------------------------------------------------
// Ports (ports.S): 13 accesses, 12 at 0x510-0x513 or 0x70, 1 at 0x80.

class KvmPortTest : public KvmVmTest {
 protected:
  static constexpr uint64_t kAccesses = 13;
  static constexpr uint64_t kAccessesToGrantablePorts = 12;
};

TEST_F(KvmPortTest, ScratchRegisterIsReadableAndWritableWhenGranted) {
  const VmRun& run = CachedRun(VmArgs("ports", "ports-allowed"));
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, ElementsAre("cpu0: in32 0x510 = 0x00000000",
                                     "cpu0: out32 0x510 <- 0x12345678",
                                     "cpu0: in32 0x510 = 0x12345678",
                                     "cpu0: out8 0x510 <- 0xab",
                                     "cpu0: in32 0x510 = 0x123456ab",
                                     "cpu0: out16 0x510 <- 0xcdef",
                                     "cpu0: in32 0x510 = 0x1234cdef",
                                     "cpu0: in8 0x510 = 0xef",
                                     "cpu0: in16 0x510 = 0xcdef",
                                     "cpu0: in8 0x512 = 0xff",
                                     "cpu0: out8 0x70 <- 0x01",
                                     "cpu0: in8 0x70 = 0xff",
                                     "cpu0: in8 0x80 = 0xff"))
      << run.Describe();
}

TEST_F(KvmPortTest, ScratchRegisterReadsAllOnesAndDropsWritesWhenNotGranted) {
  const VmRun& run = CachedRun(VmArgs("ports", "ports-denied"));
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, ElementsAre("cpu0: in32 0x510 = 0xffffffff",
                                     "cpu0: out32 0x510 <- 0x12345678",
                                     "cpu0: in32 0x510 = 0xffffffff",
                                     "cpu0: out8 0x510 <- 0xab",
                                     "cpu0: in32 0x510 = 0xffffffff",
                                     "cpu0: out16 0x510 <- 0xcdef",
                                     "cpu0: in32 0x510 = 0xffffffff",
                                     "cpu0: in8 0x510 = 0xff",
                                     "cpu0: in16 0x510 = 0xffff",
                                     "cpu0: in8 0x512 = 0xff",
                                     "cpu0: out8 0x70 <- 0x01",
                                     "cpu0: in8 0x70 = 0xff",
                                     "cpu0: in8 0x80 = 0xff"))
      << run.Describe();
}

TEST_F(KvmPortTest, GrantedPortsGoToTheRunnersDevicesAndOthersArePvemus) {
  const VmRun& allowed = CachedRun(VmArgs("ports", "ports-allowed"));
  ASSERT_CLEAN_RUN(allowed);
  const VmRun& denied = CachedRun(VmArgs("ports", "ports-denied"));
  ASSERT_CLEAN_RUN(denied);
  // Every console byte is an OUT to the granted 0x3f8 as well.
  EXPECT_EQ(Count(allowed, kExits, "io"), allowed.console.size() + kAccesses) << allowed.Describe();
  EXPECT_EQ(Count(allowed, kOutcomes, kDevice), allowed.console.size() + kAccessesToGrantablePorts)
      << allowed.Describe();
  EXPECT_EQ(Count(allowed, kOutcomes, kCompleted), kAccesses - kAccessesToGrantablePorts)
      << allowed.Describe();
  EXPECT_EQ(Count(denied, kExits, "io"), denied.console.size() + kAccesses) << denied.Describe();
  EXPECT_EQ(Count(denied, kOutcomes, kDevice), denied.console.size()) << denied.Describe();
  EXPECT_EQ(Count(denied, kOutcomes, kCompleted), kAccesses) << denied.Describe();
}

// ---------------------------------------------------------------------------
// CPUID (cpuid.S under cpuid.textproto).

class KvmCpuidTest : public KvmVmTest {
 protected:
  const VmRun& Run() { return CachedRun(VmArgs("cpuid", "cpuid")); }
};

TEST_F(KvmCpuidTest, GuestVendorSetsLeafZerosVendorString) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  // The sim host is Intel, KVM's own leaf 0 is the real CPU's (Intel or AMD):
  // the policy's guest_vendor is HYGON.
  EXPECT_THAT(run.lines, Contains("cpu0: vendor HygonGenuine")) << run.Describe();
}

TEST_F(KvmCpuidTest, HypervisorLeavesComeFromThePolicy) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines,
              IsSupersetOf({"cpu0: cpuid 0x40000000 = eax 0x40000001 ebx 0x6d657670 "
                            "ecx 0x65742d75 edx 0x21737473",
                            "cpu0: hypervisor pvemu-tests!",
                            "cpu0: cpuid 0x40000001 = eax 0x00c0ffee ebx 0x00000001 "
                            "ecx 0x00000002 edx 0x00000003"}))
      << run.Describe();
}

TEST_F(KvmCpuidTest, AHostLeafIsTheSimProfilesMaskedAsThePolicySays) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  const v1::HostCpuid* leaf = nullptr;
  v1::HostProfile profile = DefaultSimProfile();
  for (const auto& entry : profile.cpuid()) {
    if (entry.leaf() == 0x80000008) leaf = &entry;
  }
  ASSERT_NE(leaf, nullptr) << "no leaf 0x80000008 in " << DefaultSimProfilePath();
  // cpuid.textproto: source HOST, clear { eax: 0xff00 }.
  EXPECT_THAT(run.lines, Contains(absl::StrFormat(
                             "cpu0: cpuid 0x80000008 = eax 0x%08x ebx 0x%08x ecx 0x%08x edx 0x%08x",
                             leaf->regs().eax() & ~0xff00u, leaf->regs().ebx(), leaf->regs().ecx(),
                             leaf->regs().edx())))
      << run.Describe();
}

TEST_F(KvmCpuidTest, CpuidNeverExitsToUserSpace) {
  const VmRun& run = Run();
  ASSERT_CLEAN_RUN(run);
  EXPECT_EQ(Count(run, kExits, "rdmsr"), 0u) << run.Describe();
  EXPECT_EQ(Count(run, kExits, "io"), run.console.size()) << run.Describe();
}

// ---------------------------------------------------------------------------
// The shipped `kvm` preset, by name (kvm_preset.S).

class KvmPresetTest : public KvmVmTest {
 protected:
  std::vector<std::string> PresetArgs(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {PvemuVmPath(), absl::StrCat("--domain=", kDomain),
                                     "--policy=kvm", "--timeout=120", "-o", "json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(GuestPath("kvm_preset"));
    return argv;
  }
};

TEST_F(KvmPresetTest, OnTheIntelSimHostEnergyPerfBiasReadsTheHostAndWritesAreDropped) {
  const VmRun& run = CachedRun(PresetArgs());
  ASSERT_CLEAN_RUN(run);
  std::string energy_perf_bias = Hex64(SimMsrValue("IA32_ENERGY_PERF_BIAS", 0x1b0));
  EXPECT_THAT(run.lines,
              ElementsAre("cpu0: rdmsr 0x1b0 = " + energy_perf_bias,
                          "cpu0: wrmsr 0x1b0 <- 0x0000000000000001 ok",
                          "cpu0: rdmsr 0x1b0 = " + energy_perf_bias,
                          "cpu0: rdmsr 0x19a = " + Hex64(SimMsrValue("IA32_THERM_CONTROL", 0x19a)),
                          // Per-VM ignore_msrs.
                          "cpu0: rdmsr 0x87654321 = 0x0000000000000000",
                          "cpu0: out32 0x510 <- 0x0000cafe", "cpu0: in32 0x510 = 0x0000cafe",
                          "cpu0: gp 0"))
      << run.Describe();
  // EFER, APIC_BASE and the TSC stayed with KVM.
  EXPECT_EQ(Count(run, kExits, "rdmsr"), 4u) << run.Describe();
  EXPECT_EQ(Count(run, kExits, "wrmsr"), 1u) << run.Describe();
}

TEST_F(KvmPresetTest, OnTheAmdSimHostEnergyPerfBiasReadsZeroAndWritesFault) {
  const VmRun& run = CachedRun(PresetArgs({"--host-profile=amd-epyc-7443p"}));
  ASSERT_CLEAN_RUN(run);
  EXPECT_THAT(run.lines, IsSupersetOf({"cpu0: rdmsr 0x1b0 = 0x0000000000000000",
                                       "cpu0: wrmsr 0x1b0 <- 0x0000000000000001 #GP",
                                       "cpu0: rdmsr 0x19a = 0x0000000000000000", "cpu0: gp 1"}))
      << run.Describe();
}

// ---------------------------------------------------------------------------
// Bad input (section 4): a message naming the cause, and exit status 2.

class KvmBadInputTest : public KvmVmTest {
 protected:
  void SetUp() override {
    KvmVmTest::SetUp();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("pvemu-kvm-test.", getpid(), ".", ++counter_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  VmRun RunWith(const std::string& policy_flag, const std::string& image,
                std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {PvemuVmPath(), absl::StrCat("--domain=", kDomain),
                                     policy_flag, "--timeout=60"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(image);
    return RunVmCommand(argv, /*json=*/false);
  }
  VmRun RunPolicy(const std::string& policy_name) {
    return RunWith("--policy=" + TestPolicyPath(policy_name), GuestPath("entry_state"));
  }
  // A file of `size` bytes whose first byte is HLT: a guest that stops at once.
  std::string HaltImage(size_t size) {
    std::string path = dir_ / absl::StrCat("halt-", size, ".bin");
    std::string bytes(size, '\0');
    if (size > 0) bytes[0] = '\xf4';
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::filesystem::path dir_;
  static inline int counter_ = 0;
};

#define EXPECT_BAD_INPUT(run, ...)                                          \
  do {                                                                      \
    EXPECT_EQ((run).status, 2) << (run).Describe();                         \
    EXPECT_THAT((run).stderr_text, AllOf(__VA_ARGS__)) << (run).Describe(); \
    EXPECT_EQ((run).console, "") << "the guest must not start" << (run).Describe(); \
  } while (0)

TEST_F(KvmBadInputTest, MissingImageIsNamed) {
  std::string image = (dir_ / "no-such-image.bin").string();
  VmRun run = RunWith("--policy=" + TestPolicyPath("minimal"), image);
  EXPECT_BAD_INPUT(run, HasSubstr(image));
}

TEST_F(KvmBadInputTest, EmptyImageIsRefused) {
  std::string image = HaltImage(0);
  VmRun run = RunWith("--policy=" + TestPolicyPath("minimal"), image);
  EXPECT_BAD_INPUT(run, HasSubstr(image), HasSubstr("empty"));
}

TEST_F(KvmBadInputTest, ImageFillingRamLessOneMibAndTheStacksRunsAndOneByteMoreIsRefused) {
  // --memory=4, one vCPU: 4 MiB - 1 MiB (below the image) - 64 KiB (its stack).
  constexpr size_t kLargest = (4 << 20) - (1 << 20) - (64 << 10);
  VmRun fits = RunWith("--policy=" + TestPolicyPath("minimal"), HaltImage(kLargest),
                       {"--memory=4", "--vcpus=1"});
  EXPECT_EQ(fits.status, 0) << fits.Describe();
  std::string too_large = HaltImage(kLargest + 1);
  VmRun run = RunWith("--policy=" + TestPolicyPath("minimal"), too_large,
                      {"--memory=4", "--vcpus=1"});
  EXPECT_BAD_INPUT(run, HasSubstr(too_large));
}

TEST_F(KvmBadInputTest, ZeroVcpusIsRefused) {
  VmRun run = RunWith("--policy=" + TestPolicyPath("minimal"), GuestPath("entry_state"),
                      {"--vcpus=0"});
  EXPECT_BAD_INPUT(run, HasSubstr("vcpus"));
}

TEST_F(KvmBadInputTest, MoreVcpusThanKvmRecommendsIsRefused) {
  int most = KvmRecommendedVcpus();
  ASSERT_GE(most, 1);
  // Enough RAM for every stack, so the vCPU count is the only thing wrong.
  int memory_mib = std::max(64, (most + 1) / 16 + 4);
  VmRun run = RunWith("--policy=" + TestPolicyPath("minimal"), GuestPath("entry_state"),
                      {absl::StrCat("--vcpus=", most + 1), absl::StrCat("--memory=", memory_mib)});
  EXPECT_BAD_INPUT(run, HasSubstr("vcpus"), HasSubstr(absl::StrCat(most)));
}

TEST_F(KvmBadInputTest, MissingPolicyFileIsNamed) {
  std::string policy = (dir_ / "no-such-policy.textproto").string();
  VmRun run = RunWith("--policy=" + policy, GuestPath("entry_state"));
  EXPECT_BAD_INPUT(run, HasSubstr(policy));
}

TEST_F(KvmBadInputTest, PolicyThatDoesNotParseIsNamedWithItsLine) {
  VmRun run = RunPolicy("invalid-syntax");
  EXPECT_BAD_INPUT(run, HasSubstr("invalid-syntax.textproto:4"), HasSubstr("no_such_field"));
}

TEST_F(KvmBadInputTest, PolicyThatFailsValidationIsNamedWithItsLine) {
  VmRun run = RunPolicy("invalid-const-without-value");
  EXPECT_BAD_INPUT(run, HasSubstr("invalid-const-without-value.textproto:4"));
}

TEST_F(KvmBadInputTest, RuleOnAnX2apicMsrCannotBecomeAFilter) {
  VmRun run = RunPolicy("x2apic-rule");
  EXPECT_BAD_INPUT(run, HasSubstr("x2apic-rule.textproto:6"), HasSubstr("x2APIC"));
}

TEST_F(KvmBadInputTest, RuleOnTheWholeMsrSpaceCannotBecomeAFilter) {
  VmRun run = RunPolicy("whole-msr-space");
  EXPECT_BAD_INPUT(run, HasSubstr("whole-msr-space.textproto:6"));
}

TEST_F(KvmBadInputTest, MsrsNeedingSeventeenFilterRangesCannotBecomeAFilter) {
  VmRun run = RunPolicy("filter-17-ranges");
  EXPECT_BAD_INPUT(run, HasSubstr("filter-17-ranges.textproto:"), HasSubstr("17"));
}

TEST_F(KvmBadInputTest, UnreachableDaemonIsRefusedWithinItsFiveSeconds) {
  VmRun run = RunWith("--server=unix:/nonexistent", GuestPath("entry_state"));
  EXPECT_BAD_INPUT(run, HasSubstr("unix:/nonexistent"));
  // 5 s to connect, plus a loaded machine's slack.
  EXPECT_LT(run.elapsed, std::chrono::seconds(20)) << run.Describe();
}

// No /dev/kvm and no permission on it: these run on every machine. Where
// /dev/kvm exists, the test hides it (or takes the permission away) in a
// mount namespace of the runner's own, which needs root.
class KvmDeviceTest : public ::testing::Test {
 protected:
  std::vector<std::string> Argv() {
    return {PvemuVmPath(), absl::StrCat("--domain=", kDomain),
            "--policy=" + TestPolicyPath("minimal"), GuestPath("entry_state")};
  }
};

TEST_F(KvmDeviceTest, NoDevKvmIsBadInputNamingIt) {
  DevKvm how = DevKvm::kMissing;
  if (geteuid() != 0) {
    if (Kvm().present) {
      GTEST_SKIP() << "hiding /dev/kvm from the runner needs root (a mount namespace); "
                      "pvemu-vm has no flag to choose the device";
    }
    how = DevKvm::kAsIs;  // missing here already
  }
  VmRun run = RunVmCommand(Argv(), /*json=*/false, how);
  EXPECT_EQ(run.status, 2) << run.Describe();
  EXPECT_THAT(run.stderr_text, HasSubstr("/dev/kvm")) << run.Describe();
}

TEST_F(KvmDeviceTest, DevKvmWithoutPermissionIsBadInputNamingIt) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "taking the permission on /dev/kvm away from the runner needs root "
                    "(a mount namespace); pvemu-vm has no flag to choose the device";
  }
  VmRun run = RunVmCommand(Argv(), /*json=*/false, DevKvm::kNoPermission);
  EXPECT_EQ(run.status, 2) << run.Describe();
  EXPECT_THAT(run.stderr_text, HasSubstr("/dev/kvm")) << run.Describe();
  EXPECT_THAT(absl::AsciiStrToLower(run.stderr_text), HasSubstr("permission")) << run.Describe();
}

}  // namespace
}  // namespace pvemu::testing
