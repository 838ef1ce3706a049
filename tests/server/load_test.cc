// Load on loopback (a Unix socket in a temp dir): 4 clients streaming traps
// over EmulateStream, 1 editor changing a rule as fast as it can with
// if_generation, 1 audit watcher. Bounded in time ($PVEMU_LOAD_SECONDS,
// default 5; the `slow` suite runs 60).
//
// Checks: no RPC fails; the watcher's edit sequence equals the editor's
// acknowledged sequence; every trap outcome comes from one whole generation
// (the rule's value is the generation that set it, so a torn edit would show
// a value from another generation); resident memory does not grow with the
// edits: sampled against the edit count after a warm-up, its least-squares
// slope stays under kMaxResidentKiBPerEdit (tests/memory_trend.h), judged
// when the run sampled kMinEditsToJudge edits (the 60 s run). The live heap
// is printed beside it, to tell kept memory from malloc's spread.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/memory_trend.h"
#include "tests/sanitizers.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

// The bound on resident memory's growth, fitted against the edits done. An
// edit's garbage is a policy copy, its text, a diff and a compiled snapshot
// (tens of KiB); keeping any of them would rise well above this. Under it
// lies what glibc's per-thread arenas spread out under this load, which
// follows time more than edits (60 s alone: about 0.2 KiB an edit; 0.07 with
// MALLOC_ARENA_MAX=1).
constexpr double kMaxResidentKiBPerEdit = 2.0;
// Fewer edits than this between the first and last sample (the 5 s run, or
// a run starved of CPU by tests beside it) say too little per edit: the
// samples are printed, not judged.
constexpr double kMinEditsToJudge = 2000;

v1::SetRuleRequest RuleForGeneration(uint64_t current) {
  v1::SetRuleRequest request;
  request.mutable_layer()->set_domain(9);
  request.mutable_rule()->set_msr("0x1b0");
  request.mutable_rule()->set_read(v1::ReadAction::CONST);
  request.mutable_rule()->set_value(current + 1);  // the generation this edit makes
  request.set_if_generation(current);
  return request;
}

class LoadTest : public DaemonTest {};

