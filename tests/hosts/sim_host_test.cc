#include "hosts/sim_host.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/textproto.h"
#include "tests/status_matchers.h"

namespace pvemu::hosts {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

pvemu::v1::HostProfile Profile(absl::string_view text) {
  pvemu::v1::HostProfile p;
  absl::Status s = ParseTextProto(text, "test", &p);
  EXPECT_THAT(s, IsOk());
  return p;
}

std::unique_ptr<SimHost> MustCreate(absl::string_view text) {
  absl::StatusOr<std::unique_ptr<SimHost>> host =
      SimHost::Create(Profile(text), "test.textproto");
  EXPECT_THAT(host, IsOk());
  return host.ok() ? std::move(*host) : nullptr;
}

constexpr absl::string_view kTwoCpus = R"pb(
  name: "Tiny"
  vendor: INTEL
  cpus: 2
  tsc_khz: 2000000
  msr { msr: "0x1b0" value: 6 writable: true }
  msr { msr: "0x19c" value: 0x88440000 }
  msr { msr: "0xc0010015" value: 1 faults: true }
  msr { msr: "0x10" value: 12345 }
)pb";

TEST(SimHostTest, ReportsProfileBasics) {
  std::unique_ptr<SimHost> host = MustCreate(kTwoCpus);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->vendor(), pvemu::v1::INTEL);
  EXPECT_EQ(host->description(), "sim: Tiny");
  EXPECT_EQ(host->tsc_khz(), 2000000u);
  EXPECT_EQ(host->cpus(), 2u);
}

TEST(SimHostTest, ReadsProfileValueOnEveryCpu) {
  std::unique_ptr<SimHost> host = MustCreate(kTwoCpus);
  ASSERT_NE(host, nullptr);
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    uint64_t v = 0;
    ASSERT_TRUE(host->ReadMsr(cpu, 0x1b0, &v));
    EXPECT_EQ(v, 6u);
    ASSERT_TRUE(host->ReadMsr(cpu, 0x19c, &v));
    EXPECT_EQ(v, 0x88440000u);
    ASSERT_TRUE(host->ReadMsr(cpu, 0x10, &v));
    EXPECT_EQ(v, 12345u);
  }
}

TEST(SimHostTest, WritesAreStoredPerCpu) {
  std::unique_ptr<SimHost> host = MustCreate(kTwoCpus);
  ASSERT_NE(host, nullptr);
  ASSERT_TRUE(host->WriteMsr(1, 0x1b0, 0xf));
  uint64_t v = 0;
  ASSERT_TRUE(host->ReadMsr(1, 0x1b0, &v));
  EXPECT_EQ(v, 0xfu);
  ASSERT_TRUE(host->ReadMsr(0, 0x1b0, &v));
  EXPECT_EQ(v, 6u) << "CPU 0 keeps its own value";
}

TEST(SimHostTest, WriteToReadOnlyMsrFaultsAndKeepsValue) {
  std::unique_ptr<SimHost> host = MustCreate(kTwoCpus);
  ASSERT_NE(host, nullptr);
  EXPECT_FALSE(host->WriteMsr(0, 0x19c, 0));
  uint64_t v = 0;
  ASSERT_TRUE(host->ReadMsr(0, 0x19c, &v));
  EXPECT_EQ(v, 0x88440000u);
}

TEST(SimHostTest, UnlistedAndFaultingMsrsFaultAndLeaveValueUntouched) {
  std::unique_ptr<SimHost> host = MustCreate(kTwoCpus);
  ASSERT_NE(host, nullptr);
  uint64_t v = 777;
  EXPECT_FALSE(host->ReadMsr(0, 0x1a0, &v));
  EXPECT_FALSE(host->WriteMsr(0, 0x1a0, 1));
  EXPECT_FALSE(host->ReadMsr(0, 0xc0010015, &v));
  EXPECT_FALSE(host->WriteMsr(0, 0xc0010015, 1));
  EXPECT_EQ(v, 777u);
}

TEST(SimHostTest, CpuOutOfRangeFaults) {
  std::unique_ptr<SimHost> host = MustCreate(kTwoCpus);
  ASSERT_NE(host, nullptr);
  uint64_t v = 0;
  EXPECT_FALSE(host->ReadMsr(2, 0x1b0, &v));
  EXPECT_FALSE(host->WriteMsr(2, 0x1b0, 1));
}

