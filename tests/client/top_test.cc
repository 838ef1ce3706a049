// pvemuctl top against a real pvemud counting MSR accesses:
// the --once JSON lines, and the live view in a real terminal (tmux).
#include <atomic>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

std::string Pvemuctl() { return std::string(std::getenv("PVEMU_BUILD_ROOT")) + "/client/pvemuctl"; }

class TopTest : public DaemonTest {
 protected:
  void Emulate(uint32_t domain, uint32_t msr, int times) {
    for (int i = 0; i < times; ++i) {
      grpc::ClientContext context;
      v1::Outcome outcome;
      ASSERT_TRUE(emulator_->Emulate(&context, RdmsrTrap(domain, msr), &outcome).ok());
    }
  }
  std::string Top(const std::string& flags) {
    return absl::StrCat(Pvemuctl(), " --server=", options_.listen, " top ", flags);
  }
};

TEST_F(TopTest, OnceJsonGivesOneLinePerDomainAndMsrInTheDocumentedKeyOrder) {
  options_.count_msrs = true;
  StartDaemon();
  Emulate(1, 0x1b0, 3);  // IA32_ENERGY_PERF_BIAS
  Emulate(2, 0x10, 1);   // IA32_TIME_STAMP_COUNTER
  CommandRun r = RunCommand(Top("--once --interval=0.2 -o json"));
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<std::string> lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << r.output;
  // Same rate (none between the samples): the larger count first.
  EXPECT_THAT(lines[0], MatchesRegex("\\{\"domain\":1,\"msr\":\"0x1b0\",\"name\":\"IA32_ENERGY_PERF_BIAS\","
                                     "\"rate\":0,\"reads\":3,\"writes\":0,\"action\":\"\\w+\","
                                     "\"rule\":\".+\"\\}"));
  EXPECT_THAT(lines[1], MatchesRegex("\\{\"domain\":2,\"msr\":\"0x10\",\"name\":\"\\w+\",\"rate\":0,"
                                     "\"reads\":1,\"writes\":0,\"action\":\"\\w+\",\"rule\":\".+\"\\}"));
  EXPECT_THAT(lines[0], HasSubstr("\"rule\":\"default.textproto:"));

  // --domain filters; accesses between the samples give a rate. Traps flow
  // for the whole run, so some fall between the two samples however long
  // pvemuctl takes to start on a loaded machine.
  std::atomic<bool> done{false};
  std::thread traps([&] {
    while (!done.load()) {
      Emulate(1, 0x1b0, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  r = RunCommand(Top("--once --interval=1 --domain=1 -o json"));
  done.store(true);
  traps.join();
  ASSERT_EQ(r.status, 0) << r.output;
  lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u) << r.output;
  EXPECT_THAT(lines[0], HasSubstr("\"domain\":1,\"msr\":\"0x1b0\""));
  EXPECT_THAT(lines[0], Not(HasSubstr("\"rate\":0,")));
}

TEST_F(TopTest, WithoutCountingExitsOneWithTheDaemonsMessage) {
  StartDaemon();
  CommandRun r = RunCommand(Top("--once --interval=0.1"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("does not count MSR accesses"));
}

// The live view in a real terminal: tmux runs it, the pane shows the
// header and the MSR, and q ends it.
class TopTmuxTest : public TopTest {
 protected:
  void TearDown() override {
    RunCommand(Tmux("kill-server"));
    TopTest::TearDown();
  }
  std::string Tmux(const std::string& args) {
    return absl::StrCat("tmux -L ", socket_, " ", args);
  }
  const std::string socket_ = absl::StrCat("pvemu-top-test-", getpid());
};

TEST_F(TopTmuxTest, ShowsTheMsrsAndQuitsOnQ) {
  ASSERT_EQ(RunCommand("command -v tmux").status, 0) << "tmux is required (scripts/install-deps)";
  options_.count_msrs = true;
  StartDaemon();
  Emulate(1, 0x1b0, 2);
  CommandRun started = RunCommand(Tmux(absl::StrCat("new-session -d -s top -x 120 -y 30 '",
                                                    Top(""), "'")));
  ASSERT_EQ(started.status, 0) << started.output;
  std::string screen;
  for (int i = 0; i < 100; ++i) {
    screen = RunCommand(Tmux("capture-pane -p -t top")).output;
    if (screen.find("IA32_ENERGY_PERF_BIAS") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(screen, HasSubstr("pvemuctl top"));
  EXPECT_THAT(screen, HasSubstr("ACC/S"));
  EXPECT_THAT(screen, HasSubstr("IA32_ENERGY_PERF_BIAS"));
  ASSERT_EQ(RunCommand(Tmux("send-keys -t top q")).status, 0);
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {
    ended = RunCommand(Tmux("has-session -t top")).status != 0;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(ended) << "top did not quit on q:\n" << RunCommand(Tmux("capture-pane -p -t top")).output;
}

}  // namespace
}  // namespace pvemu::testing
