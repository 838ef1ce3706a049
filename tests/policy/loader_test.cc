#include "policy/loader.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/policy/test_util.h"
#include "absl/strings/str_split.h"
#include "tests/status_matchers.h"

namespace pvemu::policy {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;

absl::Status Check(absl::string_view text) { return ParsePolicy(text, "p.textproto").status(); }

void ExpectError(absl::string_view text, const std::string& message) {
  EXPECT_THAT(Check(text), StatusIs(absl::StatusCode::kInvalidArgument, message)) << text;
}

TEST(Validate, AcceptsAMinimalPolicy) {
  EXPECT_THAT(Check(""), IsOk());
  EXPECT_THAT(Check("default { msr { msr: \"IA32_PAT\" read: ZERO } }"), IsOk());
}

TEST(Validate, UnknownMsrNameSuggestsNearest) {
  ExpectError("default {\n  msr { msr: \"IA32_ENERGY_PERF_BAIS\" read: ZERO }\n}\n",
              "p.textproto:2:9: unknown MSR 'IA32_ENERGY_PERF_BAIS'; did you mean "
              "IA32_ENERGY_PERF_BIAS (0x1b0)? Use a catalog name or a number (decimal or "
              "0x hex)");
}

TEST(Validate, UnknownNameInRangeEnd) {
  ExpectError("default {\n  msr {\n    range { first: \"IA32_PMC0\" last: \"IA32_PMCX\" }\n"
              "    read: ZERO\n  }\n}\n",
              "p.textproto:3:32: unknown MSR 'IA32_PMCX'; did you mean IA32_PMC0 (0xc1)? Use a "
              "catalog name or a number (decimal or 0x hex)");
}

TEST(Validate, RangeFirstAfterLast) {
  ExpectError("default {\n  msr { range { first: \"0x20\" last: \"0x10\" } read: ZERO }\n}\n",
              "p.textproto:2:9: range first 0x20 is greater than last 0x10; swap them");
}

TEST(Validate, ValueWiderThan64BitsIsAParserError) {
  EXPECT_THAT(Check("default {\n  msr { msr: \"0x10\" read: CONST value: 0x10000000000000000 }\n}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p.textproto:2:")));
}

TEST(Validate, UnknownFieldIsAParserError) {
  EXPECT_THAT(Check("default {\n  bogus: 1\n}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p.textproto:2:")));
}

TEST(Validate, WritableMaskNeedsAStoringWrite) {
  ExpectError("default {\n  msr { msr: \"0x10\" read: ZERO writable_mask: 0xff }\n}\n",
              "p.textproto:2:32: writable_mask applies only to a SHADOW or PASSTHROUGH write, "
              "but this rule's write is ACTION_UNSPECIFIED; set `write: SHADOW` or remove "
              "writable_mask");
  ExpectError("default {\n  msr { msr: \"0x10\" write: IGNORE writable_mask: 0xff }\n}\n",
              "p.textproto:2:35: writable_mask applies only to a SHADOW or PASSTHROUGH write, "
              "but this rule's write is IGNORE; set `write: SHADOW` or remove writable_mask");
}

TEST(Validate, PassthroughWriteNeedsAllowHostWrite) {
  ExpectError("default {\n  msr { msr: \"0x1b0\" write: PASSTHROUGH }\n}\n",
              "p.textproto:2:22: write PASSTHROUGH needs `allow_host_write: true` (and the "
              "daemon's host writes enabled); add it, or use SHADOW or IGNORE");
}

TEST(Validate, DuplicateDomains) {
  ExpectError("domain { domain: 4 }\ndomain { domain: 4 }\n",
              "p.textproto:2:1: domain 4 is already defined at p.textproto:1; merge the two "
              "layers into one");
}

TEST(Validate, DomainFieldOnDefaultLayer) {
  ExpectError("default {\n  domain: 3\n}\n",
              "p.textproto:2:3: the default layer cannot name a domain (domain: 3); move these "
              "settings into a `domain { domain: 3 ... }` layer");
}

TEST(Validate, PortRanges) {
  ExpectError("default {\n  io_port { first: 0x10000 last: 0x10001 }\n}\n",
              "p.textproto:2:13: port 0x10000 is out of range; ports are 0..0xffff\n"
              "p.textproto:2:28: port 0x10001 is out of range; ports are 0..0xffff");
  ExpectError("default {\n  io_port { first: 0x70 last: 0x60 }\n}\n",
              "p.textproto:2:3: port range first 0x70 is greater than last 0x60; swap them");
}

TEST(Validate, ConstReadNeedsValue) {
  ExpectError("default {\n  msr { msr: \"0x10\" read: CONST }\n}\n",
              "p.textproto:2:21: read CONST needs a value; add `value: N`");
}

