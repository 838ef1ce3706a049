#include "policy/compile.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/explain.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "policy/shipped.h"
#include "hosts/profiles.h"
#include "base/textproto.h"
#include "pvemu/v1/host.pb.h"
#include "tests/policy/test_util.h"
#include "tests/status_matchers.h"

namespace pvemu::policy {
namespace {

using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;
using R = v1::ReadAction;
using W = v1::WriteAction;

std::shared_ptr<const Snapshot> Compile(absl::string_view text, v1::Vendor host = v1::INTEL) {
  LoadedPolicy p = testutil::MustParse(text, "c.textproto");
  absl::StatusOr<std::shared_ptr<const Snapshot>> s = CompilePolicy(p.policy, p.source, host, 7);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::shared_ptr<const Snapshot> Shipped(absl::string_view name, v1::Vendor host) {
  return Compile(ShippedPolicy(name), host);
}

v1::Vendor ProfileVendor(absl::string_view name) {
  v1::HostProfile profile;
  EXPECT_TRUE(ParseTextProto(hosts::ShippedProfile(name), name, &profile).ok());
  return profile.vendor();
}

// --- Precedence ---

TEST(Precedence, SingleBeatsRangeNarrowBeatsWide) {
  auto s = Compile(R"(default {
    vpmu: true  # no PMU ranges forced to #GP, so only these rules' intervals
    msr { range { first: "0x0" last: "0xff" } read: ZERO write: IGNORE }
    msr { range { first: "0x10" last: "0x1f" } read: GP }
    msr { msr: "0x18" read: CONST value: 5 }
  })");
  const DomainSnapshot& d = s->ForDomain(3);
  EXPECT_EQ(d.Lookup(0x05).read, R::ZERO);
  EXPECT_EQ(d.Lookup(0x10).read, R::GP);
  EXPECT_EQ(d.Lookup(0x10).write, W::IGNORE);  // inherited from the wide range
  EXPECT_EQ(d.Lookup(0x18).read, R::CONST);
  EXPECT_EQ(d.Lookup(0x18).value, 5u);
  EXPECT_EQ(d.Lookup(0x18).write, W::IGNORE);  // single inherits write from a range
  EXPECT_EQ(d.Lookup(0x20).read, R::ZERO);
  EXPECT_TRUE(d.Lookup(0x100).unknown);
  EXPECT_EQ(d.Lookup(0x100).read, R::GP);
  EXPECT_EQ(d.single_count(), 1u);
  EXPECT_EQ(d.range_count(), 3u);  // [0,f] [10,1f] [20,ff]
}

TEST(Precedence, DomainLayerBeatsDefaultEvenWhenLessSpecific) {
  auto s = Compile(R"(default { msr { msr: "0x1b0" host_vendor: INTEL read: PASSTHROUGH } }
    domain { domain: 2 msr { range { first: "0x100" last: "0x1ff" } read: ZERO } })");
  EXPECT_EQ(s->ForDomain(2).Lookup(0x1b0).read, R::ZERO);
  EXPECT_EQ(s->ForDomain(3).Lookup(0x1b0).read, R::PASSTHROUGH);
}

TEST(Precedence, MoreConditionsWin) {
  auto s = Compile(R"(default {
    msr { msr: "0x1b0" read: ZERO }
    msr { msr: "0x1b0" host_vendor: INTEL read: PASSTHROUGH }
    msr { msr: "0x1b0" host_vendor: INTEL hardware_domain: true read: GP }
  })");
  EXPECT_EQ(s->ForDomain(0).Lookup(0x1b0).read, R::GP);
  EXPECT_EQ(s->ForDomain(1).Lookup(0x1b0).read, R::PASSTHROUGH);
  auto amd = Compile(ShippedPolicy("default"), v1::AMD);
  EXPECT_EQ(amd->ForDomain(1).Lookup(0x1b0).read, R::ZERO);
}

TEST(Precedence, ConditionsThatDoNotMatchAreDropped) {
  auto s = Compile(R"(default { msr { msr: "0x10" guest_vendor: AMD read: ZERO } }
    domain { domain: 4 guest_vendor: AMD })");
  EXPECT_TRUE(s->ForDomain(1).Lookup(0x10).unknown);  // guest sees Intel (the host)
  EXPECT_EQ(s->ForDomain(4).Lookup(0x10).read, R::ZERO);
  EXPECT_EQ(s->ForDomain(4).guest_vendor(), v1::AMD);
}

TEST(Precedence, HalvesMergeIndependently) {
  auto s = Compile(R"(default { msr { range { first: "0x10" last: "0x20" } read: ZERO write: GP } }
    domain { domain: 1 msr { msr: "0x15" write: IGNORE comment: "w" } })");
  const MsrEntry& e = s->ForDomain(1).Lookup(0x15);
  EXPECT_EQ(e.read, R::ZERO);
  EXPECT_EQ(e.write, W::IGNORE);
  EXPECT_EQ(s->ForDomain(1).origin(e.read_origin).layer, "default");
  EXPECT_EQ(s->ForDomain(1).origin(e.write_origin).layer, "domain");
  EXPECT_EQ(s->ForDomain(1).origin(e.write_origin).source, "c.textproto:2");
  EXPECT_EQ(s->ForDomain(1).origin(e.write_origin).comment, "w");
}

TEST(Precedence, UndecidedHalfFollowsUnknownMode) {
  auto s = Compile(R"(default { unknown_msr: UNKNOWN_RELAXED msr { msr: "0x10" write: GP } })");
  const MsrEntry& e = s->ForDomain(1).Lookup(0x10);
  EXPECT_EQ(e.read, R::ZERO);
  EXPECT_EQ(e.write, W::GP);
  EXPECT_FALSE(e.unknown);
}

TEST(Ranges, OverlapsSplitIntoDisjointIntervals) {
  auto s = Compile(R"(default {
    msr { range { first: "0x100" last: "0x1ff" } read: ZERO }
    msr { range { first: "0x180" last: "0x2ff" } read: GP }
    msr { range { first: "0x1c0" last: "0x1cf" } read: PASSTHROUGH }
  }
  domain { domain: 1 msr { range { first: "0x1f0" last: "0x20f" } read: CONST value: 1 } })");
  const DomainSnapshot& d = s->ForDomain(1);
  // Widths: 0x100 (narrower) beats 0x180 over the overlap 0x180-0x1ff.
  EXPECT_EQ(d.Lookup(0x17f).read, R::ZERO);
  EXPECT_EQ(d.Lookup(0x180).read, R::ZERO);
  EXPECT_EQ(d.Lookup(0x1c5).read, R::PASSTHROUGH);
  EXPECT_EQ(d.Lookup(0x1ef).read, R::ZERO);
  EXPECT_EQ(d.Lookup(0x1f0).read, R::CONST);
  EXPECT_EQ(d.Lookup(0x20f).read, R::CONST);
  EXPECT_EQ(d.Lookup(0x210).read, R::GP);
  EXPECT_TRUE(d.Lookup(0x300).unknown);
  EXPECT_TRUE(d.Lookup(0xff).unknown);
  const auto& iv = d.ranges();
  for (size_t i = 1; i < iv.size(); ++i) EXPECT_LT(iv[i - 1].last, iv[i].first);
  EXPECT_EQ(s->ForDomain(2).Lookup(0x1f0).read, R::ZERO);
}

