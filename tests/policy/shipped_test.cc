#include "policy/shipped.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "enforce/kvm_msr_filter.h"
#include "policy/compile.h"
#include "policy/loader.h"
#include "tests/policy/test_util.h"
#include "tests/status_matchers.h"

namespace pvemu::policy {
namespace {

using ::pvemu::testing::IsOk;
using ::testing::UnorderedElementsAre;
using R = v1::ReadAction;
using W = v1::WriteAction;

std::string ReadSource(const std::string& rel) {
  std::ifstream in(testutil::SourceRoot() + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Shipped, Names) {
  EXPECT_THAT(ShippedPolicyNames(),
              UnorderedElementsAre("default", "xen-pre-4.15", "kvm-ignore-msrs", "kvm"));
  EXPECT_EQ(ShippedPolicy("nope"), "");
}

TEST(Shipped, EmbeddedPoliciesEqualTheFilesAndValidate) {
  for (absl::string_view name : ShippedPolicyNames()) {
    std::string file = "policy/defaults/" + std::string(name) + ".textproto";
    EXPECT_EQ(ShippedPolicy(name), ReadSource(file)) << file;
    EXPECT_THAT(LoadPolicyFile(testutil::SourceRoot() + "/" + file), IsOk());
  }
}

// Both trees hold a kvm/ directory, and pvemuctl and pvemu-vm run from
// them: there `--policy=kvm` must still name the shipped preset.
TEST(Shipped, ANameIsNotShadowedByADirectoryOfThatName) {
  testutil::TempDir dir;
  std::filesystem::create_directory(dir.path() + "/kvm");
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  absl::StatusOr<LoadedPolicy> loaded = LoadPolicyByNameOrFile("kvm");
  std::filesystem::current_path(before);
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->policy.default_().unknown_msr(), v1::UNKNOWN_RELAXED);
  EXPECT_EQ(loaded->source.source(), "kvm.textproto");
}

// --- The `kvm` preset: what it names, and what it leaves to KVM.

constexpr v1::Vendor kVendors[] = {v1::INTEL, v1::AMD, v1::HYGON, v1::CENTAUR, v1::ZHAOXIN};

std::shared_ptr<const Snapshot> CompileKvm(v1::Vendor host) {
  absl::StatusOr<LoadedPolicy> loaded = LoadPolicyByNameOrFile("kvm");
  EXPECT_THAT(loaded, IsOk());
  if (!loaded.ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const Snapshot>> s =
      CompilePolicy(loaded->policy, loaded->source, host, 1);
  EXPECT_THAT(s, IsOk());
  return s.ok() ? *s : nullptr;
}

// On KVM every MSR a rule names exits to user space, so the preset names only
// the vendor rule's two MSRs: EFER, APIC_BASE and the rest stay with KVM, and
// no x2APIC MSR (which KVM cannot filter) is named. (The PMU MSRs are decided
// too, by the vPMU being off, not by a rule of the preset.)
TEST(KvmPreset, NamesOnlyThermControlAndEnergyPerfBias) {
  for (v1::Vendor host : kVendors) {
    auto s = CompileKvm(host);
    ASSERT_NE(s, nullptr);
    for (uint32_t dom : {0u, 1u, 7u}) {
      const DomainSnapshot& d = s->ForDomain(dom);
      std::vector<uint32_t> named;
      for (uint32_t base : {0x0u, 0x40000000u, 0xc0000000u, 0xc0010000u}) {
        for (uint32_t msr = base; msr < base + 0x3000; ++msr) {
          const MsrEntry& e = d.Lookup(msr);
          if (e.unknown) continue;
          if (d.origin(e.read_origin).layer == "vpmu-off") {
            EXPECT_TRUE(IsPmuMsr(msr)) << std::hex << msr;
            continue;
          }
          named.push_back(msr);
        }
      }
      EXPECT_THAT(named, ::testing::ElementsAre(0x19au, 0x1b0u))
          << v1::Vendor_Name(host) << " domain " << dom;
      for (uint32_t msr : {0x1bu, 0xc0000080u, 0x277u, 0x10u, 0xc0000103u, 0x1a0u}) {
        EXPECT_TRUE(d.Lookup(msr).unknown) << std::hex << msr;
      }
      for (uint32_t msr = 0x800; msr <= 0x8ff; ++msr) {
        ASSERT_TRUE(d.Lookup(msr).unknown) << std::hex << msr;
      }
    }
  }
}

TEST(KvmPreset, UnknownMsrsAreRelaxedAndTheVpmuIsOff) {
  auto s = CompileKvm(v1::INTEL);
  ASSERT_NE(s, nullptr);
  const DomainSnapshot& d = s->ForDomain(1);
  EXPECT_EQ(d.unknown_msr(), v1::UNKNOWN_RELAXED);
  EXPECT_EQ(d.Lookup(0x87654321).read, R::ZERO);
  EXPECT_EQ(d.Lookup(0x87654321).write, W::IGNORE);
  EXPECT_FALSE(d.vpmu());
  EXPECT_EQ(d.Lookup(0xc1).read, R::GP);  // IA32_PMC0: #GP while the vPMU is off
}

// Reads: the host's value on Intel, 0 elsewhere. Writes: dropped on Intel,
// #GP elsewhere, for every domain: no KVM guest writes the host's MSR, not
// even one given domain number 0 (the default hardware domain).
TEST(KvmPreset, ThermControlAndEnergyPerfBiasNeverWriteTheHost) {
  for (v1::Vendor host : kVendors) {
    auto s = CompileKvm(host);
    ASSERT_NE(s, nullptr);
    const bool intel = host == v1::INTEL;
    for (uint32_t msr : {0x19au, 0x1b0u}) {
      for (uint32_t dom : {0u, 1u}) {
        SCOPED_TRACE(::testing::Message()
                     << v1::Vendor_Name(host) << " msr 0x" << std::hex << msr << " domain " << dom);
        const MsrEntry& e = s->ForDomain(dom).Lookup(msr);
        EXPECT_EQ(e.read, intel ? R::PASSTHROUGH : R::ZERO);
        EXPECT_EQ(e.write, intel ? W::IGNORE : W::GP);
        EXPECT_FALSE(e.allow_host_write);
      }
    }
  }
}

// The pvemu-vm runner's devices: console 0x3f8 (and 0x3fd), the exit port
// 0xf4 at any access size, the 32-bit scratch register 0x510; nothing else.
TEST(KvmPreset, GrantsExactlyTheRunnersPorts) {
  auto s = CompileKvm(v1::INTEL);
  ASSERT_NE(s, nullptr);
  const DomainSnapshot& d = s->ForDomain(1);
  EXPECT_TRUE(d.PortAllowed(0x3f8, 1));
  EXPECT_TRUE(d.PortAllowed(0x3fd, 1));
  EXPECT_TRUE(d.PortAllowed(0x3f8, 4));
  for (uint32_t width : {1u, 2u, 4u}) EXPECT_TRUE(d.PortAllowed(0xf4, width)) << width;
  for (uint32_t width : {1u, 2u, 4u}) EXPECT_TRUE(d.PortAllowed(0x510, width)) << width;
  EXPECT_TRUE(d.PortAllowed(0x513, 1));
  for (uint32_t port : {0x3f7u, 0x400u, 0xf3u, 0xf8u, 0x50fu, 0x514u, 0x80u, 0x70u, 0xcf8u}) {
    EXPECT_FALSE(d.PortAllowed(port, 1)) << std::hex << port;
  }
  EXPECT_FALSE(d.PortAllowed(0x512, 4));  // runs past the scratch register
}

// The preset is for KVM domains, so it must compile into a KVM MSR filter on
// every host: exactly its two vendor-rule MSRs and, with the vPMU off, the
// PMU MSRs exit; EFER and APIC_BASE stay with KVM.
TEST(KvmPreset, CompilesToAKvmFilterOfItsTwoMsrsAndThePmu) {
  for (v1::Vendor host : kVendors) {
    auto s = CompileKvm(host);
    ASSERT_NE(s, nullptr);
    for (uint32_t dom : {0u, 1u}) {
      SCOPED_TRACE(::testing::Message() << v1::Vendor_Name(host) << " domain " << dom);
      absl::StatusOr<enforce::MsrFilter> filter = enforce::CompileMsrFilter(s->ForDomain(dom));
      ASSERT_THAT(filter, IsOk());
      EXPECT_LE(filter->ranges.size(), enforce::kMaxFilterRanges);
      for (const auto& [first, last] : filter->exiting) {
        for (uint64_t msr = first; msr <= last; ++msr) {
          EXPECT_TRUE(msr == 0x19a || msr == 0x1b0 || IsPmuMsr(static_cast<uint32_t>(msr)))
              << std::hex << msr;
        }
      }
      EXPECT_TRUE(filter->Exits(0x19a));
      EXPECT_TRUE(filter->Exits(0x1b0));
      EXPECT_TRUE(filter->Exits(0xc1));  // IA32_PMC0, vPMU off
      for (uint32_t msr : {0x1bu, 0xc0000080u, 0x10u, 0x277u, 0x802u, 0x830u}) {
        EXPECT_FALSE(filter->Exits(msr)) << std::hex << msr;
      }
    }
  }
}

}  // namespace
}  // namespace pvemu::policy
