// Load on loopback (a Unix socket in a temp dir): 4 clients streaming traps
// over EmulateStream, 1 editor changing a rule as fast as it can with
// if_generation, 1 audit watcher. Bounded in time ($PVEMU_LOAD_SECONDS,
// default 5; the `slow` suite runs 60).
//
// Checks: no RPC fails; the watcher's edit sequence equals the editor's
// acknowledged sequence; every trap outcome comes from one whole generation
// (the rule's value is the generation that set it, so a torn edit would show
// a value from another generation); resident memory after the run is within
// 10% of the start.
#include <algorithm>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sanitizers.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

// Resident memory after returning freed heap pages to the system, so the
// figure tracks live memory rather than what malloc keeps cached.
uint64_t ResidentKiB() {
  malloc_trim(0);
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      uint64_t kib = 0;
      (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(
                                 absl::string_view(line).substr(6, line.size() - 9)),
                             &kib);
      return kib;
    }
  }
  return 0;
}

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
  std::vector<uint64_t> watched;
  std::thread watcher([&] {
    v1::AuditEvent event;
    while (watch->Read(&event)) watched.push_back(event.edit().generation());
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

  std::vector<uint64_t> acknowledged;
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
      current = edit.generation();
      acknowledged.push_back(current);
    }
  });

  // Start measuring once buffers, arenas and thread stacks are warm: a third
  // of the way in (at most 5 s), so a leak shows as growth over the rest.
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5000, seconds * 1000 / 3)));
  const uint64_t rss_start = ResidentKiB();
  editor.join();
  stop = true;
  for (auto& s : streamers) s.join();
  // Let the last edit events reach the watcher, then end its stream.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  watch_context.TryCancel();
  watcher.join();
  const uint64_t rss_end = ResidentKiB();

  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(torn.load(), 0u) << "outcomes mixing two generations";
  EXPECT_EQ(watched, acknowledged) << "the watcher's edits differ from the editor's";
  EXPECT_GT(traps.load(), 0u);
  EXPECT_GT(acknowledged.size(), 0u);
  // ASan's quarantine keeps freed memory resident: no RSS check there.
  if (!kUnderAddressSanitizer) {
    EXPECT_LE(rss_end, rss_start + rss_start / 10)
      << "resident memory grew from " << rss_start << " KiB to " << rss_end << " KiB";
  }
  std::printf("%d s: %.0f traps/s over 4 streams, %.1f edits/s, RSS %llu -> %llu KiB\n", seconds,
              traps.load() / static_cast<double>(seconds),
              acknowledged.size() / static_cast<double>(seconds),
              static_cast<unsigned long long>(rss_start), static_cast<unsigned long long>(rss_end));
}

}  // namespace
}  // namespace pvemu::testing
