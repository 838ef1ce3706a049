// enforce::CompileMsrFilter against its contract (enforce/kvm_msr_filter.h,
// section 2): exactly the MSRs the domain's effective policy names exit, and
// the PMU MSRs while the vPMU is off; everything else stays with KVM; the
// filter always fits KVM's limits (16 ranges, 0x600 bitmap bytes each) in
// KVM's bit convention (a set bit lets KVM handle the MSR); and a policy KVM
// cannot express is refused naming its rules.
#include "enforce/kvm_msr_filter.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "policy/compile.h"
#include "policy/loader.h"
#include "tests/status_matchers.h"

namespace pvemu::enforce {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Intervals = std::vector<std::pair<uint32_t, uint32_t>>;

// The domain snapshot of `text` for `domain` on a `host` host. The file is
// "t.textproto", so rules are located as "t.textproto:LINE".
std::unique_ptr<const policy::DomainSnapshot> Domain(const std::string& text, uint32_t domain = 1,
                                                     v1::Vendor host = v1::INTEL) {
  absl::StatusOr<policy::LoadedPolicy> loaded = policy::ParsePolicy(text, "t.textproto");
  EXPECT_THAT(loaded, IsOk()) << text;
  if (!loaded.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<const policy::DomainSnapshot>> d =
      policy::CompileDomain(loaded->policy, loaded->source, host, domain);
  EXPECT_THAT(d, IsOk()) << text;
  return d.ok() ? *std::move(d) : nullptr;
}

// A policy whose default layer holds `rules`, with the vPMU on so that only
// the rules name MSRs (the vPMU-off PMU MSRs have their own tests).
std::string WithRules(const std::string& rules, const std::string& layer_extra = "") {
  return absl::StrCat("default {\n  vpmu: true\n", layer_extra, rules, "}\n");
}

std::string Single(uint32_t msr) {
  return absl::StrCat("  msr { msr: \"0x", absl::Hex(msr), "\" read: ZERO write: IGNORE }\n");
}

std::string Range(uint32_t first, uint32_t last) {
  return absl::StrCat("  msr { range { first: \"0x", absl::Hex(first), "\" last: \"0x",
                      absl::Hex(last), "\" } read: ZERO write: IGNORE }\n");
}

absl::StatusOr<MsrFilter> FilterOf(const std::string& text, uint32_t domain = 1,
                                   v1::Vendor host = v1::INTEL) {
  auto d = Domain(text, domain, host);
  if (d == nullptr) return absl::InternalError("the test's policy did not compile");
  return CompileMsrFilter(*d);
}

bool BitSet(const FilterRange& r, uint32_t msr) {
  const uint32_t i = msr - r.base;
  return (r.bitmap[i / 8] >> (i % 8)) & 1;
}

bool InIntervals(const Intervals& intervals, uint32_t msr) {
  for (const auto& [first, last] : intervals) {
    if (msr >= first && msr <= last) return true;
  }
  return false;
}

// What every filter must be, whatever the policy: KVM's limits, and ranges
// and `exiting` that say the same thing, bit for bit.
void ExpectWellFormed(const MsrFilter& f) {
  ASSERT_LE(f.ranges.size(), kMaxFilterRanges);
  uint64_t count = 0;
  for (size_t i = 0; i < f.exiting.size(); ++i) {
    const auto& [first, last] = f.exiting[i];
    ASSERT_LE(first, last);
    if (i > 0) {
      // Sorted, disjoint and not adjacent (else they would be one interval).
      ASSERT_GT(uint64_t{first}, uint64_t{f.exiting[i - 1].second} + 1) << i;
    }
    count += uint64_t{last} - first + 1;
  }
  EXPECT_EQ(f.exiting_count(), count);
  for (size_t i = 0; i < f.ranges.size(); ++i) {
    const FilterRange& r = f.ranges[i];
    SCOPED_TRACE(absl::StrCat("range ", i, " base 0x", absl::Hex(r.base), " nmsrs 0x",
                              absl::Hex(r.nmsrs)));
    ASSERT_GT(r.nmsrs, 0u);
    ASSERT_LE(r.nmsrs, kMaxMsrsPerRange);
    // KVM copies BITS_TO_LONGS(nmsrs) * sizeof(long) bytes from the bitmap
    // (kvm_add_msr_filter), so a shorter one would make it read past the end.
    ASSERT_EQ(r.bitmap.size(), (r.nmsrs + 63) / 64 * 8);
    ASSERT_LE(r.bitmap.size(), kMaxBitmapBytes);
    ASSERT_LE(uint64_t{r.base} + r.nmsrs - 1, 0xffffffffu);
    if (i > 0) {
      const FilterRange& prev = f.ranges[i - 1];
      ASSERT_GE(uint64_t{r.base}, uint64_t{prev.base} + prev.nmsrs) << "sorted and disjoint";
    }
    for (uint64_t m = r.base; m < uint64_t{r.base} + r.nmsrs; ++m) {
      const uint32_t msr = static_cast<uint32_t>(m);
      // KVM's convention: a set bit lets KVM handle the MSR.
      ASSERT_EQ(!BitSet(r, msr), InIntervals(f.exiting, msr)) << absl::StrCat("msr 0x", absl::Hex(msr));
      ASSERT_EQ(r.Exits(msr), !BitSet(r, msr)) << absl::StrCat("msr 0x", absl::Hex(msr));
    }
  }
  // An exiting MSR outside every range would stay with KVM (the filter
  // allows by default), so each one must lie in a range with its bit clear.
  for (const auto& [first, last] : f.exiting) {
    for (uint64_t m = first; m <= last; ++m) {
      const uint32_t msr = static_cast<uint32_t>(m);
      const bool covered = std::any_of(f.ranges.begin(), f.ranges.end(), [&](const FilterRange& r) {
        return msr >= r.base && uint64_t{msr} < uint64_t{r.base} + r.nmsrs;
      });
      ASSERT_TRUE(covered) << absl::StrCat("exiting msr 0x", absl::Hex(msr), " is in no range");
      ASSERT_TRUE(f.Exits(msr));
    }
  }
}

TEST(MsrFilter, ExactlyTheNamedSinglesAndRangesExit) {
  auto f = FilterOf(WithRules(Single(0x1b0) + Single(0x19a) + Range(0xc0010061, 0xc001006b) +
                              Range(0x40000000, 0x40000003)));
  ASSERT_THAT(f, IsOk());
  ExpectWellFormed(*f);
  EXPECT_THAT(f->exiting, ElementsAre(std::pair{0x19au, 0x19au}, std::pair{0x1b0u, 0x1b0u},
                                      std::pair{0x40000000u, 0x40000003u},
                                      std::pair{0xc0010061u, 0xc001006bu}));
  EXPECT_EQ(f->exiting_count(), 2u + 4u + 11u);
  for (uint32_t msr : {0x19au, 0x1b0u, 0x40000000u, 0x40000003u, 0xc0010061u, 0xc0010066u,
                       0xc001006bu}) {
    EXPECT_TRUE(f->Exits(msr)) << std::hex << msr;
  }
  // Neighbours, and what KVM emulates, stay with KVM.
  for (uint32_t msr : {0x199u, 0x19bu, 0x1afu, 0x1b1u, 0x3fffffffu, 0x40000004u, 0xc0010060u,
                       0xc001006cu, 0x10u, 0x1bu, 0xc0000080u, 0x277u}) {
    EXPECT_FALSE(f->Exits(msr)) << std::hex << msr;
  }
}

// Grouping nearby named MSRs into one range must not make the MSRs between
// them exit: each range carries per-MSR bits.
TEST(MsrFilter, AnUnnamedNeighbourInsideARangesBitmapStaysWithKvm) {
  auto f = FilterOf(WithRules(Single(0x10) + Single(0x20) + Single(0x2ff0)));
  ASSERT_THAT(f, IsOk());
  ExpectWellFormed(*f);
  EXPECT_EQ(f->exiting_count(), 3u);
  // However the ranges are laid out, some range spans 0x10..0x20.
  const FilterRange* spanning = nullptr;
  for (const FilterRange& r : f->ranges) {
    if (r.base <= 0x10 && uint64_t{r.base} + r.nmsrs > 0x20) spanning = &r;
  }
  ASSERT_NE(spanning, nullptr) << "0x10 and 0x20 fit one range; a filter needs few ranges";
  for (uint32_t msr = 0x11; msr < 0x20; ++msr) {
    EXPECT_TRUE(BitSet(*spanning, msr)) << std::hex << msr;
    EXPECT_FALSE(f->Exits(msr)) << std::hex << msr;
  }
  EXPECT_FALSE(BitSet(*spanning, 0x10));
  EXPECT_FALSE(BitSet(*spanning, 0x20));
}

// KVM_X86_SET_MSR_FILTER: a set bit allows (KVM handles the MSR), a clear
// bit denies (the access exits to user space).
TEST(MsrFilter, BitmapBitsFollowKvmsConventionSetMeansKvmHandles) {
  auto f = FilterOf(WithRules(Single(0x1b0)));
  ASSERT_THAT(f, IsOk());
  ExpectWellFormed(*f);
  ASSERT_EQ(f->ranges.size(), 1u);
  const FilterRange& r = f->ranges[0];
  ASSERT_LE(r.base, 0x1b0u);
  const uint32_t bit = 0x1b0 - r.base;
  EXPECT_EQ((r.bitmap[bit / 8] >> (bit % 8)) & 1, 0) << "the named MSR's bit is clear";
  for (uint32_t i = 0; i < r.nmsrs; ++i) {
    if (i == bit) continue;
    ASSERT_EQ((r.bitmap[i / 8] >> (i % 8)) & 1, 1) << "bit " << i << " of an unnamed MSR is set";
  }
  EXPECT_TRUE(r.Exits(0x1b0));
  EXPECT_TRUE(f->SameExits(*f));
}

TEST(MsrFilter, RulesOfBothLayersAndTheDomainsOverlayExit) {
  const std::string text =
      "default {\n"
      "  vpmu: true\n"
      "  msr { msr: \"0x1b0\" read: ZERO }\n"
      "}\n"
      "domain {\n"
      "  domain: 3\n"
      "  msr { msr: \"0x19a\" read: ZERO }\n"
      "  msr { range { first: \"0x40000010\" last: \"0x40000011\" } read: ZERO }\n"
      "}\n";
  auto three = FilterOf(text, 3);
  ASSERT_THAT(three, IsOk());
  ExpectWellFormed(*three);
  EXPECT_THAT(three->exiting, ElementsAre(std::pair{0x19au, 0x19au}, std::pair{0x1b0u, 0x1b0u},
                                          std::pair{0x40000010u, 0x40000011u}));
  // Another domain has only the default layer's.
  auto four = FilterOf(text, 4);
  ASSERT_THAT(four, IsOk());
  EXPECT_THAT(four->exiting, ElementsAre(std::pair{0x1b0u, 0x1b0u}));
  EXPECT_FALSE(three->SameExits(*four));
}

// A rule whose conditions do not match this host and domain is dropped at
// compile time, so it names nothing and its MSR stays with KVM.
TEST(MsrFilter, RulesWhoseConditionsDoNotMatchAreNotNamed) {
  const std::string text = WithRules(
      "  msr { msr: \"0x1b0\" host_vendor: AMD read: ZERO }\n"
      "  msr { msr: \"0x19a\" hardware_domain: true read: ZERO }\n"
      "  msr { msr: \"0x1a0\" hardware_domain: false read: ZERO }\n"
      "  msr { msr: \"0xc0011020\" guest_vendor: AMD read: ZERO }\n");
  auto intel_domu = FilterOf(text, 1, v1::INTEL);
  ASSERT_THAT(intel_domu, IsOk());
  EXPECT_THAT(intel_domu->exiting, ElementsAre(std::pair{0x1a0u, 0x1a0u}));
  auto intel_dom0 = FilterOf(text, 0, v1::INTEL);
  ASSERT_THAT(intel_dom0, IsOk());
  EXPECT_THAT(intel_dom0->exiting, ElementsAre(std::pair{0x19au, 0x19au}));
  // On an AMD host the guest sees AMD too (no guest_vendor set otherwise).
  auto amd_domu = FilterOf(text, 1, v1::AMD);
  ASSERT_THAT(amd_domu, IsOk());
  EXPECT_THAT(amd_domu->exiting, ElementsAre(std::pair{0x1a0u, 0x1a0u}, std::pair{0x1b0u, 0x1b0u},
                                             std::pair{0xc0011020u, 0xc0011020u}));
}

// While the vPMU is off the PMU MSRs #GP on every trap source, so on KVM they
// must exit; with it on (and no rule naming them) they stay with KVM's vPMU.
TEST(MsrFilter, PmuMsrsExitWhileTheVpmuIsOffAndNotWhenOn) {
  const uint32_t pmu[] = {0xc1, 0xc8, 0x186, 0x309, 0x38f, 0x4c1, 0xc0010000, 0xc0010200};
  auto off = FilterOf("default { vpmu: false }\n");
  ASSERT_THAT(off, IsOk());
  ExpectWellFormed(*off);
  for (uint32_t msr : pmu) EXPECT_TRUE(off->Exits(msr)) << std::hex << msr;
  // Exactly the PMU MSRs: nothing else exits in a policy without rules.
  for (const auto& [first, last] : off->exiting) {
    for (uint64_t m = first; m <= last; ++m) {
      ASSERT_TRUE(policy::IsPmuMsr(static_cast<uint32_t>(m))) << std::hex << m;
    }
  }
  auto unset = FilterOf("");  // unset means off
  ASSERT_THAT(unset, IsOk());
  EXPECT_TRUE(unset->SameExits(*off));

  auto on = FilterOf("default { vpmu: true }\n");
  ASSERT_THAT(on, IsOk());
  EXPECT_TRUE(on->exiting.empty());
  EXPECT_EQ(on->exiting_count(), 0u);
  for (uint32_t msr : pmu) EXPECT_FALSE(on->Exits(msr)) << std::hex << msr;

  // A domain overlay turns it on for that domain only.
  const std::string overlay = "default { vpmu: false }\ndomain { domain: 2 vpmu: true }\n";
  auto two = FilterOf(overlay, 2);
  auto five = FilterOf(overlay, 5);
  ASSERT_THAT(two, IsOk());
  ASSERT_THAT(five, IsOk());
  EXPECT_FALSE(two->Exits(0xc1));
  EXPECT_TRUE(five->Exits(0xc1));
}

TEST(MsrFilter, AnX2apicMsrIsRefusedNamingTheRulesFileAndLine) {
  const std::string text =
      "default {\n"
      "  vpmu: true\n"
      "  msr { msr: \"0x1b0\" read: ZERO }\n"
      "  msr { msr: \"0x808\" read: ZERO }\n"
      "}\n";
  EXPECT_THAT(FilterOf(text), StatusIs(absl::StatusCode::kInvalidArgument,
                                       AllOf(HasSubstr("t.textproto:4"), HasSubstr("x2APIC"),
                                             Not(HasSubstr("t.textproto:3")))));
  // A range that only overlaps 0x800-0x8ff is refused too, from an overlay.
  const std::string overlap =
      "default { vpmu: true }\n"
      "domain {\n"
      "  domain: 1\n"
      "  msr { range { first: \"0x7f0\" last: \"0x800\" } read: ZERO }\n"
      "}\n";
  EXPECT_THAT(FilterOf(overlap),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.textproto:4")));
  // Both ends of the x2APIC span, and just outside it.
  EXPECT_THAT(FilterOf(WithRules(Single(0x8ff))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.textproto:3")));
  EXPECT_THAT(FilterOf(WithRules(Single(0x7ff) + Single(0x900))), IsOk());
}

// 17 MSRs, each more than 0x3000 from the next, need 17 ranges.
TEST(MsrFilter, MoreThanSixteenRangesIsRefusedNamingTheRules) {
  std::string sixteen;
  for (uint32_t i = 1; i <= 16; ++i) sixteen += Single(i * 0x10000);
  auto fits = FilterOf(WithRules(sixteen));
  ASSERT_THAT(fits, IsOk());
  ExpectWellFormed(*fits);
  EXPECT_EQ(fits->ranges.size(), 16u);

  // Rule i is at line 2 + i (line 1 "default {", line 2 "vpmu: true").
  absl::StatusOr<MsrFilter> refused = FilterOf(WithRules(sixteen + Single(17 * 0x10000)));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("16"), HasSubstr("t.textproto:19"))));
}

// One range holds at most 0x3000 MSRs (0x600 bitmap bytes): a wider rule is
// split across ranges, and 16 full ranges is the most a filter holds.
TEST(MsrFilter, ARangeWiderThan0x3000MsrsIsSplitAcrossRanges) {
  auto wide = FilterOf(WithRules(Range(0x40000000, 0x40007fff)));
  ASSERT_THAT(wide, IsOk());
  ExpectWellFormed(*wide);
  EXPECT_EQ(wide->ranges.size(), 3u);
  EXPECT_EQ(wide->exiting_count(), 0x8000u);
  EXPECT_FALSE(wide->Exits(0x3fffffff));
  EXPECT_FALSE(wide->Exits(0x40008000));

  const uint32_t base = 0x100000;
  auto widest = FilterOf(WithRules(Range(base, base + 16 * kMaxMsrsPerRange - 1)));
  ASSERT_THAT(widest, IsOk());
  ExpectWellFormed(*widest);
  EXPECT_EQ(widest->ranges.size(), 16u);
  EXPECT_THAT(FilterOf(WithRules(Range(base, base + 16 * kMaxMsrsPerRange))),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.textproto:3")));
}

// Whatever the policy, a filter that compiles fits KVM's limits and means
// what `exiting` says, bit for bit; one that does not is InvalidArgument.
TEST(MsrFilter, RandomPoliciesAlwaysFitKvmsLimitsOrAreRefused) {
  std::mt19937 rng(18);
  const uint32_t bases[] = {0x0, 0x1000, 0x4b564d00, 0x40000000, 0xc0000000, 0xc0010000,
                            0xc0011000, 0x12345670};
  int compiled = 0;
  for (int round = 0; round < 60; ++round) {
    std::string rules;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const uint32_t first = bases[rng() % std::size(bases)] + rng() % 0x4000;
      if (first >= 0x800 && first <= 0x8ff) continue;  // x2APIC: refused, tested above
      if (rng() % 3 == 0) {
        uint32_t last = first + rng() % (rng() % 4 == 0 ? 0x5000 : 0x40);
        if (first < 0x800 && last >= 0x800) last = 0x7ff;
        rules += Range(first, last);
      } else {
        rules += Single(first);
      }
    }
    // Identical targets would tie; the loader reports those, so skip them.
    absl::StatusOr<policy::LoadedPolicy> loaded =
        policy::ParsePolicy(WithRules(rules, round % 2 ? "" : "  vpmu: false\n"), "t.textproto");
    if (!loaded.ok()) continue;
    absl::StatusOr<MsrFilter> f =
        FilterOf(WithRules(rules, round % 2 ? "" : "  vpmu: false\n"));
    if (!f.ok()) {
      EXPECT_THAT(f, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.textproto:")));
      continue;
    }
    ++compiled;
    SCOPED_TRACE(rules);
    ExpectWellFormed(*f);
  }
  EXPECT_GT(compiled, 20);
}

TEST(MsrFilter, TextAndJsonDescribeTheSameFilter) {
  auto f = FilterOf(WithRules(Single(0x1b0) + Range(0xc0010061, 0xc001006b)));
  ASSERT_THAT(f, IsOk());
  const std::string text = FilterToText(*f);
  EXPECT_THAT(text, HasSubstr("IA32_ENERGY_PERF_BIAS"));  // a single MSR gets its name
  EXPECT_THAT(text, HasSubstr("range 0: base 0x"));

  google::protobuf::Struct json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(FilterToJson(*f), &json).ok())
      << FilterToJson(*f);
  const auto& fields = json.fields();
  ASSERT_TRUE(fields.contains("ranges"));
  ASSERT_TRUE(fields.contains("exiting"));
  ASSERT_TRUE(fields.contains("exiting_count"));
  EXPECT_EQ(fields.at("exiting_count").number_value(), 12);
  EXPECT_EQ(fields.at("ranges").list_value().values_size(), static_cast<int>(f->ranges.size()));
  const auto& exiting = fields.at("exiting").list_value().values();
  ASSERT_EQ(exiting.size(), 2);
  EXPECT_EQ(exiting[0].struct_value().fields().at("first").string_value(), "0x1b0");
  EXPECT_EQ(exiting[1].struct_value().fields().at("last").string_value(), "0xc001006b");
}

TEST(MsrFilter, ExplainKvmSaysWhetherAnMsrExitsAndWhy) {
  auto d = Domain(
      "default {\n"
      "  unknown_msr: UNKNOWN_RELAXED\n"
      "  msr { msr: \"0x1b0\" read: ZERO }\n"
      "}\n");
  ASSERT_NE(d, nullptr);
  absl::StatusOr<MsrFilter> f = CompileMsrFilter(*d);
  ASSERT_THAT(f, IsOk());
  EXPECT_THAT(ExplainKvm(*f, *d, 0x1b0), AllOf(HasSubstr("exits to pvemu"),
                                                HasSubstr("t.textproto:3")));
  EXPECT_THAT(ExplainKvm(*f, *d, 0xc1), AllOf(HasSubstr("exits to pvemu"), HasSubstr("vPMU")));
  EXPECT_THAT(ExplainKvm(*f, *d, 0xc0000080), AllOf(HasSubstr("stays with KVM"),
                                                     HasSubstr("UNKNOWN"), HasSubstr("INVAL")));
}

// A swap's first step (DataPlane::Apply): what both generations make exit
// exits, in the old filter's ranges; what only one names stays with KVM.
TEST(IntersectExitsTest, OnlyTheMsrsBothFiltersMakeExitDoInTheFirstFiltersRanges) {
  auto old_domain = Domain(WithRules(Single(0x277) + Single(0x12345680) + Range(0x1000, 0x10ff)));
  auto new_domain = Domain(WithRules(Single(0x12345680) + Single(0x12345681) + Range(0x1080, 0x117f)));
  ASSERT_NE(old_domain, nullptr);
  ASSERT_NE(new_domain, nullptr);
  absl::StatusOr<MsrFilter> a = CompileMsrFilter(*old_domain);
  absl::StatusOr<MsrFilter> b = CompileMsrFilter(*new_domain);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  const MsrFilter both = IntersectExits(*a, *b);
  EXPECT_EQ(both.exiting, (Intervals{{0x1080, 0x10ff}, {0x12345680, 0x12345680}}));
  ASSERT_EQ(both.ranges.size(), a->ranges.size());
  for (size_t r = 0; r < both.ranges.size(); ++r) {
    EXPECT_EQ(both.ranges[r].base, a->ranges[r].base);
    EXPECT_EQ(both.ranges[r].nmsrs, a->ranges[r].nmsrs);
    for (uint32_t bit = 0; bit < both.ranges[r].nmsrs; ++bit) {
      const uint32_t msr = both.ranges[r].base + bit;
      EXPECT_EQ(both.ranges[r].Exits(msr), a->Exits(msr) && b->Exits(msr)) << std::hex << msr;
    }
  }
  for (uint32_t msr : {0x277u, 0x1000u, 0x107fu, 0x12345681u, 0x1100u}) {
    EXPECT_FALSE(both.Exits(msr)) << std::hex << msr;
  }
}

}  // namespace
}  // namespace pvemu::enforce