TEST(Ranges, FullIndexSpace) {
  auto s = Compile(R"(default { msr { range { first: "0" last: "0xffffffff" } read: ZERO } })");
  EXPECT_EQ(s->ForDomain(1).Lookup(0xffffffff).read, R::ZERO);
  EXPECT_EQ(s->ForDomain(1).Lookup(0).read, R::ZERO);
}

TEST(Domains, HardwareDomainAndSnapshotsForDomainsWithoutOverlay) {
  auto s = Compile(R"(domain { domain: 5 hardware_domain: true } domain { domain: 0 hardware_domain: false })");
  EXPECT_TRUE(s->ForDomain(5).hardware_domain());
  EXPECT_FALSE(s->ForDomain(0).hardware_domain());
  auto plain = Compile("");
  EXPECT_TRUE(plain->ForDomain(0).hardware_domain());
  EXPECT_FALSE(plain->ForDomain(0).has_overlay());
  EXPECT_FALSE(plain->ForDomain(77).hardware_domain());
  EXPECT_EQ(&plain->ForDomain(77), &plain->ForDomain(78));
  EXPECT_EQ(plain->generation(), 7u);
}

TEST(Other, CpuidExactSubleafBeatsAnyAndDomainBeatsDefault) {
  auto s = Compile(R"(default {
      cpuid { leaf: 7 source: CONST set { ebx: 1 } }
      cpuid { leaf: 7 subleaf: 1 source: CONST set { ebx: 2 } }
      cpuid { leaf: 0xd subleaf: 0 source: CONST set { eax: 3 } }
    }
    domain { domain: 1 cpuid { leaf: 0xd clear { eax: 4 } } })");
  const DomainSnapshot& d = s->ForDomain(2);
  EXPECT_EQ(d.Cpuid(7, 0)->set[1], 1u);
  EXPECT_EQ(d.Cpuid(7, 1)->set[1], 2u);
  EXPECT_EQ(d.Cpuid(7, 1)->source, v1::CpuidEntry::CONST);
  EXPECT_EQ(d.Cpuid(8, 0), nullptr);
  EXPECT_EQ(d.Cpuid(0xd, 0)->set[0], 3u);
  const DomainSnapshot& d1 = s->ForDomain(1);
  EXPECT_EQ(d1.Cpuid(0xd, 0)->source, v1::CpuidEntry::HOST);  // domain any beats default exact
  EXPECT_EQ(d1.Cpuid(0xd, 0)->clear[0], 4u);
}

