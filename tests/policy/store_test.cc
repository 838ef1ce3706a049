#include "policy/store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/durable_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/shipped.h"
#include "base/textproto.h"
#include "tests/policy/test_util.h"
#include "tests/status_matchers.h"
#include "tests/without_file_mode_overrides.h"

namespace pvemu::policy {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using R = v1::ReadAction;
using W = v1::WriteAction;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

v1::MsrRule Rule(const char* msr, R::Action read, W::Action write = W::ACTION_UNSPECIFIED) {
  v1::MsrRule r;
  r.set_msr(msr);
  r.set_read(read);
  r.set_write(write);
  return r;
}

std::unique_ptr<Store> OpenOk(const std::string& dir, std::vector<std::string>* warnings = nullptr,
                              const std::string& initial = "") {
  auto s = Store::Open(dir, initial, v1::INTEL, warnings);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(Store, OpensTheShippedDefaultAtGenerationOne) {
  testutil::TempDir dir;
  std::vector<std::string> warnings;
  auto store = OpenOk(dir.path(), &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(store->generation(), 1u);
  EXPECT_EQ(store->Current()->ForDomain(0).Lookup(0x1b0).read, R::PASSTHROUGH);
}

TEST(Store, ApplyPolicyAtGenerationPublishesThatGenerationAndOnlyMovesForward) {
  auto store = OpenOk("");
  v1::Policy policy;
  *policy.mutable_default_()->add_msr() = Rule("0x1b0", R::ZERO);
  SourceMap source("fleet");
  absl::StatusOr<EditResult> applied = store->ApplyPolicyAtGeneration(policy, source, 40, {});
  ASSERT_THAT(applied, IsOk());
  EXPECT_EQ(applied->generation, 40u);
  EXPECT_EQ(store->generation(), 40u);
  EXPECT_EQ(store->Current()->ForDomain(0).Lookup(0x1b0).read, R::ZERO);
  // The same or an older generation is refused, and nothing changes.
  *policy.mutable_default_()->mutable_msr(policy.default_().msr_size() - 1) = Rule("0x1b0", R::GP);
  EXPECT_THAT(store->ApplyPolicyAtGeneration(policy, source, 40, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("already at generation 40, and generations only move forward")));
  EXPECT_EQ(store->Current()->ForDomain(0).Lookup(0x1b0).read, R::ZERO);
  // An invalid policy is refused whole, as any edit.
  *policy.mutable_default_()->add_msr() = Rule("NO_SUCH_MSR", R::ZERO);
  EXPECT_THAT(store->ApplyPolicyAtGeneration(policy, source, 41, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NO_SUCH_MSR")));
  EXPECT_EQ(store->generation(), 40u);
}

TEST(Store, OpensTheInitialFile) {
  testutil::TempDir dir;
  std::string initial = dir.path() + "/initial.textproto";
  WriteAll(initial, "default {\n  unknown_msr: UNKNOWN_RELAXED\n}\n");
  auto store = OpenOk(dir.path() + "/", nullptr, initial);
  EXPECT_EQ(store->Current()->ForDomain(1).Lookup(0x1234).read, R::ZERO);
  WriteAll(initial, "default {\n  bogus: 1\n}\n");
  EXPECT_THAT(Store::Open(dir.path(), initial, v1::INTEL, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(initial + ":2:")));
}

TEST(Store, EditsPersistAcrossReopen) {
  testutil::TempDir dir;
  {
    auto store = OpenOk(dir.path());
    auto r = store->SetRule(LayerRef::Domain(3), Rule("0x10", R::ZERO, W::IGNORE), {});
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->generation, 2u);
    EXPECT_THAT(r->diff, HasSubstr("+    msr: \"0x10\""));
    ASSERT_THAT(store->SetRule(LayerRef::Default(), Rule("IA32_TSC", R::PASSTHROUGH), {}), IsOk());
    EXPECT_EQ(store->generation(), 3u);
  }
  std::string text = ReadAll(dir.path() + "/policy.textproto");
  EXPECT_THAT(text, StartsWith("# pvemu state: generation=3 "));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/policy.textproto.prev"));
  std::vector<std::string> warnings;
  auto store = OpenOk(dir.path(), &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(store->generation(), 3u);
  EXPECT_EQ(store->Current()->ForDomain(3).Lookup(0x10).read, R::ZERO);
  EXPECT_EQ(store->Current()->ForDomain(4).Lookup(0x10).read, R::PASSTHROUGH);
  // explain points into the state file.
  Explanation x = store->Explain(3, 0x10);
  EXPECT_EQ(x.layer, "domain");
  EXPECT_THAT(x.source, StartsWith(dir.path() + "/policy.textproto:"));
}

TEST(Store, TruncatedStateFallsBackToPreviousAndIsKeptAside) {
  testutil::TempDir dir;
  {
    auto store = OpenOk(dir.path());
    ASSERT_THAT(store->SetRule(LayerRef::Domain(1), Rule("0x10", R::ZERO), {}), IsOk());
    ASSERT_THAT(store->SetRule(LayerRef::Domain(1), Rule("0x11", R::ZERO), {}), IsOk());
  }
  std::string path = dir.path() + "/policy.textproto";
  std::string text = ReadAll(path);
  WriteAll(path, text.substr(0, text.size() - 40));
  std::vector<std::string> warnings;
  auto store = OpenOk(dir.path(), &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("ignoring state file " + path + ": " + path +
                                     ": truncated or extended"));
  EXPECT_THAT(warnings[0], HasSubstr("moved to " + path + ".corrupt"));
  EXPECT_THAT(warnings[1], HasSubstr("using the previous good state " + path + ".prev"));
  EXPECT_EQ(store->generation(), 2u);
  EXPECT_EQ(store->Current()->ForDomain(1).Lookup(0x10).read, R::ZERO);
  EXPECT_TRUE(store->Current()->ForDomain(1).Lookup(0x11).unknown);
  EXPECT_TRUE(std::filesystem::exists(path + ".corrupt"));
  // The next save does not rotate the bad file over the good .prev.
  ASSERT_THAT(store->SetRule(LayerRef::Domain(1), Rule("0x12", R::ZERO), {}), IsOk());
  EXPECT_THAT(ReadAll(path + ".prev"), StartsWith("# pvemu state: generation=2 "));
}

TEST(Store, GarbageStateWithoutPreviousFallsBackToInitial) {
  testutil::TempDir dir;
  std::string path = dir.path() + "/policy.textproto";
  WriteAll(path, "\x01\x02 this is not a policy");
  std::vector<std::string> warnings;
  auto store = OpenOk(dir.path(), &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("not a pvemu state file"));
  EXPECT_EQ(warnings[1], "falling back to the shipped default policy");
  EXPECT_EQ(store->generation(), 1u);
}

TEST(Store, WrongSchemaStateIsRejected) {
  testutil::TempDir dir;
  std::string path = dir.path() + "/policy.textproto";
  std::string body = "name: \"not a policy\"\n";
  // A well-formed header over a body of another message type.
  {
    auto store = OpenOk(dir.path());
    ASSERT_THAT(store->SetRule(LayerRef::Domain(1), Rule("0x10", R::ZERO), {}), IsOk());
  }
  std::filesystem::remove(path + ".prev");
  std::string text = ReadAll(path);
  std::string good_body = text.substr(text.find('\n') + 1);
  std::string bad = text.substr(0, text.find('\n') + 1) + good_body;
  bad.replace(bad.find("default {"), 9, "defaulx {");
  WriteAll(path, bad);
  std::vector<std::string> warnings;
  auto store = OpenOk(dir.path(), &warnings);
  ASSERT_FALSE(warnings.empty());
  EXPECT_THAT(warnings[0], HasSubstr("ignoring state file " + path));
  EXPECT_EQ(store->generation(), 1u);
}

TEST(Store, IfGenerationRefusesStaleEdits) {
  auto store = OpenOk("");
  EditOptions stale;
  stale.if_generation = 5;
  EXPECT_THAT(store->SetRule(LayerRef::Default(), Rule("0x10", R::ZERO), stale),
              StatusIs(absl::StatusCode::kAborted,
                       "the policy is at generation 1, not 5; re-read it and retry"));
  EditOptions fresh;
  fresh.if_generation = 1;
  EXPECT_THAT(store->SetRule(LayerRef::Default(), Rule("0x10", R::ZERO), fresh), IsOk());
}

TEST(Store, InvalidEditChangesNothing) {
  testutil::TempDir dir;
  auto store = OpenOk(dir.path());
  v1::MsrRule bad = Rule("0x10", R::CONST);
  EXPECT_THAT(store->SetRule(LayerRef::Domain(2), bad, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "SetRule:domain[0].msr[0].read: read CONST needs a value; add `value: N`"));
  EXPECT_EQ(store->generation(), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/policy.textproto"));
  EXPECT_EQ(store->policy().domain_size(), 0);
}

TEST(Store, SetRuleReplacesSameTargetAndConditions) {
  auto store = OpenOk("");
  v1::MsrRule a = Rule("0x1b0", R::ZERO);
  a.set_host_vendor(v1::AMD);
  ASSERT_THAT(store->SetRule(LayerRef::Domain(1), a, {}), IsOk());
  v1::MsrRule b = Rule("IA32_ENERGY_PERF_BIAS", R::GP);  // same target by name
  b.set_host_vendor(v1::AMD);
  ASSERT_THAT(store->SetRule(LayerRef::Domain(1), b, {}), IsOk());
  ASSERT_THAT(store->SetRule(LayerRef::Domain(1), Rule("0x1b0", R::CONST), {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a value")));
  EXPECT_EQ(store->policy().domain(0).msr_size(), 1);
  EXPECT_EQ(store->policy().domain(0).msr(0).read(), R::GP);
  EXPECT_THAT(store->DeleteRule(LayerRef::Domain(1), Rule("0x1b0", R::ACTION_UNSPECIFIED), {}),
              StatusIs(absl::StatusCode::kNotFound,
                       "no rule for IA32_ENERGY_PERF_BIAS (0x1b0) with these conditions in the "
                       "domain 1 layer"));
  EXPECT_THAT(store->DeleteRule(LayerRef::Domain(1), b, {}), IsOk());
  EXPECT_EQ(store->policy().domain(0).msr_size(), 0);
  EXPECT_THAT(store->DeleteRule(LayerRef::Domain(9), b, {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("domain 9 layer")));
}

TEST(Store, ApplyLayerAndDiff) {
  auto store = OpenOk("");
  LoadedPolicy layer = testutil::MustParse(
      "domain {\n  domain: 4\n  unknown_msr: UNKNOWN_RELAXED\n}\n", "l.textproto");
  auto diff = store->DiffLayer(LayerRef::Domain(4), layer.policy, layer.source);
  ASSERT_THAT(diff, IsOk());
  EXPECT_THAT(*diff, HasSubstr("+  unknown_msr: UNKNOWN_RELAXED"));
  EXPECT_EQ(store->generation(), 1u);
  ASSERT_THAT(store->ApplyLayer(LayerRef::Domain(4), layer.policy, layer.source, {}), IsOk());
  EXPECT_EQ(store->Current()->ForDomain(4).Lookup(0x1234).read, R::ZERO);
  EXPECT_THAT(store->ApplyLayer(LayerRef::Domain(5), layer.policy, layer.source, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the layer names domain 4 but the edit is for domain 5"));
  LoadedPolicy bad = testutil::MustParse("domain {\n  domain: 4\n}\n", "b.textproto");
  bad.policy.mutable_domain(0)->mutable_tsc()->set_mode(v1::TscPolicy::EMULATED);
  EXPECT_THAT(store->ApplyLayer(LayerRef::Domain(4), bad.policy, bad.source, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("b.textproto:1:1: tsc mode EMULATED")));
  auto same = store->Diff(store->policy(), SourceMap("x"));
  ASSERT_THAT(same, IsOk());
  EXPECT_EQ(*same, "");
}

TEST(Store, ApplyPolicyReplacesEverything) {
  auto store = OpenOk("");
  LoadedPolicy p = testutil::MustParse(ShippedPolicy("kvm-ignore-msrs"), "kvm");
  ASSERT_THAT(store->ApplyPolicy(p.policy, p.source, {}), IsOk());
  EXPECT_EQ(store->Current()->ForDomain(1).Lookup(0x4321).read, R::ZERO);
}

TEST(Store, UnwritableStateDirKeepsThePreviousPolicy) {
  testutil::TempDir dir;
  // A state dir under a regular file fails for root too (ENOTDIR).
  std::string file = dir.path() + "/plainfile";
  WriteAll(file, "x");
  auto store = OpenOk(file + "/state");
  EXPECT_THAT(store->SetRule(LayerRef::Default(), Rule("0x4321", R::ZERO), {}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "cannot save the policy: create " + file +
                           "/state/policy.textproto.tmp: Not a directory; the previous policy "
                           "stays in force and on disk"));
  EXPECT_EQ(store->generation(), 1u);
  EXPECT_TRUE(store->Current()->ForDomain(1).Lookup(0x4321).unknown);
}

// Runs as root too: the store lives in a child without the capabilities
// that let root write into a read-only directory (the store's writer thread
// must be the child's own, so the child opens it).
TEST(Store, ReadOnlyStateDir) {
  testutil::TempDir dir;
  const std::string answer = ::pvemu::testing::InChildWithoutFileModeOverrides([&] {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir.path(), "", v1::INTEL, nullptr);
    if (!store.ok()) return absl::StrCat("open: ", store.status().ToString());
    absl::Status first = (*store)->SetRule(LayerRef::Default(), Rule("0x10", R::ZERO), {}).status();
    if (!first.ok()) return absl::StrCat("first edit: ", first.ToString());
    chmod(dir.path().c_str(), 0500);
    const absl::Status refused =
        (*store)->SetRule(LayerRef::Default(), Rule("0x11", R::ZERO), {}).status();
    chmod(dir.path().c_str(), 0700);
    return absl::StrCat(refused.ToString(), " / generation ", (*store)->generation());
  });
  EXPECT_THAT(answer, ::testing::StartsWith("FAILED_PRECONDITION: "));
  EXPECT_THAT(answer, HasSubstr("Permission denied"));
  EXPECT_THAT(answer, ::testing::EndsWith(" / generation 2"));
  EXPECT_THAT(ReadAll(dir.path() + "/policy.textproto"), StartsWith("# pvemu state: generation=2"));
}

// An edit may be acknowledged only once its rename is durable. A
// failed directory fsync used to be ignored.
TEST(Store, FailedDirectoryFsyncFailsTheEditAndKeepsTheOldPolicy) {
  testutil::TempDir dir;
  auto store = OpenOk(dir.path());
  ASSERT_THAT(store->SetRule(LayerRef::Default(), Rule("0x10", R::ZERO), {}), IsOk());
  ASSERT_THAT(store->SetRule(LayerRef::Default(), Rule("0x11", R::ZERO), {}), IsOk());
  const std::string state = ReadAll(dir.path() + "/policy.textproto");
  const std::string prev = ReadAll(dir.path() + "/policy.textproto.prev");
  base::SetSyncDirectoryFailureForTesting(EIO);
  absl::StatusOr<EditResult> edit = store->SetRule(LayerRef::Default(), Rule("0x12", R::ZERO), {});
  base::SetSyncDirectoryFailureForTesting(0);
  EXPECT_THAT(edit, StatusIs(absl::StatusCode::kUnavailable,
                             AllOf(HasSubstr("cannot save the policy: fsync of directory " + dir.path()),
                                   HasSubstr("Input/output error"),
                                   HasSubstr("the previous policy stays in force and on disk"))));
  EXPECT_EQ(store->generation(), 3u);
  EXPECT_TRUE(store->Current()->ForDomain(1).Lookup(0x12).unknown);
  EXPECT_EQ(ReadAll(dir.path() + "/policy.textproto"), state);
  EXPECT_EQ(ReadAll(dir.path() + "/policy.textproto.prev"), prev);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/policy.textproto.tmp"));
  // The next edit, with the disk well again, lands.
  EXPECT_THAT(store->SetRule(LayerRef::Default(), Rule("0x12", R::ZERO), {}), IsOk());
  EXPECT_EQ(store->generation(), 4u);
}

// The restore after a failed compile used to rotate the failed
// candidate into .prev.
TEST(Store, FailedCompileLeavesTheStateFileAndItsPreviousAsTheyWere) {
  testutil::TempDir dir;
  auto store = OpenOk(dir.path());
  ASSERT_THAT(store->SetRule(LayerRef::Default(), Rule("0x10", R::ZERO), {}), IsOk());
  ASSERT_THAT(store->SetRule(LayerRef::Default(), Rule("0x11", R::ZERO), {}), IsOk());
  const std::string state = ReadAll(dir.path() + "/policy.textproto");
  const std::string prev = ReadAll(dir.path() + "/policy.textproto.prev");
  store->FailNextCompileForTesting();
  EXPECT_THAT(store->SetRule(LayerRef::Default(), Rule("0x12", R::ZERO), {}),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("nothing changed, on disk or in force")));
  EXPECT_EQ(store->generation(), 3u);
  EXPECT_EQ(ReadAll(dir.path() + "/policy.textproto"), state);
  EXPECT_EQ(ReadAll(dir.path() + "/policy.textproto.prev"), prev);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/policy.textproto.tmp"));
  // A restart serves what the guests saw.
  store.reset();
  store = OpenOk(dir.path());
  EXPECT_EQ(store->generation(), 3u);
}

TEST(Store, ConcurrentEditorsLoseNoUpdate) {
  testutil::TempDir dir;
  auto store = OpenOk(dir.path());
  constexpr int kThreads = 8, kEdits = 50;
  std::atomic<int> aborted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEdits;) {
        EditOptions o;
        o.if_generation = store->generation();
        v1::MsrRule r = Rule("0x10", R::ZERO);
        r.set_msr(absl::StrCat(0x1000 + t * kEdits + i));
        auto res = store->SetRule(LayerRef::Domain(t + 1), r, o);
        if (res.ok()) {
          ++i;
        } else {
          ASSERT_EQ(res.status().code(), absl::StatusCode::kAborted) << res.status();
          ++aborted;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(store->generation(), 1u + kThreads * kEdits);
  v1::Policy p = store->policy();
  int rules = 0;
  for (const auto& l : p.domain()) rules += l.msr_size();
  EXPECT_EQ(rules, kThreads * kEdits);
  auto reopened = OpenOk(dir.path());
  EXPECT_EQ(reopened->generation(), 1u + kThreads * kEdits);
}

TEST(Store, SnapshotReaderSeesWholeGenerations) {
  auto store = OpenOk("");
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 1; i <= 200; ++i) {
      // Each generation sets both MSRs to the same constant.
      v1::Policy p;
      for (const char* msr : {"0x10", "0x11"}) {
        v1::MsrRule* r = p.mutable_default_()->add_msr();
        r->set_msr(msr);
        r->set_read(R::CONST);
        r->set_value(i);
      }
      ASSERT_THAT(store->ApplyPolicy(p, SourceMap("w"), {}), IsOk());
    }
    done = true;
  });
  SnapshotReader reader(*store);
  uint64_t last = 0;
  while (!done) {
    const Snapshot& s = reader.Get();
    EXPECT_GE(s.generation(), last);
    last = s.generation();
    const DomainSnapshot& d = s.ForDomain(1);
    EXPECT_EQ(d.Lookup(0x10).value, d.Lookup(0x11).value);
    if (s.generation() > 1) {
      EXPECT_EQ(d.Lookup(0x10).value, s.generation() - 1);
    }
  }
  writer.join();
  EXPECT_EQ(reader.Get().generation(), 201u);
}

TEST(Store, EditListenerHearsEveryEdit) {
  auto store = OpenOk("");
  std::vector<EditEvent> events;
  store->SetEditListener([&](const EditEvent& e) { events.push_back(e); });
  EditOptions o;
  o.who = "uid=0";
  ASSERT_THAT(store->SetRule(LayerRef::Domain(2), Rule("0x10", R::ZERO), o), IsOk());
  ASSERT_THAT(store->DeleteRule(LayerRef::Domain(2), Rule("0x10", R::ZERO), o), IsOk());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].who, "uid=0");
  EXPECT_EQ(events[0].method, "SetRule");
  EXPECT_EQ(events[0].layer, "domain 2");
  EXPECT_EQ(events[0].generation, 2u);
  EXPECT_THAT(events[0].diff, HasSubstr("+    read: ZERO"));
  EXPECT_EQ(events[1].method, "DeleteRule");
}

TEST(DiffText, ShowsChangedLines) {
  EXPECT_EQ(DiffText("a\nb\nc\n", "a\nb\nc\n"), "");
  EXPECT_EQ(DiffText("a\nb\nc", "a\nx\nc"), "@@ -2,1 +2,1 @@\n+x\n-b\n");
}

}  // namespace
}  // namespace pvemu::policy