TEST(Validate, TieNamesBothRules) {
  ExpectError("default {\n  msr { msr: \"0x1b0\" host_vendor: INTEL read: ZERO }\n"
              "  msr { msr: \"IA32_ENERGY_PERF_BIAS\" hardware_domain: true read: GP }\n}\n",
              "p.textproto:3:3: rule for IA32_ENERGY_PERF_BIAS (0x1b0) ties with the rule for "
              "IA32_ENERGY_PERF_BIAS (0x1b0) at p.textproto:2 (same layer, same specificity, "
              "both can apply); add a condition to one of them or delete one");
}

TEST(Validate, TieOfOverlappingRangesOfEqualWidth) {
  ExpectError("default {\n  msr { range { first: \"0x10\" last: \"0x1f\" } read: ZERO }\n"
              "  msr { range { first: \"0x18\" last: \"0x27\" } read: GP }\n}\n",
              "p.textproto:3:3: rule for range 0x18-0x27 ties with the rule for range "
              "0x10-0x1f at p.textproto:2 (same layer, same specificity, both can apply); add "
              "a condition to one of them or delete one");
}

TEST(Validate, NoTieWhenConditionsExcludeEachOther) {
  EXPECT_THAT(Check("default {\n  msr { msr: \"0x1b0\" host_vendor: INTEL read: ZERO }\n"
                    "  msr { msr: \"0x1b0\" host_vendor: AMD read: GP }\n}\n"),
              IsOk());
}

TEST(Validate, NoTieWhenHalvesDiffer) {
  EXPECT_THAT(Check("default {\n  msr { msr: \"0x1b0\" read: ZERO }\n"
                    "  msr { msr: \"0x1b0\" write: GP }\n}\n"),
              IsOk());
}

TEST(Validate, NoTieAcrossLayersOrWidths) {
  EXPECT_THAT(Check("default { msr { msr: \"0x1b0\" read: ZERO } "
                    "msr { range { first: \"0x1b0\" last: \"0x1b0\" } read: GP } }\n"
                    "domain { domain: 1 msr { msr: \"0x1b0\" read: GP } }"),
              IsOk());
}

TEST(Validate, TscEmulatedNeedsFrequency) {
  ExpectError("default {\n  tsc { mode: EMULATED }\n}\n",
              "p.textproto:2:3: tsc mode EMULATED needs frequency_khz (the guest's TSC "
              "frequency); add it or use NATIVE/OFFSET");
}

TEST(Validate, RuleWithoutTarget) {
  ExpectError("default {\n  msr { read: ZERO }\n}\n",
              "p.textproto:2:3: rule has no target; set `msr: NAME` or `range { first: .. "
              "last: .. }`");
}

TEST(Validate, CollectsAllErrors) {
  absl::Status s = Check(
      "default {\n  msr { msr: \"NOPE_MSR\" read: ZERO }\n  msr { msr: \"0x10\" read: CONST }\n"
      "}\ndomain { domain: 2 tsc { mode: EMULATED } }\n");
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::string> lines = absl::StrSplit(s.message(), '\n');
  ASSERT_EQ(lines.size(), 3u) << s;
  EXPECT_THAT(lines[0], HasSubstr("p.textproto:2:9: unknown MSR 'NOPE_MSR'"));
  EXPECT_THAT(lines[1], HasSubstr("p.textproto:3:21: read CONST needs a value"));
  EXPECT_THAT(lines[2], HasSubstr("p.textproto:5:20: tsc mode EMULATED"));
}

TEST(Validate, MessageWithoutPositionsNamesFieldPath) {
  v1::Policy p;
  v1::MsrRule* r = p.add_domain()->add_msr();
  p.mutable_domain(0)->set_domain(9);
  r->set_msr("0x10");
  r->set_read(v1::ReadAction::CONST);
  EXPECT_THAT(ValidatePolicy(p, "rpc"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "rpc:domain[0].msr[0].read: read CONST needs a value; add `value: N`"));
}

TEST(Load, FileErrorsNameTheFile) {
  testutil::TempDir dir;
  std::string path = dir.path() + "/bad.textproto";
  std::ofstream(path) << "default {\n  msr { msr: \"0x10\" read: CONST }\n}\n";
  EXPECT_THAT(LoadPolicyFile(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       path + ":2:21: read CONST needs a value; add `value: N`"));
  EXPECT_THAT(LoadPolicyFile(dir.path() + "/missing.textproto"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.textproto")));
}

// A directory opens and reads as empty text, which is a valid policy with no
// rules: loading one must fail rather than silently stand for that.
TEST(Load, ADirectoryIsNotAPolicyFile) {
  testutil::TempDir dir;
  EXPECT_THAT(LoadPolicyFile(dir.path()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       dir.path() + ": is a directory; give a file's path"));
}

}  // namespace
}  // namespace pvemu::policy
