// enforce::TranslateForXen against its contract (client/xen_config.h,
// docs/CLI.md "xen-config"): what Xen's xl.cfg can carry becomes msr_relaxed=,
// cpuid=[...] in libxl's xend syntax and tsc_mode=; everything else is a
// report line naming the rule's FILE:LINE. Policies are real files, loaded
// and compiled as pvemuctl does.
#include "enforce/xen_config.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/compile.h"
#include "policy/loader.h"
#include "tests/policy/test_util.h"
#include "tests/status_matchers.h"

namespace pvemu::enforce {
namespace {

using ::pvemu::testing::IsOk;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class XenConfigTest : public ::testing::Test {
 protected:
  // `text` written to DIR/p.textproto, loaded and compiled for `domain` on
  // an Intel host, then translated.
  XenConfig Translate(const std::string& text, uint32_t domain = 1,
                      v1::Vendor host = v1::INTEL) {
    path_ = dir_.path() + "/p.textproto";
    std::ofstream(path_) << text;
    absl::StatusOr<policy::LoadedPolicy> loaded = policy::LoadPolicyFile(path_);
    EXPECT_THAT(loaded, IsOk()) << text;
    if (!loaded.ok()) return {};
    absl::StatusOr<std::shared_ptr<const policy::Snapshot>> snapshot =
        policy::CompilePolicy(loaded->policy, loaded->source, host, 1);
    EXPECT_THAT(snapshot, IsOk()) << text;
    if (!snapshot.ok()) return {};
    snapshot_ = *snapshot;
    XenConfig c = TranslateForXen(snapshot_->ForDomain(domain), host);
    // The built-in vPMU-off line ends nearly every report; its own test
    // checks it, the others look at the policy's rules.
    if (!c.report.empty() && c.report.back().origin == kVpmuOff) {
      vpmu_off_ = c.report.back();
      c.report.pop_back();
    }
    return c;
  }
  static constexpr char kVpmuOff[] = "built-in: vpmu off";
  std::optional<XenReportLine> vpmu_off_;
  // "FILE:LINE" of line `line` of the last policy.
  std::string At(int line) const { return absl::StrCat(path_, ":", line); }

  policy::testutil::TempDir dir_;
  std::string path_;
  std::shared_ptr<const policy::Snapshot> snapshot_;
};

auto ReportLine(const std::string& origin, const std::string& what, const std::string& why) {
  return AllOf(Field(&XenReportLine::origin, origin), Field(&XenReportLine::what, what),
               Field(&XenReportLine::why, HasSubstr(why)));
}

TEST_F(XenConfigTest, EmptyPolicyGivesOnlyMsrRelaxedOff) {
  XenConfig c = Translate("default {}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(c.report, IsEmpty());
  EXPECT_EQ(XenConfigToText(c), "msr_relaxed=0\n");
}

// pvemu's PMU MSRs #GP while the vPMU is off (policy/compile.h) is an MSR
// rule like any other for Xen: one line, last, and none with the vPMU on.
TEST_F(XenConfigTest, TheBuiltInVpmuOffRuleIsReportedOnce) {
  Translate("default {}\n");
  ASSERT_TRUE(vpmu_off_.has_value());
  EXPECT_THAT(*vpmu_off_, ReportLine(kVpmuOff, "PMU MSRs #GP while the domain's vPMU is off",
                                     "never its reads"));
  vpmu_off_.reset();
  Translate("default {\n  vpmu: true\n}\n");
  EXPECT_FALSE(vpmu_off_.has_value());
}

TEST_F(XenConfigTest, UnknownGpIsMsrRelaxedOff) {
  XenConfig c = Translate("default { unknown_msr: UNKNOWN_GP }\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(c.report, IsEmpty());
}

TEST_F(XenConfigTest, UnknownRelaxedIsMsrRelaxedOnAndSaysWhereXenDiffers) {
  XenConfig c = Translate("default {\n  unknown_msr: UNKNOWN_RELAXED\n}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=1\n");
  EXPECT_THAT(c.report, ElementsAre(ReportLine(At(2), "unknown_msr: UNKNOWN_RELAXED",
                                               "the host itself does not have")));
}

TEST_F(XenConfigTest, UnknownHostCannotBeExpressedAndKeepsXensGp) {
  XenConfig c = Translate("default {\n  unknown_msr: UNKNOWN_HOST\n}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(c.report, ElementsAre(ReportLine(At(2), "unknown_msr: UNKNOWN_HOST",
                                               "Xen >= 4.15 never passes host MSR values")));
}

TEST_F(XenConfigTest, ConstLeafGivesEveryBitOfEveryRegister) {
  XenConfig c = Translate(
      "default {\n  cpuid { leaf: 6 source: CONST set { eax: 0x80000004 edx: 1 } }\n}\n");
  EXPECT_THAT(c.fragment,
              HasSubstr("cpuid=[\n    \"0x6:eax=10000000000000000000000000000100,"
                        "ebx=00000000000000000000000000000000,"
                        "ecx=00000000000000000000000000000000,"
                        "edx=00000000000000000000000000000001\"\n]\n"));
  EXPECT_THAT(c.report, IsEmpty());
}

TEST_F(XenConfigTest, HostLeafClearsToZeroSetsToOneAndLeavesTheRestToXen) {
  // ecx bit 31 cleared, edx bit 0 set, eax/ebx untouched (left out).
  XenConfig c = Translate(
      "default {\n  cpuid { leaf: 1 source: HOST clear { ecx: 0x80000000 } set { edx: 1 } }\n}\n");
  EXPECT_THAT(c.fragment, HasSubstr("\"0x1:ecx=0xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx,"
                                    "edx=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx1\""));
  EXPECT_THAT(c.fragment, Not(HasSubstr("eax=")));
  EXPECT_THAT(c.report, IsEmpty());
}

TEST_F(XenConfigTest, SetWinsOverClearAsPvemuAppliesThem) {
  XenConfig c = Translate(
      "default {\n  cpuid { leaf: 1 clear { ecx: 3 } set { ecx: 1 } }\n}\n");
  EXPECT_THAT(c.fragment, HasSubstr("\"0x1:ecx=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx01\""));
}

TEST_F(XenConfigTest, HostLeafThatChangesNothingIsLeftOut) {
  XenConfig c = Translate("default {\n  cpuid { leaf: 1 source: HOST }\n}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(c.report, IsEmpty());
}

TEST_F(XenConfigTest, SubleafLeafNamesItsSubleaf) {
  XenConfig c = Translate(
      "default {\n  cpuid { leaf: 7 subleaf: 0 clear { ebx: 0x10 } }\n}\n");
  EXPECT_THAT(c.fragment, HasSubstr("\"0x7,0x0:ebx=xxxxxxxxxxxxxxxxxxxxxxxxxxx0xxxx\""));
  EXPECT_THAT(c.report, IsEmpty());
}

// xc_cpuid_xend_policy looks entries up by (leaf, subleaf) in Xen's
// serialised policy: a subleaf must be named exactly for 0x4, 0x7, 0xb, 0xd.
TEST_F(XenConfigTest, SubleafMismatchWithXensPolicyIsReported) {
  XenConfig c = Translate(
      "default {\n"
      "  cpuid { leaf: 7 clear { ebx: 1 } }\n"
      "  cpuid { leaf: 1 subleaf: 0 clear { ecx: 1 } }\n"
      "}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(c.report, ElementsAre(ReportLine(At(3), "CPUID leaf 0x1 subleaf 0x0",
                                               "drop the subleaf"),
                                    ReportLine(At(2), "CPUID leaf 0x7", "name the subleaves")));
}

TEST_F(XenConfigTest, HypervisorLeafIsReportedNotEmitted) {
  XenConfig c = Translate(
      "default {\n"
      "  cpuid { leaf: 0x40000000 source: CONST set { eax: 0x40000001 } }\n"
      "  cpuid { leaf: 0x4fffffff clear { eax: 1 } }\n"
      "}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(c.report,
              ElementsAre(ReportLine(At(2), "CPUID leaf 0x40000000", "hypervisor leaves"),
                          ReportLine(At(3), "CPUID leaf 0x4fffffff", "hypervisor leaves")));
}

TEST_F(XenConfigTest, LeafZeroAndAnotherGuestVendorAreReported) {
  XenConfig c = Translate(
      "default {\n"
      "  guest_vendor: AMD\n"
      "  cpuid { leaf: 0 source: CONST set { eax: 0xd } }\n"
      "}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(c.report, ElementsAre(ReportLine(At(3), "CPUID leaf 0x0", "vendor string"),
                                    ReportLine(At(2), "guest_vendor: AMD", "(INTEL)")));
  // The host's own vendor named explicitly changes nothing.
  EXPECT_THAT(Translate("default {\n  guest_vendor: INTEL\n}\n").report, IsEmpty());
}

