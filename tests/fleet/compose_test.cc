// Fleet mode without etcd: the --fleet URL, the keys a host reads, and the
// composition of its layers (fleet/keys.h, compose.h).
#include "fleet/compose.h"

#include "fleet/applier.h"
#include "policy/store.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/compile.h"
#include "policy/explain.h"
#include "policy/shipped.h"
#include "fleet/keys.h"
#include "tests/status_matchers.h"

namespace pvemu::fleet {
namespace {

using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;

TEST(FleetUrlTest, PrefixIsThePathWithItsSlashAndDefaultsToPvemu) {
  absl::StatusOr<FleetUrl> url = ParseFleetUrl("etcd://127.0.0.1:2379/pvemu-bar");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->prefix, "/pvemu-bar");
  EXPECT_EQ(url->endpoints, std::vector<std::string>{"127.0.0.1:2379"});
  url = ParseFleetUrl("etcd://a:1,b:2");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->prefix, "/pvemu");
  EXPECT_EQ(url->endpoints.size(), 2u);
  EXPECT_THAT(ParseFleetUrl("http://a:1"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    HasSubstr("not an etcd:// URL")));
  EXPECT_THAT(ParseFleetUrl("etcd://a"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("endpoint 'a' is not HOST:PORT")));
}

TEST(FleetKeysTest, AHostsKeysNeverMatchAnotherHostWhoseIdStartsTheSame) {
  FleetKeys keys("/pvemu", "h1", {"web"});
  EXPECT_TRUE(keys.Classify("/pvemu/policy/host/h1").has_value());
  EXPECT_FALSE(keys.Classify("/pvemu/policy/host/h10").has_value());
  EXPECT_FALSE(keys.Classify("/pvemu/policy/host/h10/domain/1").has_value());
  EXPECT_TRUE(keys.Classify("/pvemu/policy/host/h1/domain/1").has_value());
  EXPECT_FALSE(keys.Classify("/pvemu/policy/class/webx").has_value());
  EXPECT_TRUE(keys.Classify("/pvemu/policy/class/web").has_value());
  // The domain range is "host/h1/domain/" and up: h10's keys are outside it.
  std::vector<FleetKeys::Watched> watched = keys.HostKeys();
  const FleetKeys::Watched& domains = watched.back();
  EXPECT_EQ(domains.key, "/pvemu/policy/host/h1/domain/");
  EXPECT_EQ(domains.range_end, "/pvemu/policy/host/h1/domain0");
  EXPECT_FALSE("/pvemu/policy/host/h10/domain/1" >= domains.key &&
               "/pvemu/policy/host/h10/domain/1" < domains.range_end);
}