// The leaves looked up by a byte (basic 0-0x1f, extended 0x80000000-
// 0x8000001f) and by a hash (every other) answer alike: each rule's leaf
// finds its own decision, its neighbours on either side of a range's edge
// find none, and no leaf borrows another's by sharing its low bits.
TEST(Other, CpuidLeavesAtTheEdgesOfTheDirectRangesFindOnlyTheirOwnRules) {
  // 0x8 (any subleaf) and 0x80000008 (subleaf 3 only) share their low bits.
  const uint32_t kRuled[] = {0x0,        0x8,        0x1f,       0x20,       0x40000000,
                             0x40000001, 0x80000000, 0x8000001f, 0x80000020, 0xc0000000,
                             0xffffffff};
  const uint32_t kUnruled[] = {0x1,        0x1e,       0x21,       0x3f,       0x60,
                               0x80000001, 0x8000001e, 0x80000021, 0x8000003f, 0xc000001f,
                               0x4000001f, 0x7fffffff};
  std::string text = "default {\n";
  for (uint32_t leaf : kRuled) {
    absl::StrAppend(&text, "  cpuid { leaf: ", leaf, " source: CONST set { eax: ", leaf,
                    " } }\n");
  }
  absl::StrAppend(&text, "  cpuid { leaf: 0x80000008 subleaf: 3 source: CONST set { ebx: 9 } }\n}");
  auto s = Compile(text);
  const DomainSnapshot& d = s->ForDomain(3);
  for (uint32_t leaf : kRuled) {
    SCOPED_TRACE(absl::StrCat("leaf ", absl::Hex(leaf)));
    ASSERT_NE(d.Cpuid(leaf, 0), nullptr);
    EXPECT_EQ(d.Cpuid(leaf, 0)->set[0], leaf);
    EXPECT_EQ(d.Cpuid(leaf, 7)->set[0], leaf);  // any subleaf
  }
  for (uint32_t leaf : kUnruled) {
    EXPECT_EQ(d.Cpuid(leaf, 0), nullptr) << absl::StrCat("leaf ", absl::Hex(leaf));
  }
  ASSERT_NE(d.Cpuid(0x80000008, 3), nullptr);
  EXPECT_EQ(d.Cpuid(0x80000008, 3)->set[1], 9u);
  EXPECT_EQ(d.Cpuid(0x80000008, 2), nullptr);
  ASSERT_NE(d.Cpuid(0x8, 3), nullptr);
  EXPECT_EQ(d.Cpuid(0x8, 3)->set[0], 0x8u);
}

TEST(Other, TscDomainOverridesFieldWise) {
  auto s = Compile(R"(default { tsc { mode: OFFSET offset: 100 } }
    domain { domain: 1 tsc { mode: EMULATED frequency_khz: 2000000 } })");
  EXPECT_EQ(s->ForDomain(2).tsc().mode, v1::TscPolicy::OFFSET);
  EXPECT_EQ(s->ForDomain(1).tsc().mode, v1::TscPolicy::EMULATED);
  EXPECT_EQ(s->ForDomain(1).tsc().offset, 100);
  EXPECT_EQ(s->ForDomain(1).tsc().frequency_khz, 2000000u);
  EXPECT_EQ(Compile("")->ForDomain(1).tsc().mode, v1::TscPolicy::NATIVE);
}

