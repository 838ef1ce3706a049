// pvemud --metrics: the exposition text (names, labels, escaping, HELP and
// TYPE, the per-domain MSR bound) from a real dispatcher, then the real
// daemon in process serving GET /metrics over HTTP, checked against the
// traps sent through the Emulate RPC and by `promtool check metrics`.
#include "server/metrics.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <thread>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/textproto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics_http.h"
#include "tests/dispatch/dispatcher_fixture.h"
#include "tests/server/daemon_fixture.h"
#include "tests/server/metrics_helpers.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;

TEST(ExpositionTest, FamiliesHaveHelpAndTypeAndLabelValuesAreEscaped) {
  server::ExpositionWriter w;
  w.Family("pvemu_x_total", "counter", "Counts x.\nSecond line \\ here.");
  w.Sample("pvemu_x_total", {{"a", "say \"hi\""}, {"b", "back\\slash\nnewline"}}, 3);
  w.Sample("pvemu_x_total", {}, 0.25);
  EXPECT_EQ(w.text(),
            "# HELP pvemu_x_total Counts x.\\nSecond line \\\\ here.\n"
            "# TYPE pvemu_x_total counter\n"
            "pvemu_x_total{a=\"say \\\"hi\\\"\",b=\"back\\\\slash\\nnewline\"} 3\n"
            "pvemu_x_total 0.25\n");
  EXPECT_EQ(server::FormatValue(1e300 * 1e300), "+Inf");
  EXPECT_EQ(server::FormatValue(1764866000.5), "1764866000.5");
}

emulator::Trap Rdmsr(uint32_t domain, uint32_t msr, bool write = false) {
  emulator::Trap t;
  t.domain = domain;
  t.insn[0] = 0x0f;
  t.insn[1] = write ? 0x30 : 0x32;
  t.insn_len = 2;
  t.regs.gpr[emulator::kRcx] = msr;
  return t;
}

// A real dispatcher: the sim Intel host and the shipped default policy.
class TrapCountsTest : public DefaultDispatcherTest {
 protected:
  dispatch::DispatchOptions Options() const override {
    dispatch::DispatchOptions options;
    options.count_by_domain_and_msr = true;
    return options;
  }
  std::string Render() {
    server::ExpositionWriter w;
    server::RenderTrapCounts(dispatcher_->CountsByKey(), &w);
    return w.text();
  }
};

TEST_F(TrapCountsTest, NamesLabelsAndActionsAsTheDomainViewDecided) {
  {
    auto ended = dispatcher_->NewSession();  // counted after it ends, too
    for (int i = 0; i < 3; ++i) ended->Handle(Rdmsr(0, 0x1b0));
  }
  auto session = dispatcher_->NewSession();
  session->Handle(Rdmsr(0, 0x1b0));
  session->Handle(Rdmsr(7, 0x1b0, /*write=*/true));
  session->Handle(Rdmsr(7, 0x12345));  // no rule: the unknown-MSR mode (GP)
  emulator::Trap cpuid = Rdmsr(7, 0);
  cpuid.insn[1] = 0xa2;
  session->Handle(cpuid);
  emulator::Trap junk = Rdmsr(7, 0);
  junk.insn[0] = 0x90;  // NOP: not privileged, does not decode (the hypervisor's)
  junk.insn_len = 1;
  session->Handle(junk);

  const std::string text = Render();
  EXPECT_THAT(text, HasSubstr("# HELP pvemu_traps_total "));
  EXPECT_THAT(text, HasSubstr("# TYPE pvemu_traps_total counter\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE pvemu_msr_accesses_total counter\n"));
  EXPECT_THAT(text, HasSubstr(
      "pvemu_traps_total{domain=\"0\",instruction=\"rdmsr\",outcome=\"completed\"} 4\n"));
  EXPECT_THAT(text, HasSubstr(
      "pvemu_traps_total{domain=\"7\",instruction=\"cpuid\",outcome=\"completed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(
      "pvemu_traps_total{domain=\"7\",instruction=\"undecodable\",outcome=\"unhandled\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(
      "pvemu_msr_accesses_total{domain=\"0\",msr=\"0x1b0\",name=\"IA32_ENERGY_PERF_BIAS\","
      "access=\"read\",action=\"PASSTHROUGH\"} 4\n"));
  // Not the hardware domain: the default policy's write rule for others is IGNORE.
  EXPECT_THAT(text, HasSubstr(
      "pvemu_msr_accesses_total{domain=\"7\",msr=\"0x1b0\",name=\"IA32_ENERGY_PERF_BIAS\","
      "access=\"write\",action=\"IGNORE\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(
      "pvemu_msr_accesses_total{domain=\"7\",msr=\"0x12345\",name=\"\",access=\"read\","
      "action=\"UNKNOWN_GP\"} 1\n"));
  EXPECT_EQ(SumSamples(text, "pvemu_traps_total"), 8);
  EXPECT_EQ(SumSamples(text, "pvemu_traps_total"), dispatcher_->Stats().traps);
}