TEST_F(LoadTest, StreamsEditorAndWatcherTogetherLoseNothing) {
  int seconds = 5;
  if (const char* env = std::getenv("PVEMU_LOAD_SECONDS")) (void)absl::SimpleAtoi(env, &seconds);
  StartDaemon();
  // Generation 2 sets the rule, so every trap below has a value to check.
  {
    grpc::ClientContext context;
    v1::EditResponse edit;
    ASSERT_TRUE(policy_->SetRule(&context, RuleForGeneration(1), &edit).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> traps{0}, failures{0}, torn{0};

  // The watcher, subscribed before the editor starts.
  grpc::ClientContext watch_context;
  v1::WatchRequest filter;
  filter.set_edits(true);
  auto watch = audit_->Watch(&watch_context, filter);
  watch->WaitForInitialMetadata();
  // The editor's acknowledged generations run 3, 4, 5, ... (one editor, each
  // edit at the generation before it); the watcher must see exactly those.
  // Counted rather than kept, so that the test's own bookkeeping does not
  // grow with the edits it measures memory against.
  std::atomic<uint64_t> watched{0}, watched_out_of_order{0};
  std::thread watcher([&] {
    v1::AuditEvent event;
    while (watch->Read(&event)) {
      if (event.edit().generation() != 3 + watched.load()) ++watched_out_of_order;
      ++watched;
    }
  });

  std::vector<std::thread> streamers;
  for (int c = 0; c < 4; ++c) {
    streamers.emplace_back([&, c] {
      auto stub = v1::EmulatorService::NewStub(channel_);
      grpc::ClientContext context;
      auto stream = stub->EmulateStream(&context);
      v1::Trap trap;
      trap.set_domain(9);
      trap.set_vcpu(c);
      trap.set_insn(std::string("\x0f\x32", 2));
      trap.mutable_regs()->set_rcx(0x1b0);
      v1::Outcome outcome;
      // Keep a window of 64 traps in flight.
      constexpr int kWindow = 64;
      int in_flight = 0;
      bool ok = true;
      while (ok && !stop.load()) {
        while (in_flight < kWindow && (ok = stream->Write(trap))) ++in_flight;
        if (!ok || !stream->Read(&outcome)) {
          ok = false;
          break;
        }
        --in_flight;
        ++traps;
        if (outcome.regs().rax() != outcome.generation()) ++torn;
      }
      stream->WritesDone();
      while (in_flight-- > 0 && stream->Read(&outcome)) {
        ++traps;
        if (outcome.regs().rax() != outcome.generation()) ++torn;
      }
      if (!stream->Finish().ok()) ++failures;
    });
  }

  std::atomic<uint64_t> acknowledged{0}, acknowledged_out_of_order{0};
  std::thread editor([&] {
    auto stub = v1::PolicyService::NewStub(channel_);
    uint64_t current = 2;
    while (std::chrono::steady_clock::now() < deadline) {
      grpc::ClientContext context;
      v1::EditResponse edit;
      grpc::Status status = stub->SetRule(&context, RuleForGeneration(current), &edit);
      if (!status.ok()) {
        ++failures;
        return;
      }
      if (edit.generation() != current + 1) ++acknowledged_out_of_order;
      current = edit.generation();
      ++acknowledged;
    }
  });

  // Memory by trend: once buffers, arenas and thread stacks are warm (a third
  // of the way in, at most 5 s), resident memory against the edits done,
  // every second (in a short run, often enough for ten samples).
  const int warm_up_ms = std::min(5000, seconds * 1000 / 3);
  const auto period = std::chrono::milliseconds(std::min(1000, (seconds * 1000 - warm_up_ms) / 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(warm_up_ms));
  MemoryTrend rss("resident memory", "edit");
  MemoryTrend heap("live heap", "edit");
  while (std::chrono::steady_clock::now() + period / 2 < deadline) {
    const double edits = static_cast<double>(acknowledged.load());
    rss.Add(edits, ResidentKiB());
    heap.Add(edits, LiveHeapKiB());
    std::this_thread::sleep_for(period);
  }
  editor.join();
  stop = true;
  for (auto& s : streamers) s.join();
  // Let the last edit events reach the watcher, then end its stream.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  watch_context.TryCancel();
  watcher.join();

  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(torn.load(), 0u) << "outcomes mixing two generations";
  EXPECT_EQ(acknowledged_out_of_order.load(), 0u) << "acknowledged generations skipped or repeated";
  EXPECT_EQ(watched.load(), acknowledged.load()) << "the watcher's edits differ from the editor's";
  EXPECT_EQ(watched_out_of_order.load(), 0u) << "the watcher's edits differ from the editor's";
  EXPECT_GT(traps.load(), 0u);
  EXPECT_GT(acknowledged.load(), 0u);
  const double span = rss.size() < 2 ? 0 : rss.last_x() - rss.first_x();
  if (!kUnderAddressSanitizer && span >= kMinEditsToJudge) {
    EXPECT_TRUE(rss.IsFlat(kMaxResidentKiBPerEdit));
  } else if (kUnderAddressSanitizer) {
    std::printf("memory not judged under AddressSanitizer (its quarantine stays resident)\n");
  } else {
    std::printf("memory not judged: %.0f edits sampled, %.0f needed\n", span, kMinEditsToJudge);
  }
  std::printf("%d s: %.0f traps/s over 4 streams, %.1f edits/s\n%s\n", seconds,
              traps.load() / static_cast<double>(seconds),
              acknowledged.load() / static_cast<double>(seconds), rss.Describe().c_str());
  std::printf("%s\n", heap.Describe().c_str());
}

}  // namespace
}  // namespace pvemu::testing
