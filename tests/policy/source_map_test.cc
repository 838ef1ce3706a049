// SourceMap::FromPrinterOutput against the real text-format parser: for the
// store's own printed policies, every field path gets the same line and
// column as a full parse would give, and text the printer would not write
// is refused rather than mapped wrongly.
#include "policy/source_map.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "base/textproto.h"
#include "pvemu/v1/policy.pb.h"
#include "tests/bench/policy_gen.h"

namespace pvemu::policy {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Every field path set in `msg`, as SourceMap spells them.
void Paths(const Message& msg, const std::string& prefix, std::vector<std::string>* out) {
  const auto* refl = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(msg, &fields);
  for (const FieldDescriptor* f : fields) {
    const int count = f->is_repeated() ? refl->FieldSize(msg, f) : 1;
    for (int i = 0; i < count; ++i) {
      std::string path = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
      if (f->is_repeated()) absl::StrAppend(&path, "[", i, "]");
      out->push_back(path);
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Paths(f->is_repeated() ? refl->GetRepeatedMessage(msg, f, i) : refl->GetMessage(msg, f),
              path, out);
      }
    }
  }
}

void ExpectSameAsParser(const v1::Policy& policy, const std::string& header = "") {
  const std::string text = header + ToTextProto(policy);
  google::protobuf::TextFormat::ParseInfoTree tree;
  v1::Policy parsed;
  ASSERT_TRUE(ParseTextProto(text, "state", &parsed, &tree).ok());
  const SourceMap parser = SourceMap::FromParseInfo("state", parsed, tree);
  std::optional<SourceMap> printed =
      SourceMap::FromPrinterOutput("state", *v1::Policy::descriptor(), text);
  ASSERT_TRUE(printed.has_value());
  std::vector<std::string> paths;
  Paths(parsed, "", &paths);
  ASSERT_FALSE(paths.empty());
  for (const std::string& path : paths) {
    EXPECT_EQ(printed->Line(path), parser.Line(path)) << path;
    EXPECT_EQ(printed->Where(path), parser.Where(path)) << path;
  }
}

TEST(SourceMapTest, PrinterOutputOfEveryShippedPolicyMapsLikeTheParser) {
  for (absl::string_view name : ShippedPolicyNames()) {
    SCOPED_TRACE(name);
    auto loaded = ParsePolicy(ShippedPolicy(name), name);
    ASSERT_TRUE(loaded.ok());
    ExpectSameAsParser(loaded->policy, "# generation=3\n# a second header line\n");
  }
}

TEST(SourceMapTest, CommentsWithBracesColonsQuotesAndNewlinesDoNotConfuseIt) {
  v1::Policy policy;
  v1::MsrRule* rule = policy.mutable_default_()->add_msr();
  rule->set_msr("0x10");
  rule->set_read(v1::ReadAction::PASSTHROUGH);
  rule->set_comment("tricky: { \"quoted\" }\nnext line {\n}");
  v1::Layer* domain = policy.add_domain();
  domain->set_domain(7);
  v1::MsrRule* second = domain->add_msr();
  second->mutable_range()->set_first("0x800");
  second->mutable_range()->set_last("0x8ff");
  second->set_read(v1::ReadAction::ZERO);
  second->set_comment("}");
  ExpectSameAsParser(policy);
}

TEST(SourceMapTest, LargeGeneratedPolicyMapsLikeTheParser) {
  ExpectSameAsParser(bench::MakeRulesPolicy(500));
}

TEST(SourceMapTest, TextThePrinterWouldNotWriteIsRefused) {
  const google::protobuf::Descriptor& root = *v1::Policy::descriptor();
  EXPECT_FALSE(SourceMap::FromPrinterOutput("s", root, "no_such_field: 1\n").has_value());
  EXPECT_FALSE(SourceMap::FromPrinterOutput("s", root, "default {\n").has_value());
  EXPECT_FALSE(SourceMap::FromPrinterOutput("s", root, "}\n").has_value());
  EXPECT_FALSE(SourceMap::FromPrinterOutput("s", root, "default: 1\n").has_value());
  EXPECT_FALSE(SourceMap::FromPrinterOutput("s", root, "default { msr: 3 }\n").has_value());
}

TEST(SourceMap, GraftKeepsTheOtherTextsNameAndLine) {
  v1::Policy p;
  google::protobuf::TextFormat::ParseInfoTree tree;
  ASSERT_TRUE(ParseTextProto("default {\n  msr { msr: \"0x1b0\" read: ZERO }\n}", "/p/key", &p,
                             &tree)
                  .ok());
  SourceMap from = SourceMap::FromParseInfo("/p/key", p, tree);
  SourceMap composed("composed");
  composed.Graft("default.msr[4]", from, "default.msr[0]");
  EXPECT_EQ(composed.WhereLine("default.msr[4].read"), "/p/key:2");
  EXPECT_EQ(composed.WhereLine("default.msr[40]"), "composed:default.msr[40]");
  // Grafting again replaces what was there.
  composed.Graft("default.msr[4]", SourceMap("none"), "-");
  EXPECT_EQ(composed.Line("default.msr[4]"), 0);
}

TEST(SourceMap, MoveWithinOneMapTakesTheRuleAndEverythingBelowItOnly) {
  v1::Policy p;
  google::protobuf::TextFormat::ParseInfoTree tree;
  std::string text = "default {\n";
  for (int i = 0; i < 12; ++i) absl::StrAppend(&text, "  msr { msr: \"", i, "\" read: ZERO }\n");
  text += "}\n";
  ASSERT_TRUE(ParseTextProto(text, "base", &p, &tree).ok());
  SourceMap map = SourceMap::FromParseInfo("base", p, tree);
  ASSERT_EQ(map.Line("default.msr[1].read"), 3);
  ASSERT_EQ(map.Line("default.msr[10].read"), 12);
  // Rule 1 moves to 0: its positions, its fields' too, now answer for 0.
  map.Move("default.msr[0]", "default.msr[1]");
  EXPECT_EQ(map.Line("default.msr[0]"), 3);
  EXPECT_EQ(map.Line("default.msr[0].read"), 3);
  EXPECT_EQ(map.Line("default.msr[1].read"), 3);  // the source stays until written over
  // "msr[1]" is a prefix of "msr[10]", which is not below it.
  map.Move("default.msr[1]", "default.msr[2]");
  EXPECT_EQ(map.Line("default.msr[1].read"), 4);
  EXPECT_EQ(map.Line("default.msr[10].read"), 12);
  EXPECT_EQ(map.Line("default.msr[11].read"), 13);
  // A rule that keeps its index keeps its positions.
  map.Move("default.msr[5]", "default.msr[5]");
  EXPECT_EQ(map.Line("default.msr[5].read"), 7);
}

}  // namespace
}  // namespace pvemu::policy