TEST(SimHostTest, InjectedFaultCoversReadsAndWritesUntilCleared) {
  std::unique_ptr<SimHost> host = MustCreate(kTwoCpus);
  ASSERT_NE(host, nullptr);
  host->InjectFault(0x1b0, true);
  uint64_t v = 0;
  EXPECT_FALSE(host->ReadMsr(0, 0x1b0, &v));
  EXPECT_FALSE(host->ReadMsr(1, 0x1b0, &v));
  EXPECT_FALSE(host->WriteMsr(0, 0x1b0, 3));
  host->InjectFault(0x1b0, false);
  ASSERT_TRUE(host->ReadMsr(0, 0x1b0, &v));
  EXPECT_EQ(v, 6u) << "the refused write did not land";
  // Injecting on an unlisted MSR is harmless: it faults anyway.
  host->InjectFault(0x1234, true);
  EXPECT_FALSE(host->ReadMsr(0, 0x1234, &v));
}

TEST(SimHostTest, MsrNamesResolveThroughCatalog) {
  std::unique_ptr<SimHost> host = MustCreate(R"pb(
    name: "Named" vendor: AMD cpus: 1
    msr { msr: "IA32_ENERGY_PERF_BIAS" value: 4 }
    msr { msr: "412" value: 9 }
  )pb");
  ASSERT_NE(host, nullptr);
  uint64_t v = 0;
  ASSERT_TRUE(host->ReadMsr(0, 0x1b0, &v));
  EXPECT_EQ(v, 4u);
  ASSERT_TRUE(host->ReadMsr(0, 0x19c, &v));
  EXPECT_EQ(v, 9u);
}

