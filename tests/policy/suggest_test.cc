#include "policy/suggest.h"

#include <vector>

#include "base/textproto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/loader.h"
#include "tests/status_matchers.h"

namespace pvemu::policy {
namespace {

using ::pvemu::testing::IsOk;
using ::testing::HasSubstr;
using v1::ReadAction;
using v1::WriteAction;

constexpr uint32_t kEnergyPerfBias = 0x1b0;  // IA32_ENERGY_PERF_BIAS

MsrAccess Access(uint32_t domain, uint32_t msr, bool write, MsrAccess::Outcome outcome,
                 const std::string& source) {
  MsrAccess access;
  access.domain = domain;
  access.msr = msr;
  access.write = write;
  access.outcome = outcome;
  access.source = source;
  return access;
}

MsrAccess Read(uint32_t domain, uint32_t msr, MsrAccess::Outcome outcome,
               std::optional<uint64_t> value = std::nullopt,
               const std::string& source = "kern.log:1") {
  MsrAccess access = Access(domain, msr, /*write=*/false, outcome, source);
  access.value = value;
  return access;
}

MsrAccess Fault(uint32_t domain, uint32_t msr, bool write, v1::Vector vector = v1::GP,
                const std::string& source = "kern.log:1") {
  MsrAccess access = Access(domain, msr, write, MsrAccess::Outcome::kException, source);
  access.vector = vector;
  return access;
}

MsrAccess Write(uint32_t domain, uint32_t msr, const std::string& source = "kern.log:1") {
  return Access(domain, msr, /*write=*/true, MsrAccess::Outcome::kCompleted, source);
}

// The one rule of a draft with one domain and one MSR.
v1::MsrRule OnlyRule(const v1::Policy& draft) {
  EXPECT_EQ(draft.domain_size(), 1);
  if (draft.domain_size() != 1) return {};
  EXPECT_EQ(draft.domain(0).msr_size(), 1);
  if (draft.domain(0).msr_size() != 1) return {};
  return draft.domain(0).msr(0);
}

TEST(DraftPolicy, AReadTheHostFaultedDraftsAGpRead) {
  const v1::Policy draft = DraftPolicy({Fault(7, kEnergyPerfBias, /*write=*/false)});
  ASSERT_EQ(draft.domain_size(), 1);
  EXPECT_EQ(draft.domain(0).domain(), 7u);
  const v1::MsrRule rule = OnlyRule(draft);
  EXPECT_EQ(rule.msr(), "IA32_ENERGY_PERF_BIAS");
  EXPECT_EQ(rule.read(), ReadAction::GP);
  EXPECT_EQ(rule.write(), WriteAction::ACTION_UNSPECIFIED);  // never written
  EXPECT_FALSE(rule.has_value());
}

TEST(DraftPolicy, OneFaultedReadOutweighsReadsThatReturnedValues) {
  const v1::MsrRule rule = OnlyRule(DraftPolicy(
      {Read(1, kEnergyPerfBias, MsrAccess::Outcome::kCompleted, 5),
       Fault(1, kEnergyPerfBias, /*write=*/false)}));
  EXPECT_EQ(rule.read(), ReadAction::GP);
}

TEST(DraftPolicy, ReadsThatReturnedValuesDraftConstWithTheLastValue) {
  const v1::MsrRule rule = OnlyRule(DraftPolicy(
      {Read(1, kEnergyPerfBias, MsrAccess::Outcome::kCompleted, 3),
       Read(1, kEnergyPerfBias, MsrAccess::Outcome::kCompleted, 5)}));
  EXPECT_EQ(rule.read(), ReadAction::CONST);
  EXPECT_EQ(rule.value(), 5u);
}

TEST(DraftPolicy, AReadOfZeroOrOfAnUnloggedValueDraftsZero) {
  EXPECT_EQ(OnlyRule(DraftPolicy({Read(1, kEnergyPerfBias, MsrAccess::Outcome::kCompleted, 0)}))
                .read(),
            ReadAction::ZERO);
  EXPECT_EQ(OnlyRule(DraftPolicy({Read(1, kEnergyPerfBias, MsrAccess::Outcome::kUnknown)})).read(),
            ReadAction::ZERO);
}

TEST(DraftPolicy, AnExceptionOtherThanGpIsNoFault) {
  const v1::MsrRule rule =
      OnlyRule(DraftPolicy({Fault(1, kEnergyPerfBias, /*write=*/false, v1::UD)}));
  EXPECT_EQ(rule.read(), ReadAction::ZERO);
  EXPECT_THAT(rule.comment(), HasSubstr("#UD x1"));
}

TEST(DraftPolicy, WritesDraftGpWhenTheHostFaultedThemElseIgnore) {
  EXPECT_EQ(OnlyRule(DraftPolicy({Write(1, kEnergyPerfBias), Fault(1, kEnergyPerfBias, true)}))
                .write(),
            WriteAction::GP);
  const v1::MsrRule ignored = OnlyRule(DraftPolicy({Write(1, kEnergyPerfBias)}));
  EXPECT_EQ(ignored.write(), WriteAction::IGNORE);
  EXPECT_EQ(ignored.read(), ReadAction::ACTION_UNSPECIFIED);  // never read
}

TEST(DraftPolicy, ReadsAndWritesOfOneMsrShareOneRule) {
  const v1::MsrRule rule = OnlyRule(DraftPolicy(
      {Read(1, kEnergyPerfBias, MsrAccess::Outcome::kCompleted, 6, "a.log:3"),
       Write(1, kEnergyPerfBias, "a.log:9")}));
  EXPECT_EQ(rule.read(), ReadAction::CONST);
  EXPECT_EQ(rule.write(), WriteAction::IGNORE);
  EXPECT_EQ(rule.comment(),
            "read 1 time(s), first at a.log:3 (host: read 0x6 x1); "
            "written 1 time(s), first at a.log:9 (host: completed x1)");
}

TEST(DraftPolicy, AnMsrOutsideTheCatalogIsNamedInHex) {
  const v1::MsrRule rule = OnlyRule(DraftPolicy({Fault(1, 0x4b564dff, /*write=*/false)}));
  EXPECT_EQ(rule.msr(), "0x4b564dff");
  EXPECT_EQ(rule.read(), ReadAction::GP);
}

TEST(DraftPolicy, SeveralDomainsGetALayerEachInDomainOrder) {
  const v1::Policy draft = DraftPolicy({
      Fault(9, kEnergyPerfBias, /*write=*/false),
      Read(2, 0x10, MsrAccess::Outcome::kCompleted, 42),
      Read(2, kEnergyPerfBias, MsrAccess::Outcome::kCompleted, 1),
  });
  EXPECT_FALSE(draft.has_default_());
  ASSERT_EQ(draft.domain_size(), 2);
  EXPECT_EQ(draft.domain(0).domain(), 2u);
  ASSERT_EQ(draft.domain(0).msr_size(), 2);
  EXPECT_EQ(draft.domain(0).msr(0).msr(), "IA32_TIME_STAMP_COUNTER");  // by MSR number
  EXPECT_EQ(draft.domain(0).msr(0).value(), 42u);
  EXPECT_EQ(draft.domain(0).msr(1).read(), ReadAction::CONST);
  EXPECT_EQ(draft.domain(1).domain(), 9u);
  ASSERT_EQ(draft.domain(1).msr_size(), 1);
  EXPECT_EQ(draft.domain(1).msr(0).read(), ReadAction::GP);
}

TEST(DraftPolicy, TheDraftParsesAndValidatesAsAPolicyFile) {
  const v1::Policy draft = DraftPolicy({
      Fault(0, kEnergyPerfBias, /*write=*/false),
      Write(0, kEnergyPerfBias),
      Read(3, 0x4b564dff, MsrAccess::Outcome::kCompleted, 0xffff'ffff'ffff'ffff),
      Fault(3, 0x4b564dff, /*write=*/true),
      Read(3, 0x10, MsrAccess::Outcome::kUnknown),
  });
  EXPECT_THAT(ValidatePolicy(draft, "draft"), IsOk());
  absl::StatusOr<LoadedPolicy> loaded = ParsePolicy(ToTextProto(draft), "draft.textproto");
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->policy.SerializeAsString(), draft.SerializeAsString());
}

TEST(DraftPolicy, NothingSeenDraftsAnEmptyPolicyThatValidates) {
  const v1::Policy draft = DraftPolicy({});
  EXPECT_EQ(draft.domain_size(), 0);
  EXPECT_FALSE(draft.has_default_());
  EXPECT_THAT(ParsePolicy(ToTextProto(draft), "empty.textproto"), IsOk());
}

TEST(PolicyDrafter, RulesSayHowOftenEachAccessWasSeenAndWhereFirst) {
  PolicyDrafter drafter;
  drafter.Add(Read(4, kEnergyPerfBias, MsrAccess::Outcome::kCompleted, 5, "a.log:2"));
  drafter.Add(Fault(4, kEnergyPerfBias, /*write=*/false, v1::GP, "a.log:7"));
  drafter.Add(Read(4, kEnergyPerfBias, MsrAccess::Outcome::kCompleted, 5, "b.log:1"));
  const std::vector<DraftedRule> rules = drafter.Rules();
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].domain, 4u);
  EXPECT_EQ(rules[0].msr, kEnergyPerfBias);
  ASSERT_TRUE(rules[0].reads.has_value());
  EXPECT_FALSE(rules[0].writes.has_value());
  EXPECT_EQ(rules[0].reads->count, 3u);
  EXPECT_EQ(rules[0].reads->first_source, "a.log:2");
  EXPECT_TRUE(rules[0].reads->faulted);
  EXPECT_EQ(rules[0].reads->last_value, 5u);
  EXPECT_EQ(rules[0].rule.comment(),
            "read 3 time(s), first at a.log:2 (host: #GP x1, read 0x5 x2)");
}

}  // namespace
}  // namespace pvemu::policy