TEST_F(XenConfigTest, EveryMsrRuleIsReportedWithItsFileAndLine) {
  XenConfig c = Translate(
      "default {\n"
      "  msr { msr: \"IA32_TSC\" read: ZERO write: IGNORE }\n"
      "  msr { range { first: \"0x200\" last: \"0x20f\" } read: ZERO write: IGNORE }\n"
      "}\n"
      "domain {\n"
      "  domain: 1\n"
      "  msr { msr: \"0x1a0\" read: ZERO }\n"
      "}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  const std::string why = "under pvemud --monitor-domain pvemu decides this rule's writes";
  EXPECT_THAT(c.report, ElementsAre(ReportLine(At(2), "MSR 0x10 IA32_TIME_STAMP_COUNTER", why),
                                    ReportLine(At(7), "MSR 0x1a0 IA32_MISC_ENABLE", why),
                                    ReportLine(At(3), "MSRs 0x200-0x20f", why)));
  EXPECT_THAT(c.report[0].why, HasSubstr("never its reads"));
  // Domain 2 has no overlay: the default layer's rules only.
  EXPECT_THAT(TranslateForXen(snapshot_->ForDomain(2), v1::INTEL).report,
              Not(Contains(Field(&XenReportLine::what, "MSR 0x1a0 IA32_MISC_ENABLE"))));
}

TEST_F(XenConfigTest, IoPortRangesAreReportedPointingAtMonitorDomain) {
  XenConfig c = Translate(
      "default {\n"
      "  io_port { first: 0x3f8 last: 0x3ff }\n"
      "  io_port { first: 0x80 last: 0x80 }\n"
      "}\n");
  EXPECT_EQ(c.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(c.report, ElementsAre(ReportLine(At(2), "io_port 0x3f8-0x3ff", "see --monitor-domain"),
                                    ReportLine(At(3), "io_port 0x80", "no deny list")));
}

TEST_F(XenConfigTest, TscModesMapToTscModeAndOffsetAndFrequencyAreReported) {
  XenConfig native = Translate("default {\n  tsc { mode: NATIVE }\n}\n");
  EXPECT_EQ(native.fragment, "msr_relaxed=0\ntsc_mode=\"native\"\n");
  EXPECT_THAT(native.report, IsEmpty());

  XenConfig offset = Translate("default {\n  tsc { mode: OFFSET offset: -100 }\n}\n");
  EXPECT_EQ(offset.fragment, "msr_relaxed=0\ntsc_mode=\"native\"\n");
  EXPECT_THAT(offset.report, ElementsAre(ReportLine(At(2), "TSC offset -100", "no TSC offset")));

  XenConfig emulated =
      Translate("default {\n  tsc { mode: EMULATED frequency_khz: 1000000 }\n}\n");
  EXPECT_EQ(emulated.fragment, "msr_relaxed=0\ntsc_mode=\"always_emulate\"\n");
  EXPECT_THAT(emulated.report,
              ElementsAre(ReportLine(At(2), "TSC frequency 1000000 kHz", "no TSC frequency")));
}

TEST_F(XenConfigTest, VpmuOnIsReportedBecauseXlCfgVpmuIsArmOnly) {
  XenConfig on = Translate("default {\n  vpmu: true\n}\n");
  EXPECT_EQ(on.fragment, "msr_relaxed=0\n");
  EXPECT_THAT(on.report, ElementsAre(ReportLine(At(2), "vpmu: true", "ARM only")));
  EXPECT_THAT(Translate("default {\n  vpmu: false\n}\n").report, IsEmpty());
}

// The whole text is valid xl.cfg: settings, then one comment per report line.
TEST_F(XenConfigTest, TextIsTheFragmentThenOneCommentPerReportLine) {
  XenConfig c = Translate(
      "default {\n"
      "  unknown_msr: UNKNOWN_HOST\n"
      "  io_port { first: 0x80 last: 0x80 }\n"
      "}\n");
  const std::string text = XenConfigToText(c);
  EXPECT_THAT(text, ::testing::StartsWith("msr_relaxed=0\n# not expressible: " + At(2) +
                                          ": unknown_msr: UNKNOWN_HOST: "));
  EXPECT_THAT(text, HasSubstr("\n# not expressible: " + At(3) + ": io_port 0x80: "));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
}

}  // namespace
}  // namespace pvemu::enforce