TEST(LayerNameTest, ParsesTheFourLayersAndRefusesOthers) {
  EXPECT_EQ(ParseLevelName("class:gpu")->ToString(), "class:gpu");
  EXPECT_EQ(ParseLevelName("host:h1/domain:3")->domain, 3u);
  EXPECT_THAT(ParseLevelName("class:a/b"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one segment")));
  EXPECT_THAT(ParseLevelName("hosts:h1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--layer=class:NAME")));
}

class ComposeTest : public ::testing::Test {
 protected:
  policy::LoadedPolicy Base() {
    return *policy::ParsePolicy(policy::ShippedPolicy("default"), "default.textproto");
  }
  // How domain 1 on a host of `vendor` reads `msr` under the composition.
  std::string ReadAction(const policy::LoadedPolicy& composed, v1::Vendor vendor, uint32_t msr) {
    auto snap = policy::CompilePolicy(composed.policy, composed.source, vendor, 1);
    EXPECT_TRUE(snap.ok()) << snap.status();
    policy::Explanation e = policy::ExplainMsr(**snap, 1, msr, std::nullopt);
    return absl::StrCat(e.action, e.value.has_value() ? absl::StrCat(" ", *e.value) : "", " @",
                        e.source);
  }
  FleetKeys keys_{"/p", "h1", {"web", "gpu"}};
};

TEST_F(ComposeTest, HostOverClassOverDefaultOverBase) {
  LevelSet layers = {
      {"/p/policy/default", "default { msr { msr: \"0x1b0\" read: CONST value: 1 } }"},
      {"/p/policy/class/web", "default { msr { msr: \"0x1b0\" read: CONST value: 2 } }"},
      {"/p/policy/host/h1", "\n\ndefault { msr { msr: \"0x1b0\" read: CONST value: 3 } }"},
  };
  auto composed = Compose(Base(), keys_, layers, v1::INTEL);
  ASSERT_TRUE(composed.ok()) << composed.status();
  EXPECT_EQ(ReadAction(*composed, v1::INTEL, 0x1b0), "CONST 3 @/p/policy/host/h1:3");
  layers.erase("/p/policy/host/h1");
  composed = Compose(Base(), keys_, layers, v1::INTEL);
  EXPECT_EQ(ReadAction(*composed, v1::INTEL, 0x1b0), "CONST 2 @/p/policy/class/web:1");
  layers.erase("/p/policy/class/web");
  composed = Compose(Base(), keys_, layers, v1::INTEL);
  // The fleet default's unconditioned rule replaces the base's Intel rule.
  EXPECT_EQ(ReadAction(*composed, v1::INTEL, 0x1b0), "CONST 1 @/p/policy/default:1");
}

TEST_F(ComposeTest, RulesAfterAShadowedOneKeepTheirOwnLines) {
  // The fleet default shadows the first two of four rules; the two left move
  // to the front of the composed default and must still name their lines.
  LevelSet layers = {
      {"/p/policy/default",
       "default {\n"
       "  msr { msr: \"0x12345600\" read: ZERO write: GP }\n"
       "  msr { msr: \"0x12345601\" read: ZERO write: GP }\n"
       "  msr { msr: \"0x12345602\" read: CONST value: 2 write: GP }\n"
       "  msr { msr: \"0x12345603\" read: CONST value: 3 write: GP }\n"
       "}\n"},
      {"/p/policy/class/web",
       "default {\n"
       "  msr { msr: \"0x12345600\" read: CONST value: 7 write: GP }\n"
       "  msr { msr: \"0x12345601\" read: CONST value: 8 write: GP }\n"
       "}\n"},
  };
  auto composed = Compose(Base(), keys_, layers, v1::INTEL);
  ASSERT_TRUE(composed.ok()) << composed.status();
  EXPECT_EQ(ReadAction(*composed, v1::INTEL, 0x12345600), "CONST 7 @/p/policy/class/web:2");
  EXPECT_EQ(ReadAction(*composed, v1::INTEL, 0x12345601), "CONST 8 @/p/policy/class/web:3");
  EXPECT_EQ(ReadAction(*composed, v1::INTEL, 0x12345602), "CONST 2 @/p/policy/default:4");
  EXPECT_EQ(ReadAction(*composed, v1::INTEL, 0x12345603), "CONST 3 @/p/policy/default:5");
}

TEST_F(ComposeTest, ARuleForAnotherVendorLeavesTheBaseAsItIs) {
  LevelSet layers = {{"/p/policy/default",
                      "default { msr { msr: \"0x1b0\" host_vendor: AMD read: CONST value: 9 } }"}};
  auto intel = Compose(Base(), keys_, layers, v1::INTEL);
  ASSERT_TRUE(intel.ok()) << intel.status();
  EXPECT_THAT(ReadAction(*intel, v1::INTEL, 0x1b0), HasSubstr("PASSTHROUGH"));
  auto amd = Compose(Base(), keys_, layers, v1::AMD);
  ASSERT_TRUE(amd.ok()) << amd.status();
  EXPECT_EQ(ReadAction(*amd, v1::AMD, 0x1b0), "CONST 9 @/p/policy/default:1");
}

TEST_F(ComposeTest, TwoClassesDecidingOneRuleDifferentlyAreATieNamingBothKeys) {
  LevelSet layers = {
      {"/p/policy/class/web", "default {\n msr { msr: \"0x1b0\" read: ZERO }\n}"},
      {"/p/policy/class/gpu", "default {\n\n msr { msr: \"0x1b0\" read: GP }\n}"},
  };
  auto composed = Compose(Base(), keys_, layers, v1::INTEL);
  EXPECT_THAT(composed, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("/p/policy/class/web:2")));
  EXPECT_THAT(composed, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("/p/policy/class/gpu:3:")));
  v1::FleetError e = ErrorOf(composed.status(), layers);
  EXPECT_EQ(e.key(), "/p/policy/class/gpu");
  EXPECT_EQ(e.line(), 3u);
  // The same decision in both is no tie.
  layers["/p/policy/class/gpu"] = "default { msr { msr: \"0x1b0\" read: ZERO } }";
  EXPECT_TRUE(Compose(Base(), keys_, layers, v1::INTEL).ok());
}