TEST_F(TrapCountsTest, SeventyUnnamedMsrsInOneDomainGiveSixtyFourAndOther) {
  // Half through a session that ends, half through one still open.
  {
    auto ended = dispatcher_->NewSession();
    for (uint32_t i = 0; i < 35; ++i) ended->Handle(Rdmsr(5, 0x40001000 + i));
  }
  auto session = dispatcher_->NewSession();
  for (uint32_t i = 35; i < 70; ++i) session->Handle(Rdmsr(5, 0x40001000 + i));
  session->Handle(Rdmsr(5, 0x1b0));  // a rule names it: apart, beyond the 64
  const std::string text = Render();
  EXPECT_EQ(CountSamples(text, "pvemu_msr_accesses_total"), 64 + 1 + 1) << text;
  EXPECT_THAT(text, HasSubstr(
      "pvemu_msr_accesses_total{domain=\"5\",msr=\"other\",name=\"\",access=\"read\","
      "action=\"UNKNOWN_GP\"} 6\n"));
  EXPECT_THAT(text, HasSubstr("msr=\"0x1b0\""));
  EXPECT_EQ(SumSamples(text, "pvemu_msr_accesses_total"), 71);
  // Stable: the same 64 stay apart at the next scrape, more traps or not.
  session->Handle(Rdmsr(5, 0x40001000));
  EXPECT_EQ(CountSamples(Render(), "pvemu_msr_accesses_total"), 66);
}

// Named MSRs count in per-entry slots laid out per generation, unnamed ones
// by key; an edit folds the slots into the keys. Whatever the edits, a
// series is the sum of its traps and a first access is logged once.
class SlotCountsTest : public TrapCountsTest {
 protected:
  dispatch::DispatchOptions Options() const override {
    dispatch::DispatchOptions options = TrapCountsTest::Options();
    options.log = [lines = lines_](absl::string_view line) {
      absl::MutexLock lock(&lines->mu);
      lines->text.emplace_back(line);
    };
    return options;
  }
  void SetUp() override {
    TrapCountsTest::SetUp();
    const absl::Status parsed = ParseTextProto(R"pb(
      default {
        unknown_msr: UNKNOWN_GP
        msr { msr: "0x12345600" read: GP write: GP }
        msr { msr: "0x12345601" read: CONST value: 5 write: IGNORE }
        msr { msr: "0x12345602" read: ZERO write: SHADOW }
        msr { msr: "0x12345603" read: PASSTHROUGH write: GP }
        msr { range { first: "0x40000000" last: "0x400000ff" } read: ZERO write: IGNORE }
      }
      domain { domain: 3 msr { msr: "0x12345601" read: ZERO write: GP } }
    )pb", "slots", &policy_);
    ASSERT_TRUE(parsed.ok()) << parsed;
    Edit();
  }
  // A new generation of the same policy (every slot layout starts over).
  void Edit() {
    ASSERT_TRUE(store_->ApplyPolicy(policy_, policy::SourceMap(), policy::EditOptions{}).ok());
  }
  int Logged(absl::string_view what) {
    absl::MutexLock lock(&lines_->mu);
    int n = 0;
    for (const std::string& l : lines_->text) n += absl::StrContains(l, what) ? 1 : 0;
    return n;
  }
  uint64_t Count(uint32_t domain, uint32_t msr, bool write, dispatch::MsrAction action) {
    for (const dispatch::MsrCount& c : dispatcher_->CountsByKey().msrs) {
      if (c.domain == domain && c.msr == msr && c.write == write && c.action == action) {
        return c.count;
      }
    }
    return 0;
  }
  // The trap count by (domain, instruction, outcome) in the series by kind.
  uint64_t KindCount(uint32_t domain, emulator::InsnKind insn, emulator::OutcomeKind outcome) {
    for (const dispatch::KindCount& c : dispatcher_->CountsByKey().kinds) {
      if (c.domain == domain && c.insn == static_cast<int>(insn) && c.outcome == outcome) {
        return c.count;
      }
    }
    return 0;
  }
  struct Lines {
    absl::Mutex mu;
    std::vector<std::string> text;
  };
  std::shared_ptr<Lines> lines_ = std::make_shared<Lines>();
  v1::Policy policy_;
};