TEST(Other, PortsAreTheUnionAndEveryByteMustBeGranted) {
  auto s = Compile(R"(default { io_port { first: 0x60 last: 0x61 } io_port { first: 0x62 last: 0x64 } }
    domain { domain: 1 io_port { first: 0x3f8 last: 0x3ff } io_port { first: 0xfffe last: 0xffff } })");
  const DomainSnapshot& d = s->ForDomain(1);
  EXPECT_TRUE(d.PortAllowed(0x60, 4));   // spans two adjacent ranges, merged
  EXPECT_TRUE(d.PortAllowed(0x64, 1));
  EXPECT_FALSE(d.PortAllowed(0x64, 2));
  EXPECT_FALSE(d.PortAllowed(0x5f, 1));
  EXPECT_TRUE(d.PortAllowed(0x3fc, 4));
  EXPECT_FALSE(d.PortAllowed(0x3fd, 4));
  EXPECT_TRUE(d.PortAllowed(0xfffe, 2));
  EXPECT_FALSE(d.PortAllowed(0xffff, 2));  // wraps past 0xffff
  EXPECT_FALSE(s->ForDomain(2).PortAllowed(0x3f8, 1));
  EXPECT_TRUE(s->ForDomain(2).PortAllowed(0x61, 2));
}

// For tools that translate a policy (pvemuctl xen-config): each io_port range
// as written and where, where tsc/vpmu/guest_vendor were decided ("" when no
// layer sets them), and every CPUID decision in order.
TEST(Other, SettingsKeepTheirOrigins) {
  auto s = Compile(R"(default {
  io_port { first: 0x60 last: 0x61 }
  tsc { mode: OFFSET offset: 100 }
}
domain {
  domain: 1
  io_port { first: 0x62 last: 0x64 }
  vpmu: true
  guest_vendor: AMD
  cpuid { leaf: 7 subleaf: 1 clear { ebx: 1 } }
  cpuid { leaf: 1 clear { ecx: 1 } }
  cpuid { leaf: 7 clear { ebx: 2 } }
})");
  const DomainSnapshot& d = s->ForDomain(1);
  ASSERT_EQ(d.port_grants().size(), 2u);
  EXPECT_EQ(d.port_grants()[0].first, 0x60u);
  EXPECT_EQ(d.port_grants()[0].origin, "c.textproto:2");
  EXPECT_EQ(d.port_grants()[1].last, 0x64u);
  EXPECT_EQ(d.port_grants()[1].origin, "c.textproto:7");
  EXPECT_EQ(d.setting_origins().tsc, "c.textproto:3");
  EXPECT_EQ(d.setting_origins().vpmu, "c.textproto:8");
  EXPECT_EQ(d.setting_origins().guest_vendor, "c.textproto:9");
  std::vector<std::string> rules;
  for (const DomainSnapshot::CpuidRule& r : d.CpuidRules()) {
    rules.push_back(absl::StrCat(r.leaf, r.any_subleaf ? "" : absl::StrCat(",", r.subleaf), "@",
                                 r.decision->origin));
  }
  EXPECT_THAT(rules, ::testing::ElementsAre("1@c.textproto:11", "7@c.textproto:12",
                                            "7,1@c.textproto:10"));
  const DomainSnapshot& other = s->ForDomain(2);
  EXPECT_EQ(other.port_grants().size(), 1u);
  EXPECT_EQ(other.setting_origins().vpmu, "");
  EXPECT_EQ(other.setting_origins().guest_vendor, "");
  EXPECT_EQ(Compile("")->ForDomain(1).setting_origins().tsc, "");
}

TEST(Other, VpmuDomainOverridesDefaultOff) {
  auto s = Compile(R"(default { msr { range { first: "IA32_PMC0" last: "IA32_PMC7" } read: SHADOW write: SHADOW } }
    domain { domain: 1 vpmu: true })");
  EXPECT_TRUE(s->ForDomain(1).vpmu());
  EXPECT_FALSE(s->ForDomain(2).vpmu());
  EXPECT_EQ(s->ForDomain(1).Lookup(0xc1).read, R::SHADOW);
  const MsrEntry& off = s->ForDomain(2).Lookup(0xc1);
  EXPECT_EQ(off.read, R::GP);
  EXPECT_EQ(off.write, W::GP);
  EXPECT_EQ(s->ForDomain(2).origin(off.read_origin).layer, "vpmu-off");
}