TEST(SimHostTest, ConcurrentWritersOnDifferentCpusDoNotInterfere) {
  std::unique_ptr<SimHost> host = MustCreate(kTwoCpus);
  ASSERT_NE(host, nullptr);
  std::vector<std::thread> threads;
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    threads.emplace_back([&host, cpu] {
      for (uint64_t i = 0; i < 10000; ++i) {
        host->WriteMsr(cpu, 0x1b0, cpu * 100000 + i);
        uint64_t v;
        host->ReadMsr(cpu, 0x1b0, &v);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  uint64_t v0 = 0, v1 = 0;
  ASSERT_TRUE(host->ReadMsr(0, 0x1b0, &v0));
  ASSERT_TRUE(host->ReadMsr(1, 0x1b0, &v1));
  EXPECT_EQ(v0, 9999u);
  EXPECT_EQ(v1, 109999u);
}

// --- CPUID ---

TEST(SimHostTest, Leaf0IsDerivedFromVendor) {
  std::unique_ptr<SimHost> host = MustCreate(R"pb(
    name: "A" vendor: AMD cpus: 1
    cpuid { leaf: 0xd regs { eax: 1 } }
    cpuid { leaf: 0x80000000 regs { eax: 0x80000008 } }
  )pb");
  ASSERT_NE(host, nullptr);
  emulator::CpuidRegs r = host->Cpuid(0, 0);
  EXPECT_EQ(r.eax, 0xdu) << "the highest basic leaf listed";
  EXPECT_EQ(r.ebx, 0x68747541u);  // "Auth"
  EXPECT_EQ(r.edx, 0x69746e65u);  // "enti"
  EXPECT_EQ(r.ecx, 0x444d4163u);  // "cAMD"
}

TEST(SimHostTest, Leaf0FromProfileIsKept) {
  std::unique_ptr<SimHost> host = MustCreate(R"pb(
    name: "I" vendor: INTEL cpus: 1
    cpuid { leaf: 0 regs { eax: 0x16 ebx: 0x756e6547 edx: 0x49656e69 ecx: 0x6c65746e } }
  )pb");
  ASSERT_NE(host, nullptr);
  emulator::CpuidRegs r = host->Cpuid(0, 5);
  EXPECT_EQ(r.eax, 0x16u);
  EXPECT_EQ(r.ebx, 0x756e6547u);  // "Genu"
}

TEST(SimHostTest, ExactSubleafBeatsAnySubleafAndUnlistedLeavesAreZero) {
  std::unique_ptr<SimHost> host = MustCreate(R"pb(
    name: "S" vendor: INTEL cpus: 1
    cpuid { leaf: 7 regs { eax: 0x70 } }
    cpuid { leaf: 7 subleaf: 1 regs { eax: 0x71 } }
    cpuid { leaf: 4 subleaf: 0 regs { eax: 0x40 } }
  )pb");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->Cpuid(7, 1).eax, 0x71u);
  EXPECT_EQ(host->Cpuid(7, 0).eax, 0x70u);
  EXPECT_EQ(host->Cpuid(7, 9).eax, 0x70u);
  EXPECT_EQ(host->Cpuid(4, 0).eax, 0x40u);
  emulator::CpuidRegs none = host->Cpuid(4, 1);
  EXPECT_EQ(none.eax | none.ebx | none.ecx | none.edx, 0u);
  emulator::CpuidRegs unlisted = host->Cpuid(0x40000000, 0);
  EXPECT_EQ(unlisted.eax | unlisted.ebx | unlisted.ecx | unlisted.edx, 0u);
}

TEST(SimHostTest, Leaf1SignatureIsDerivedFromFamilyModelStepping) {
  std::unique_ptr<SimHost> intel = MustCreate(R"pb(
    name: "CFL" vendor: INTEL cpus: 1 family: 6 model: 158 stepping: 10
  )pb");
  ASSERT_NE(intel, nullptr);
  EXPECT_EQ(intel->Cpuid(1, 0).eax, 0x906eau);
  EXPECT_EQ(intel->Cpuid(0, 0).eax, 1u);
  std::unique_ptr<SimHost> amd = MustCreate(R"pb(
    name: "Milan" vendor: AMD cpus: 1 family: 25 model: 1 stepping: 1
  )pb");
  ASSERT_NE(amd, nullptr);
  EXPECT_EQ(amd->Cpuid(1, 0).eax, 0xa00f11u);
}

// --- Validation ---

TEST(SimHostValidationTest, MissingVendor) {
  EXPECT_THAT(SimHost::Create(Profile(R"pb(name: "X" cpus: 1)pb"), "x.textproto"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "x.textproto: host profile 'X': sets no vendor; add e.g. "
                       "'vendor: INTEL' (INTEL, AMD, HYGON, CENTAUR or ZHAOXIN)"));
}

TEST(SimHostValidationTest, NoCpus) {
  EXPECT_THAT(
      SimHost::Create(Profile(R"pb(name: "X" vendor: AMD)pb"), "x.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "x.textproto: host profile 'X': cpus is 0; a host has at least "
               "1 CPU (e.g. 'cpus: 12')"));
}

TEST(SimHostValidationTest, TooManyCpus) {
  EXPECT_THAT(
      SimHost::Create(Profile(R"pb(name: "X" vendor: AMD cpus: 5000)pb"),
                      "x.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "x.textproto: host profile 'X': cpus is 5000; at most 4096 are "
               "supported"));
}

TEST(SimHostValidationTest, BadMsrNumber) {
  EXPECT_THAT(
      SimHost::Create(Profile(R"pb(name: "X" vendor: AMD cpus: 1
                                   msr { msr: "0x10" }
                                   msr { msr: "0x1ffffffff" })pb"),
                      "x.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               StartsWith("x.textproto: host profile 'X': msr[1] "
                          "'0x1ffffffff': ")));
}

TEST(SimHostValidationTest, UnknownMsrName) {
  EXPECT_THAT(
      SimHost::Create(Profile(R"pb(name: "X" vendor: AMD cpus: 1
                                   msr { msr: "IA32_ENERGY_PERF_BIASS" })pb"),
                      "x.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               StartsWith("x.textproto: host profile 'X': msr[0] "
                          "'IA32_ENERGY_PERF_BIASS': ")));
}

TEST(SimHostValidationTest, DuplicateMsrNamesBothEntries) {
  EXPECT_THAT(
      SimHost::Create(Profile(R"pb(name: "X" vendor: AMD cpus: 1
                                   msr { msr: "0x1b0" }
                                   msr { msr: "0x10" }
                                   msr { msr: "432" })pb"),
                      "x.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "x.textproto: host profile 'X': msr[2] '432' lists MSR 0x1b0 "
               "again (already msr[0] '0x1b0')"));
}

TEST(SimHostValidationTest, DuplicateCpuidLeaf) {
  EXPECT_THAT(
      SimHost::Create(Profile(R"pb(name: "X" vendor: AMD cpus: 1
                                   cpuid { leaf: 7 subleaf: 0 }
                                   cpuid { leaf: 7 }
                                   cpuid { leaf: 7 subleaf: 0 })pb"),
                      "x.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "x.textproto: host profile 'X': cpuid[2] repeats leaf 0x7 "
               "subleaf 0 (already cpuid[0])"));
}

TEST(SimHostValidationTest, Leaf0NamingAnotherVendor) {
  EXPECT_THAT(
      SimHost::Create(
          Profile(R"pb(name: "X" vendor: AMD cpus: 1
                       cpuid { leaf: 0 regs { ebx: 0x756e6547 edx: 0x49656e69 ecx: 0x6c65746e } })pb"),
          "x.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "x.textproto: host profile 'X': cpuid[0] leaf 0 does not name "
               "the vendor 'AuthenticAMD' (want ebx 0x68747541 edx 0x69746e65 "
               "ecx 0x444d4163); drop the entry to derive it from 'vendor'"));
}

TEST(SimHostValidationTest, ModelThatDoesNotFit) {
  EXPECT_THAT(
      SimHost::Create(Profile(R"pb(name: "X" vendor: AMD cpus: 1 family: 5 model: 20)pb"),
                      "x.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "x.textproto: host profile 'X': model 0x14 does not fit CPUID "
               "for family 0x5"));
}

}  // namespace
}  // namespace pvemu::hosts