TEST_F(SlotCountsTest, ANamedMsrsCountSurvivesEditsAndItsFirstAccessIsLoggedOnce) {
  auto session = dispatcher_->NewSession();
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) session->Handle(Rdmsr(1, 0x12345600));
    session->Handle(Rdmsr(1, 0x12345600, /*write=*/true));
    session->Handle(Rdmsr(1, 0x40000010));  // a range: counted by key
    Edit();
  }
  EXPECT_EQ(Count(1, 0x12345600, false, dispatch::MsrAction::kGp), 12u);
  EXPECT_EQ(Count(1, 0x12345600, true, dispatch::MsrAction::kGp), 3u);
  EXPECT_EQ(Count(1, 0x40000010, false, dispatch::MsrAction::kZero), 3u);
  EXPECT_EQ(Logged("first read of MSR 0x12345600 by domain 1"), 1);
  EXPECT_EQ(Logged("first write of MSR 0x12345600 by domain 1"), 1);
  // The session's counts outlive it, slots and keys alike.
  session.reset();
  EXPECT_EQ(Count(1, 0x12345600, false, dispatch::MsrAction::kGp), 12u);
  EXPECT_EQ(Count(1, 0x40000010, false, dispatch::MsrAction::kZero), 3u);
}

TEST_F(SlotCountsTest, UnnamedMsrsWhoseLookUpsStopAtOneFreeSlotEachCountExactly) {
  // Two MSRs no rule names whose look-ups stop at the same free position of
  // domain 1's exact table: the first one seen is lent the position's slot,
  // the other counts by key; across an edit (a new layout) the order swaps.
  const policy::DomainSnapshot& snap = store_->Current()->ForDomain(1);
  std::map<uint32_t, uint32_t> first_at;  // slot -> MSR
  uint32_t a = 0, b = 0;
  for (uint32_t msr = 0x50000000; b == 0 && msr < 0x50010000; ++msr) {
    uint32_t slot = 0;
    (void)snap.LookupCounted(msr, &slot);
    ASSERT_NE(slot & policy::MsrIndex::kUnnamedSlot, 0u) << std::hex << msr;
    auto [it, added] = first_at.emplace(slot, msr);
    if (!added) {
      a = it->second;
      b = msr;
    }
  }
  ASSERT_NE(b, 0u) << "no two MSRs share a free slot";
  auto session = dispatcher_->NewSession();
  for (int round = 0; round < 2; ++round) {
    const uint32_t first = round == 0 ? a : b, second = round == 0 ? b : a;
    for (int i = 0; i < 5; ++i) session->Handle(Rdmsr(1, first));
    for (int i = 0; i < 3; ++i) session->Handle(Rdmsr(1, second));
    session->Handle(Rdmsr(1, second, /*write=*/true));
    session->Handle(Rdmsr(1, first, /*write=*/true));
    Edit();
  }
  EXPECT_EQ(Count(1, a, false, dispatch::MsrAction::kUnknownGp), 8u);
  EXPECT_EQ(Count(1, b, false, dispatch::MsrAction::kUnknownGp), 8u);
  EXPECT_EQ(Count(1, a, true, dispatch::MsrAction::kUnknownGp), 2u);
  EXPECT_EQ(Count(1, b, true, dispatch::MsrAction::kUnknownGp), 2u);
  for (uint32_t msr : {a, b}) {
    EXPECT_EQ(Logged(absl::StrFormat("first read of MSR %#x by domain 1", msr)), 1);
    EXPECT_EQ(Logged(absl::StrFormat("first write of MSR %#x by domain 1", msr)), 1);
  }
}

TEST_F(SlotCountsTest, EachDomainsSlotsKeepItsOwnActions) {
  auto session = dispatcher_->NewSession();
  session->Handle(Rdmsr(1, 0x12345601));
  session->Handle(Rdmsr(3, 0x12345601));
  session->Handle(Rdmsr(3, 0x12345601, /*write=*/true));
  EXPECT_EQ(Count(1, 0x12345601, false, dispatch::MsrAction::kConst), 1u);
  EXPECT_EQ(Count(3, 0x12345601, false, dispatch::MsrAction::kZero), 1u);
  EXPECT_EQ(Count(3, 0x12345601, true, dispatch::MsrAction::kGp), 1u);
}