TEST(Compile, InvalidPolicyIsRefused) {
  v1::Policy p;
  p.mutable_default_()->add_msr()->set_msr("NOPE");
  EXPECT_THAT(CompilePolicy(p, SourceMap("x"), v1::INTEL, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown MSR 'NOPE'")));
}

// --- The shipped default, on both host profiles, hardware domain or not ---

struct VendorCase {
  const char* profile;
  bool intel;
};

class ShippedDefault : public ::testing::TestWithParam<VendorCase> {};

TEST_P(ShippedDefault, ThermControlAndEnergyPerfBias) {
  v1::Vendor host = ProfileVendor(GetParam().profile);
  ASSERT_NE(host, v1::VENDOR_UNSPECIFIED);
  auto s = Shipped("default", host);
  for (uint32_t msr : {0x19au, 0x1b0u}) {
    for (uint32_t dom : {0u, 3u}) {
      SCOPED_TRACE(::testing::Message() << std::hex << msr << " dom" << dom);
      const MsrEntry& e = s->ForDomain(dom).Lookup(msr);
      EXPECT_FALSE(e.unknown);
      if (GetParam().intel) {
        EXPECT_EQ(e.read, R::PASSTHROUGH);
        if (dom == 0) {
          EXPECT_EQ(e.write, W::PASSTHROUGH);
          EXPECT_TRUE(e.allow_host_write);
        } else {
          EXPECT_EQ(e.write, W::IGNORE);
          EXPECT_FALSE(e.allow_host_write);
        }
      } else {
        EXPECT_EQ(e.read, R::ZERO);
        EXPECT_EQ(e.value, 0u);
        EXPECT_EQ(e.write, W::GP);
      }
    }
  }
}

TEST_P(ShippedDefault, EmulatedArchitecturalMsrs) {
  v1::Vendor host = ProfileVendor(GetParam().profile);
  auto s = Shipped("default", host);
  for (uint32_t dom : {0u, 3u}) {
    const DomainSnapshot& d = s->ForDomain(dom);
    EXPECT_EQ(d.Lookup(0x1b).read, R::CONST);
    EXPECT_EQ(d.Lookup(0x1b).value, 0xfee00900u);
    EXPECT_EQ(d.Lookup(0x1b).write, W::IGNORE);
    EXPECT_EQ(d.Lookup(0x277).read, R::SHADOW);
    EXPECT_EQ(d.Lookup(0x277).write, W::SHADOW);
    EXPECT_EQ(d.Lookup(0x277).value, 0x0007040600070406u);
    EXPECT_EQ(d.Lookup(0x277).writable_mask, 0x0707070707070707u);
    EXPECT_EQ(d.Lookup(0xc0000080).read, R::SHADOW);
    EXPECT_EQ(d.Lookup(0xc0000080).writable_mask, 0u);
    EXPECT_EQ(d.Lookup(0xc0000103).write, W::SHADOW);
    EXPECT_EQ(d.Lookup(0xc0000103).writable_mask, 0xffffffffu);
    if (GetParam().intel) {
      EXPECT_EQ(d.Lookup(0x1a0).read, R::SHADOW);
      EXPECT_FALSE(d.Lookup(0x1a0).has_value);  // the host's value
      EXPECT_TRUE(d.Lookup(0x1a0).drop_reserved);
    } else {
      EXPECT_TRUE(d.Lookup(0x1a0).unknown);
      EXPECT_EQ(d.Lookup(0x1a0).read, R::GP);
    }
  }
}

TEST_P(ShippedDefault, AmdPstateNbCfgMmioConfForTheHardwareDomain) {
  v1::Vendor host = ProfileVendor(GetParam().profile);
  auto s = Shipped("default", host);
  for (uint32_t msr = 0xc0010061; msr <= 0xc001006b; ++msr) {
    EXPECT_EQ(s->ForDomain(0).Lookup(msr).read, GetParam().intel ? R::GP : R::PASSTHROUGH);
    EXPECT_EQ(s->ForDomain(0).Lookup(msr).write, GetParam().intel ? W::GP : W::IGNORE);
    EXPECT_EQ(s->ForDomain(3).Lookup(msr).read, R::GP);
    EXPECT_TRUE(s->ForDomain(3).Lookup(msr).unknown);
  }
  EXPECT_TRUE(s->ForDomain(0).Lookup(0xc001006c).unknown);
  for (uint32_t msr : {0xc001001fu, 0xc0010058u}) {
    EXPECT_EQ(s->ForDomain(0).Lookup(msr).read, GetParam().intel ? R::GP : R::PASSTHROUGH);
    EXPECT_EQ(s->ForDomain(3).Lookup(msr).read, R::GP);
  }
}

TEST_P(ShippedDefault, PmuFaultsUnlessVpmuOn) {
  v1::Vendor host = ProfileVendor(GetParam().profile);
  auto s = Shipped("default", host);
  for (uint32_t msr : {0xc1u, 0x186u, 0x309u, 0x38fu, 0xc0010000u, 0xc0010004u, 0xc0010200u,
                       0xc001020bu}) {
    EXPECT_EQ(s->ForDomain(0).Lookup(msr).read, R::GP) << std::hex << msr;
    EXPECT_EQ(s->ForDomain(0).Lookup(msr).write, W::GP);
  }
  std::string on = std::string(ShippedPolicy("default")) + "domain { domain: 2 vpmu: true }\n";
  auto v = Compile(on, host);
  for (uint32_t msr : {0xc1u, 0x186u, 0x309u, 0x38fu, 0xc0010000u, 0xc0010200u}) {
    EXPECT_EQ(v->ForDomain(2).Lookup(msr).read, R::SHADOW) << std::hex << msr;
    EXPECT_EQ(v->ForDomain(2).Lookup(msr).write, W::SHADOW);
  }
}

TEST_P(ShippedDefault, UnknownMsrsByPreset) {
  v1::Vendor host = ProfileVendor(GetParam().profile);
  auto def = Shipped("default", host);  // keeps the snapshot alive
  const MsrEntry& gp = def->ForDomain(1).Lookup(0x8b);
  EXPECT_TRUE(gp.unknown);
  EXPECT_EQ(gp.read, R::GP);
  EXPECT_EQ(gp.write, W::GP);
  auto pre = Shipped("xen-pre-4.15", host);
  EXPECT_EQ(pre->ForDomain(1).Lookup(0x8b).read, R::PASSTHROUGH);
  EXPECT_EQ(pre->ForDomain(1).Lookup(0x8b).write, W::GP);
  auto kvm = Shipped("kvm-ignore-msrs", host);
  EXPECT_EQ(kvm->ForDomain(1).Lookup(0x8b).read, R::ZERO);
  EXPECT_EQ(kvm->ForDomain(1).Lookup(0x8b).write, W::IGNORE);
  // The presets keep the vendor rule.
  EXPECT_EQ(kvm->ForDomain(1).Lookup(0x1b0).read, GetParam().intel ? R::PASSTHROUGH : R::ZERO);
}

INSTANTIATE_TEST_SUITE_P(Profiles, ShippedDefault,
                         ::testing::Values(VendorCase{"intel-xeon-e-2136", true},
                                           VendorCase{"amd-epyc-7443p", false}));

TEST(ShippedDefaultVendors, EveryOtherVendorReadsZeroAndWritesFault) {
  for (v1::Vendor v : {v1::HYGON, v1::CENTAUR, v1::ZHAOXIN}) {
    auto s = Shipped("default", v);
    for (uint32_t dom : {0u, 1u}) {
      EXPECT_EQ(s->ForDomain(dom).Lookup(0x1b0).read, R::ZERO);
      EXPECT_EQ(s->ForDomain(dom).Lookup(0x19a).write, W::GP);
    }
  }
  EXPECT_EQ(Shipped("default", v1::HYGON)->ForDomain(0).Lookup(0xc0010063).read, R::PASSTHROUGH);
}

// --- explain ---

TEST(Explain, ReadsAndWrites) {
  auto s = Shipped("default", v1::INTEL);
  Explanation r = ExplainMsr(*s, 0, 0x1b0);
  EXPECT_EQ(r.action, "PASSTHROUGH");
  EXPECT_EQ(r.name, "IA32_ENERGY_PERF_BIAS");
  EXPECT_STREQ(r.access(), "read");
  EXPECT_EQ(r.layer, "default");
  EXPECT_THAT(r.source, ::testing::StartsWith("c.textproto:"));
  EXPECT_EQ(r.comment, "Intel host: read the real energy/performance hint");
  EXPECT_FALSE(r.value.has_value());

  Explanation w = ExplainMsr(*s, 3, 0x1b0, 6);
  EXPECT_EQ(w.action, "IGNORE");
  EXPECT_STREQ(w.access(), "write");

  Explanation apic = ExplainMsr(*s, 3, 0x1b);
  EXPECT_EQ(apic.action, "CONST");
  EXPECT_EQ(apic.value, 0xfee00900u);

  Explanation pat_ok = ExplainMsr(*s, 3, 0x277, 0x0006060606060606);
  EXPECT_EQ(pat_ok.action, "SHADOW");
  EXPECT_EQ(pat_ok.value, 0x0006060606060606u);
  Explanation pat_bad = ExplainMsr(*s, 3, 0x277, 0x0800000000000000);
  EXPECT_EQ(pat_bad.action, "GP");
  EXPECT_THAT(pat_bad.detail, HasSubstr("outside writable_mask"));

  Explanation unknown = ExplainMsr(*s, 3, 0x12345);
  EXPECT_TRUE(unknown.unknown);
  EXPECT_EQ(unknown.layer, "unknown-msr");
  EXPECT_EQ(unknown.action, "GP");

  auto amd = Shipped("default", v1::AMD);
  Explanation z = ExplainMsr(*amd, 0, 0x19a);
  EXPECT_EQ(z.action, "ZERO");
  EXPECT_EQ(z.value, 0u);
  Explanation pmu = ExplainMsr(*amd, 0, 0xc0010200);
  EXPECT_EQ(pmu.layer, "vpmu-off");
}

}  // namespace
}  // namespace pvemu::policy