// Found by fleet_value_fuzz: a fleet range that ties with a range of the
// host's base policy was refused with the base file named first, and
// `fleet status` showed no key. The key is the fleet value to change.
TEST_F(ComposeTest, ATieWithTheBasePolicyNamesTheFleetKey) {
  LevelSet layers = {{"/p/policy/default",
                      "default { msr { range { first: \"0xc5\" last: \"0xcc\" } read: ZERO } }"}};
  auto composed = Compose(Base(), keys_, layers, v1::INTEL);
  ASSERT_FALSE(composed.ok());
  EXPECT_THAT(composed.status().message(), HasSubstr("default.textproto:"));
  v1::FleetError e = ErrorOf(composed.status(), layers);
  EXPECT_EQ(e.key(), "/p/policy/default");
  EXPECT_EQ(e.line(), 1u);
  EXPECT_EQ(e.message(), composed.status().message());
}

TEST_F(ComposeTest, ABadLayerIsReportedWithItsKeyAndLine) {
  LevelSet layers = {{"/p/policy/host/h1", "default {\n  msr { msr: \"NOPE\" read: ZERO }\n}"}};
  auto composed = Compose(Base(), keys_, layers, v1::INTEL);
  ASSERT_FALSE(composed.ok());
  v1::FleetError e = ErrorOf(composed.status(), layers);
  EXPECT_EQ(e.key(), "/p/policy/host/h1");
  EXPECT_EQ(e.line(), 2u);
  EXPECT_THAT(e.message(), HasSubstr("NOPE"));
  // A domain key holds its one overlay.
  layers = {{"/p/policy/host/h1/domain/3", "domain { domain: 4 }"}};
  EXPECT_THAT(Compose(Base(), keys_, layers, v1::INTEL),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exactly one `domain { domain: 3 ... }`")));
}

// The applier against an in-memory store: an edit's checked compile is the
// one published when its revision brings exactly the checked layers.
TEST_F(ComposeTest, AnEditsCheckedCompileIsPublishedWhenItsRevisionBringsExactlyThoseLayers) {
  auto store = policy::Store::FromPolicy(Base().policy, Base().source, v1::INTEL);
  ASSERT_TRUE(store.ok()) << store.status();
  Applier applier(**store, Base(), keys_, "", "etcd://test");
  const std::string def = "/p/policy/default", web = "/p/policy/class/web";
  const std::string v1 = "default { msr { msr: \"0x1b0\" read: CONST value: 1 } }";
  const std::string v2 = "default { msr { msr: \"0x1b0\" read: CONST value: 2 } }";
  ASSERT_TRUE(applier.Check(def, v1).ok());
  ASSERT_TRUE(applier.Apply(10, {{def, v1}}).ok());
  EXPECT_TRUE(applier.LastApplyTimes().checked);
  EXPECT_EQ((*store)->Current()->generation(), 10u);
  EXPECT_THAT(ReadAction({(*store)->Current()->policy(), policy::SourceMap("x")}, v1::INTEL, 0x1b0),
              HasSubstr("CONST 1 @"));
  // Checked, but the revision also brings another key: composed anew.
  ASSERT_TRUE(applier.Check(def, v2).ok());
  ASSERT_TRUE(applier.Apply(11, {{def, v2}, {web, v1}}).ok());
  EXPECT_FALSE(applier.LastApplyTimes().checked);
  EXPECT_EQ((*store)->Current()->generation(), 11u);
  // A check is used once: the next revision of the same layers composes.
  ASSERT_TRUE(applier.Apply(12, {{def, v1}}).ok());
  EXPECT_FALSE(applier.LastApplyTimes().checked);
  EXPECT_EQ((*store)->Current()->generation(), 12u);
}

}  // namespace
}  // namespace pvemu::fleet