// An MSR access counted at its slot is counted by kind there too, as the
// outcome its action gives (#GP for GP, else completed). One whose outcome
// is not its action's (a PASSTHROUGH read the host faults: 0x12345603 is no
// MSR of the sim host) counts by kind under its own outcome, before and
// after an edit folds the slots.
TEST_F(SlotCountsTest, EachMsrAccessCountsOnceByKindUnderItsOwnOutcome) {
  using emulator::InsnKind;
  using emulator::OutcomeKind;
  auto session = dispatcher_->NewSession();
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(session->Handle(Rdmsr(1, 0x12345603)).kind, OutcomeKind::kException);
      EXPECT_EQ(session->Handle(Rdmsr(1, 0x12345601)).kind, OutcomeKind::kCompleted);
      EXPECT_EQ(session->Handle(Rdmsr(1, 0x12345600)).kind, OutcomeKind::kException);
      EXPECT_EQ(session->Handle(Rdmsr(1, 0x12345601, /*write=*/true)).kind, OutcomeKind::kCompleted);
    }
    const uint64_t n = 3 * (round + 1);
    SCOPED_TRACE(absl::StrCat("round ", round));
    EXPECT_EQ(Count(1, 0x12345603, false, dispatch::MsrAction::kPassthrough), n);
    EXPECT_EQ(KindCount(1, InsnKind::kRdmsr, OutcomeKind::kException), 2 * n);
    EXPECT_EQ(KindCount(1, InsnKind::kRdmsr, OutcomeKind::kCompleted), n);
    EXPECT_EQ(KindCount(1, InsnKind::kWrmsr, OutcomeKind::kCompleted), n);
    EXPECT_EQ(KindCount(1, InsnKind::kWrmsr, OutcomeKind::kException), 0u);
    const dispatch::TrapStats stats = dispatcher_->Stats();
    EXPECT_EQ(stats.traps, 4 * n);
    EXPECT_EQ(stats.exceptions, 2 * n);
    EXPECT_EQ(stats.completed, 2 * n);
    Edit();  // the slots fold into the by-key table; the next round lays them out anew
  }
  session.reset();
  EXPECT_EQ(KindCount(1, InsnKind::kRdmsr, OutcomeKind::kException), 12u);
  EXPECT_EQ(dispatcher_->Stats().traps, 24u);
}