namespace pvemu::policy {
namespace {

// The page-indexed interval search agrees with a linear scan of the interval
// table, for dense small ranges, ranges across page edges and wide ranges.
TEST(Ranges, LookupAgreesWithLinearScan) {
  std::string text = "default { vpmu: true\n";
  for (int i = 0; i < 300; ++i) {  // 1..3-wide ranges, packed around page edges
    uint32_t first = 0x1f0 + i * 3;
    absl::StrAppendFormat(&text, "msr { range { first: \"0x%x\" last: \"0x%x\" } read: %s }\n",
                          first, first + (i % 3), i % 2 ? "ZERO" : "GP");
  }
  text += "msr { range { first: \"0x10000\" last: \"0x7ffff\" } read: ZERO }\n";
  text += "msr { range { first: \"0x20005\" last: \"0x300ff\" } read: PASSTHROUGH }\n";
  text += "msr { msr: \"0x20010\" read: CONST value: 1 }\n}\n";
  auto s = Compile(text);
  const DomainSnapshot& d = s->ForDomain(1);
  std::vector<DomainSnapshot::Interval> table = d.ranges();
  auto scan = [&](uint32_t msr) -> const MsrEntry* {
    for (const auto& iv : table) {
      if (iv.first <= msr && msr <= iv.last) return &iv.entry;
    }
    return nullptr;
  };
  std::vector<uint32_t> probes;
  for (uint32_t m = 0x100; m < 0x600; ++m) probes.push_back(m);
  for (uint32_t m : {0xffffu, 0x10000u, 0x10001u, 0x200ffu, 0x20100u, 0x20004u, 0x20005u,
                     0x300ffu, 0x30100u, 0x7ffffu, 0x80000u, 0x50000u}) {
    probes.push_back(m);
  }
  for (uint32_t m : probes) {
    if (m == 0x20010) continue;  // the single
    const MsrEntry* want = scan(m);
    const MsrEntry& got = d.Lookup(m);
    if (want == nullptr) {
      EXPECT_TRUE(got.unknown) << std::hex << m;
    } else {
      EXPECT_EQ(got.read, want->read) << std::hex << m;
      EXPECT_FALSE(got.unknown) << std::hex << m;
    }
  }
  EXPECT_EQ(d.Lookup(0x20010).read, R::CONST);
  EXPECT_EQ(d.Lookup(0x50000).read, R::ZERO);        // inside a wide range, no boundary page
  EXPECT_EQ(d.Lookup(0x25000).read, R::PASSTHROUGH);  // narrower range wins
}

}  // namespace
}  // namespace pvemu::policy