// Several vCPUs (sessions) counting at once while the policy is edited and
// a reader scrapes: no series ever goes down, and at the end each equals
// the traps sent.
TEST_F(SlotCountsTest, SeveralSessionsCountingAtOnceSumToTheTrapsSent) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  const std::vector<std::pair<uint32_t, bool>> accesses = {
      {0x12345600, false}, {0x12345601, false}, {0x12345602, true},
      {0x12345602, false}, {0x40000020, false}, {0x7777, false}};
  std::atomic<bool> done{false};
  std::atomic<int> decreases{0};
  std::thread reader([&] {
    std::map<std::tuple<std::optional<uint32_t>, std::optional<uint32_t>, bool, int>, uint64_t> last;
    std::map<std::tuple<std::optional<uint32_t>, int, emulator::OutcomeKind>, uint64_t> last_kind;
    while (!done.load()) {
      const dispatch::Dispatcher::Counts counts = dispatcher_->CountsByKey();
      for (const dispatch::MsrCount& c : counts.msrs) {
        uint64_t& seen = last[{c.domain, c.msr, c.write, static_cast<int>(c.action)}];
        if (c.count < seen) decreases.fetch_add(1);
        seen = c.count;
      }
      // The series by kind too: an MSR trap's count there is its slot's
      // until a fold moves it, and a reader must never see it in neither.
      for (const dispatch::KindCount& c : counts.kinds) {
        uint64_t& seen = last_kind[{c.domain, c.insn, c.outcome}];
        if (c.count < seen) decreases.fetch_add(1);
        seen = c.count;
      }
    }
  });
  // Edits all the while the vCPUs run: every one folds their slots.
  std::atomic<bool> vcpus_done{false};
  std::atomic<int> edits{0};
  std::thread editor([&] {
    while (!vcpus_done.load()) {
      Edit();
      edits.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<std::thread> vcpus;
  for (int t = 0; t < kThreads; ++t) {
    vcpus.emplace_back([&, t] {
      auto session = dispatcher_->NewSession();
      for (int r = 0; r < kRounds; ++r) {
        for (const auto& [msr, write] : accesses) session->Handle(Rdmsr(10 + t % 2, msr, write));
      }
    });
  }
  for (std::thread& v : vcpus) v.join();
  vcpus_done.store(true);
  editor.join();
  EXPECT_GE(edits.load(), 2);
  done.store(true);
  reader.join();
  EXPECT_EQ(decreases.load(), 0);
  const uint64_t per_domain = uint64_t{kRounds} * (kThreads / 2);
  for (uint32_t domain : {10u, 11u}) {
    EXPECT_EQ(Count(domain, 0x12345600, false, dispatch::MsrAction::kGp), per_domain);
    EXPECT_EQ(Count(domain, 0x12345601, false, dispatch::MsrAction::kConst), per_domain);
    EXPECT_EQ(Count(domain, 0x12345602, true, dispatch::MsrAction::kShadow), per_domain);
    EXPECT_EQ(Count(domain, 0x12345602, false, dispatch::MsrAction::kZero), per_domain);
    EXPECT_EQ(Count(domain, 0x40000020, false, dispatch::MsrAction::kZero), per_domain);
    EXPECT_EQ(Count(domain, 0x7777, false, dispatch::MsrAction::kUnknownGp), per_domain);
  }
  uint64_t sum = 0;
  for (const dispatch::MsrCount& c : dispatcher_->CountsByKey().msrs) sum += c.count;
  EXPECT_EQ(sum, uint64_t{kThreads} * kRounds * accesses.size());
  // A counting session counts each trap once, by (domain, instruction,
  // outcome); Stats() and the series by kind are both sums of that.
  uint64_t kinds = 0;
  for (const dispatch::KindCount& c : dispatcher_->CountsByKey().kinds) kinds += c.count;
  EXPECT_EQ(kinds, uint64_t{kThreads} * kRounds * accesses.size());
  const dispatch::TrapStats stats = dispatcher_->Stats();
  EXPECT_EQ(stats.traps, uint64_t{kThreads} * kRounds * accesses.size());
  EXPECT_EQ(stats.exceptions, uint64_t{kThreads} * kRounds * 2);  // 0x12345600 and 0x7777
  EXPECT_EQ(Logged("first read of MSR 0x12345600 by domain 10"), 1);
}

TEST_F(SlotCountsTest, StatsOfACountingSessionCountDecodeErrorsAndEndedSessions) {
  {
    auto ended = dispatcher_->NewSession();
    for (int i = 0; i < 3; ++i) ended->Handle(Rdmsr(10, 0x12345601));
  }
  auto session = dispatcher_->NewSession();
  emulator::Trap bad = Rdmsr(10, 0x12345601);
  bad.insn[0] = 0x0f;
  bad.insn[1] = 0xff;  // UD0 without its ModRM: not a privileged instruction
  bad.insn_len = 2;
  emulator::DecodeError error = emulator::DecodeError::kOk;
  session->Handle(bad, nullptr, &error);
  ASSERT_NE(error, emulator::DecodeError::kOk);
  session->Handle(Rdmsr(11, 0x12345600));
  const dispatch::TrapStats stats = dispatcher_->Stats();
  EXPECT_EQ(stats.traps, 5u);
  EXPECT_EQ(stats.completed, 3u);
  EXPECT_EQ(stats.decode_errors, 1u);
  EXPECT_EQ(stats.completed + stats.exceptions + stats.unhandled + stats.device_io, 5u);
}

// Off (the default): Stats() still counts every trap, ended sessions
// included; CountsByKey() is empty.
class TrapCountsOffTest : public DefaultDispatcherTest {};

TEST_F(TrapCountsOffTest, StatsCountWithoutTheBreakdown) {
  EXPECT_FALSE(dispatcher_->counting_by_domain_and_msr());
  {
    auto ended = dispatcher_->NewSession();
    for (int i = 0; i < 3; ++i) ended->Handle(Rdmsr(0, 0x1b0));
  }
  auto session = dispatcher_->NewSession();
  session->Handle(Rdmsr(7, 0x12345));
  const dispatch::TrapStats stats = dispatcher_->Stats();
  EXPECT_EQ(stats.traps, 4u);
  EXPECT_EQ(stats.completed, 3u);
  EXPECT_EQ(stats.exceptions, 1u);
  const dispatch::Dispatcher::Counts counts = dispatcher_->CountsByKey();
  EXPECT_TRUE(counts.kinds.empty());
  EXPECT_TRUE(counts.msrs.empty());
}

// The real daemon with --metrics on a free loopback port.
class MetricsDaemonTest : public DaemonTest {
 protected:
  void StartWithMetrics() {
    port_ = FreeLoopbackPort();
    options_.metrics = absl::StrCat("127.0.0.1:", port_);
    StartDaemon();
  }
  void Emulate(const v1::Trap& trap) {
    grpc::ClientContext context;
    v1::Outcome outcome;
    ASSERT_TRUE(emulator_->Emulate(&context, trap, &outcome).ok());
  }
  std::string Scrape() {
    HttpResponse r = HttpGet(port_, "/metrics");
    EXPECT_EQ(r.status, 200);
    return r.body;
  }
  uint16_t port_ = 0;
};

TEST_F(MetricsDaemonTest, ServesTrapsSentThroughEmulate) {
  StartWithMetrics();
  EXPECT_THAT(daemon_->ReadyMessage(),
              HasSubstr(absl::StrCat("metrics on http://127.0.0.1:", port_, "/metrics")));
  for (int i = 0; i < 20; ++i) Emulate(RdmsrTrap(0, 0x1b0));
  for (int i = 0; i < 7; ++i) Emulate(RdmsrTrap(7, 0x12345 + i));
  const std::string text = Scrape();
  EXPECT_EQ(SumSamples(text, "pvemu_traps_total"), 27) << text;
  EXPECT_EQ(SumSamples(text, "pvemu_traps_total", {"domain=\"7\"", "outcome=\"exception\""}), 7);
  EXPECT_EQ(SumSamples(text, "pvemu_rpcs_total",
                       {"method=\"pvemu.v1.EmulatorService/Emulate\"", "code=\"OK\""}),
            27);
  EXPECT_THAT(text, HasSubstr("pvemu_policy_generation 1\n"));
  EXPECT_THAT(text, HasSubstr("pvemu_audit_watchers 0\n"));
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_virtual_memory_bytes", "process_start_time_seconds",
                           "process_open_fds", "process_max_fds"}) {
    EXPECT_EQ(CountSamples(text, name), 1) << name;
  }
  EXPECT_GT(SumSamples(text, "process_resident_memory_bytes"), 0);
  EXPECT_GT(SumSamples(text, "process_open_fds"), 0);
  EXPECT_EQ(HttpGet(port_, "/").status, 404);
  EXPECT_EQ(HttpGet(port_, "/metricsx").status, 404);
}

TEST_F(MetricsDaemonTest, CountsAndTimesEdits) {
  StartWithMetrics();
  v1::SetRuleRequest set;
  set.mutable_layer()->set_domain(3);
  set.mutable_rule()->set_msr("0x1b0");
  set.mutable_rule()->set_read(v1::ReadAction::ZERO);
  v1::EditResponse edit;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(policy_->SetRule(&context, set, &edit).ok());
  }
  set.set_if_generation(1);  // stale: refused
  {
    grpc::ClientContext context;
    EXPECT_EQ(policy_->SetRule(&context, set, &edit).error_code(), grpc::StatusCode::ABORTED);
  }
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("pvemu_edits_total{result=\"accepted\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pvemu_edits_total{result=\"refused\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("pvemu_edit_duration_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("pvemu_edit_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE pvemu_edit_duration_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("pvemu_policy_generation 2\n"));
  EXPECT_THAT(text, HasSubstr(
      "pvemu_rpcs_total{method=\"pvemu.v1.PolicyService/SetRule\",code=\"ABORTED\"} 1\n"));
}

TEST_F(MetricsDaemonTest, PromtoolChecksTheOutput) {
  StartWithMetrics();
  Emulate(RdmsrTrap(0, 0x1b0));
  Emulate(RdmsrTrap(9, 0x12345));
  const std::string path = dir_ + "/metrics.txt";
  std::ofstream(path) << Scrape();
  ASSERT_EQ(access("/usr/bin/promtool", X_OK), 0)
      << "/usr/bin/promtool is missing: scripts/install-deps installs package prometheus";
  const std::string command = absl::StrCat("/usr/bin/promtool check metrics < ", path, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
}

TEST_F(MetricsDaemonTest, StatsMsrsListsEachDomainsMsrs) {
  StartWithMetrics();
  for (int i = 0; i < 3; ++i) Emulate(RdmsrTrap(7, 0x1b0));
  Emulate(RdmsrTrap(8, 0x1b0));
  v1::StatsRequest request;
  request.set_msrs(true);
  request.set_domain(7);
  v1::StatsResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(emulator_->GetStats(&context, request, &response).ok());
  ASSERT_EQ(response.msrs_size(), 1);
  EXPECT_EQ(response.msrs(0).domain(), 7u);
  EXPECT_EQ(response.msrs(0).msr(), 0x1b0u);
  EXPECT_EQ(response.msrs(0).name(), "IA32_ENERGY_PERF_BIAS");
  EXPECT_EQ(response.msrs(0).reads(), 3u);

  // pvemuctl -o json stats --msrs: one object per (domain, MSR), fixed keys.
  const char* build = std::getenv("PVEMU_BUILD_ROOT");
  ASSERT_NE(build, nullptr);
  const std::string command = absl::StrCat(build, "/client/pvemuctl --server=", options_.listen,
                                           " -o json stats --msrs --domain=7");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_EQ(output,
            "{\"domain\":7,\"msr\":\"0x1b0\",\"name\":\"IA32_ENERGY_PERF_BIAS\",\"reads\":3,"
            "\"writes\":0,\"actions\":{\"read\":{\"PASSTHROUGH\":3},\"write\":{}}}\n");
}

std::string RunPvemuctl(const std::string& args, int* exit_code) {
  const char* build = std::getenv("PVEMU_BUILD_ROOT");
  EXPECT_NE(build, nullptr);
  const std::string command = absl::StrCat(build == nullptr ? "." : build, "/client/pvemuctl ",
                                           args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return "";
  std::string output;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

TEST_F(MetricsDaemonTest, StatsMsrsWithoutCountingSaysHowToTurnItOn) {
  StartDaemon();  // neither --metrics nor --count-msrs
  Emulate(RdmsrTrap(7, 0x1b0));
  v1::StatsRequest request;
  request.set_msrs(true);
  v1::StatsResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status status = emulator_->GetStats(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("start pvemud with --count-msrs or --metrics"));
  }
  {
    grpc::ClientContext context;
    request.set_msrs(false);
    ASSERT_TRUE(emulator_->GetStats(&context, request, &response).ok());
    EXPECT_EQ(response.traps(), 1u);  // the totals count either way
  }
  int exit_code = 0;
  const std::string output =
      RunPvemuctl(absl::StrCat("--server=", options_.listen, " stats --msrs"), &exit_code);
  EXPECT_EQ(exit_code, 1) << output;
  EXPECT_EQ(output,
            "pvemuctl: this pvemud does not count MSR accesses: start pvemud with "
            "--count-msrs or --metrics\n");
}

TEST_F(MetricsDaemonTest, CountMsrsTurnsCountingOnWithoutHttp) {
  options_.count_msrs = true;
  StartDaemon();
  for (int i = 0; i < 2; ++i) Emulate(RdmsrTrap(7, 0x1b0));
  int exit_code = 0;
  const std::string output = RunPvemuctl(
      absl::StrCat("--server=", options_.listen, " -o json stats --msrs --domain=7"), &exit_code);
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_THAT(output, HasSubstr("\"msr\":\"0x1b0\""));
  EXPECT_THAT(output, HasSubstr("\"reads\":2"));
}

TEST_F(MetricsDaemonTest, BadAddressesFailAtStartNamingTheFlag) {
  const uint16_t busy_port = FreeLoopbackPort();
  const int busy = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(busy_port);
  ASSERT_EQ(bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(busy, 1), 0);
  const std::string in_use = absl::StrCat("127.0.0.1:", busy_port);
  for (const std::string& bad : {std::string("127.0.0.1"), std::string("127.0.0.1:70000"),
                                 std::string(":9464"), in_use}) {
    options_.metrics = bad;
    std::vector<std::string> warnings;
    auto daemon = server::Daemon::Start(options_, &warnings);
    ASSERT_FALSE(daemon.ok()) << bad;
    EXPECT_THAT(daemon.status().message(), HasSubstr("--metrics=" + bad)) << daemon.status();
  }
  close(busy);
}

}  // namespace
}  // namespace pvemu::testing
