// From learning to enforcing on real KVM guests (pvemu-vm, pvemuctl, pvemud):
// a guest touching a known set of MSRs and ports runs under a deny-by-default
// policy in LEARN and sees no #GP; `suggest` from its capture drafts a layer;
// the same guest under the base policy plus that layer in ENFORCE prints
// exactly what it printed while learning; a guest touching one more MSR
// faults on exactly that one; `replay --changes` of the capture against the
// base policy exits 2 and lists exactly the relaxed accesses, the MSR ones
// BREAKING. Then the same loop subscribed to a real pvemud, switched to
// LEARN with `policy set-mode`.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/kvm/kvm_test_util.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kDomain = 1;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct CtlRun {
  int status = -1;
  std::string out, err;
};
CtlRun Ctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {PvemuctlPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess ctl;
  CtlRun run;
  if (!ctl.Start(argv)) {
    run.err = ctl.stderr_text();
    return run;
  }
  while (ctl.Pump(std::chrono::milliseconds(100))) {
  }
  run.status = ctl.Wait();
  run.out = ctl.stdout_text();
  run.err = ctl.stderr_text();
  return run;
}

class KvmLearnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PVEMU_REQUIRE_KVM();
    dir_ = (std::filesystem::temp_directory_path() /
            absl::StrCat("pvemu-kvm-learn.", getpid(), ".",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    base_ = TestPolicyPath("learn-base");
    learning_ = dir_ + "/learning.textproto";
    std::ofstream(learning_) << ReadFile(base_) << "domain { domain: 1 mode: LEARN }\n";
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  VmRun Run(const std::string& guest, const std::string& policy_or_server,
            const std::string& capture = "") {
    std::vector<std::string> argv = {PvemuVmPath(), absl::StrCat("--domain=", kDomain),
                                     policy_or_server, "--timeout=120"};
    if (!capture.empty()) argv.push_back("--capture=" + capture);
    argv.push_back(GuestPath(guest));
    return RunVmCommand(argv, /*json=*/false);
  }

  // The loop from a capture: draft, check, enforce, one MSR more.
  void CheckLoop(const VmRun& learning, const std::string& capture) {
    ASSERT_EQ(learning.status, 0) << learning.Describe();
    EXPECT_THAT(learning.console, HasSubstr("cpu0: gp 0\n")) << learning.Describe();
    const CtlRun draft = Ctl({"suggest", capture});
    ASSERT_EQ(draft.status, 0) << draft.err;
    EXPECT_THAT(draft.out, HasSubstr("msr: \"0x12345602\"\n    read: ZERO\n    write: IGNORE"));
    EXPECT_THAT(draft.out, HasSubstr("msr: \"0x12345610\"\n    read: ZERO\n"));
    EXPECT_THAT(draft.out, HasSubstr("io_port {\n    first: 1296\n    last: 1299"));
    EXPECT_THAT(draft.out, Not(HasSubstr("0x12345601")));  // allowed while enforcing
    // pvemu-vm --capture has KVM copy the registers out at each exit, so the
    // comments name each first access's guest RIP (the image is at 0x100000).
    EXPECT_THAT(draft.out, ::testing::ContainsRegex("record [0-9]+, rip 0x10[0-9a-f]{4}"));
    EXPECT_THAT(draft.out, Not(HasSubstr("rip 0x0\n")));
    const std::string enforcing = dir_ + "/enforcing.textproto";
    std::ofstream(enforcing) << ReadFile(base_) << draft.out;
    const CtlRun valid = Ctl({"validate", enforcing});
    ASSERT_EQ(valid.status, 0) << valid.out << valid.err;

    const VmRun enforced = Run("learn", "--policy=" + enforcing);
    ASSERT_EQ(enforced.status, 0) << enforced.Describe();
    EXPECT_EQ(enforced.console, learning.console);
    const VmRun more = Run("learn_more", "--policy=" + enforcing);
    ASSERT_EQ(more.status, 0) << more.Describe();
    // Everything as while learning, then exactly one fault: the new MSR's.
    const std::string seen = learning.console.substr(0, learning.console.find("cpu0: gp 0"));
    EXPECT_TRUE(absl::StartsWith(more.console, seen)) << more.Describe();
    EXPECT_THAT(more.console.substr(seen.size()), HasSubstr("0x12345620"));
    EXPECT_TRUE(absl::EndsWith(more.console, "cpu0: gp 1\n")) << more.Describe();

    const CtlRun changes = Ctl({"replay", "--changes", "--policy=" + base_, capture});
    EXPECT_EQ(changes.status, 2) << changes.out << changes.err;
    EXPECT_THAT(changes.out, HasSubstr("domain 1 rdmsr 0x12345602 read: recorded completed 0x0, "
                                       "candidate exception #GP, 2 traps"));
    EXPECT_THAT(changes.out, HasSubstr("domain 1 wrmsr 0x12345602 write: recorded completed, "
                                       "candidate exception #GP, 1 trap"));
    EXPECT_THAT(changes.out, HasSubstr("domain 1 rdmsr 0x12345610 read"));
    EXPECT_THAT(changes.out, HasSubstr("domain 1 in 0x510 read: recorded device, candidate "
                                       "completed, 1 trap, rule io_port\n"));
    EXPECT_THAT(changes.out, HasSubstr("domain 1 out 0x510 write: recorded device, candidate "
                                       "completed, 1 trap, rule io_port\n"));
    EXPECT_THAT(changes.out, HasSubstr("5 accesses answered differently (3 breaking)"));
    const CtlRun same = Ctl({"replay", "--changes", "--policy=" + enforcing, capture});
    EXPECT_EQ(same.status, 0) << same.out << same.err;
  }

  // pvemud on the base policy, answering on a socket in dir_; *server is
  // pvemuctl's and pvemu-vm's --server flag for it.
  void StartDaemon(ChildProcess* daemon, std::string* server) {
    const std::string socket = dir_ + "/pvemu.sock";
    ASSERT_TRUE(daemon->Start({PvemudPath(), "--listen=unix:" + socket,
                               "--state-dir=" + dir_ + "/state", "--policy=" + base_}))
        << daemon->stderr_text();
    auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
    ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(30)))
        << daemon->stderr_text();
    *server = "--server=unix:" + socket;
  }

  std::string dir_, base_, learning_;
};

TEST_F(KvmLearnTest, StandaloneLearnThenEnforceGivesTheGuestWhatItSawWhileLearning) {
  const std::string capture = dir_ + "/learn.traps";
  const VmRun learning = Run("learn", "--policy=" + learning_, capture);
  ASSERT_NO_FATAL_FAILURE(CheckLoop(learning, capture));
  // Under the base policy in ENFORCE the same guest faults: 4 #GPs.
  const VmRun base = Run("learn", "--policy=" + base_);
  ASSERT_EQ(base.status, 0) << base.Describe();
  EXPECT_THAT(base.console, HasSubstr("cpu0: gp 4\n"));
}

TEST_F(KvmLearnTest, SubscribedToPvemudSwitchedToLearnWithSetMode) {
  ChildProcess daemon;
  std::string server;
  ASSERT_NO_FATAL_FAILURE(StartDaemon(&daemon, &server));
  const CtlRun learn = Ctl({server, "policy", "set-mode", "--domain=1", "learn"});
  ASSERT_EQ(learn.status, 0) << learn.out << learn.err;
  const std::string capture = dir_ + "/learn.traps";
  const VmRun learning = Run("learn", server, capture);
  ASSERT_NO_FATAL_FAILURE(CheckLoop(learning, capture));
  // Back to ENFORCE, live: the next VM faults as the base policy says.
  const CtlRun enforce = Ctl({server, "policy", "set-mode", "--domain=1", "enforce"});
  ASSERT_EQ(enforce.status, 0) << enforce.out << enforce.err;
  const VmRun after = Run("learn", server);
  ASSERT_EQ(after.status, 0) << after.Describe();
  EXPECT_THAT(after.console, HasSubstr("cpu0: gp 4\n"));
  daemon.Signal(SIGTERM);
  daemon.Wait();
}

// The switch made while the guest runs: learn_switch.S spins on a GP-ruled
// MSR under the base policy in ENFORCE until `policy set-mode learn` reaches
// its VM at the next trap (no restart); then it makes learn.S's accesses and
// sees no #GP, and `suggest --server` drafts the layer from the daemon's
// learned records, each with the guest RIP of its first access.
TEST_F(KvmLearnTest, SubscribedGuestSwitchedToLearnWhileItRunsStopsFaultingAtItsNextTrap) {
  ChildProcess daemon;
  std::string server;
  ASSERT_NO_FATAL_FAILURE(StartDaemon(&daemon, &server));
  ChildProcess vm;
  ASSERT_TRUE(vm.Start({PvemuVmPath(), absl::StrCat("--domain=", kDomain), server,
                        "--timeout=120", GuestPath("learn_switch")}))
      << vm.stderr_text();
  // The guest faults while it waits: its VM reports the #GPs to pvemud.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t faults = 0;
  while (faults < 10 && std::chrono::steady_clock::now() < deadline) {
    vm.Pump(std::chrono::milliseconds(100));
    const CtlRun stats = Ctl({server, "-o", "json", "stats"});
    const size_t at = stats.out.find("\"exceptions\":");
    if (at != std::string::npos) faults = std::strtoull(stats.out.c_str() + at + 13, nullptr, 10);
  }
  ASSERT_GE(faults, 10u) << vm.stderr_text() << daemon.stderr_text();
  const CtlRun learn = Ctl({server, "policy", "set-mode", "--domain=1", "learn"});
  ASSERT_EQ(learn.status, 0) << learn.out << learn.err;
  const int status = vm.Finish(std::chrono::seconds(120));
  ASSERT_EQ(status, 0) << vm.stdout_text() << vm.stderr_text();
  const std::string console = vm.stdout_text();
  const size_t switched = console.find("cpu0: switched to learning\n");
  ASSERT_NE(switched, std::string::npos) << console;
  EXPECT_THAT(console.substr(switched), Not(HasSubstr("#GP"))) << console;
  EXPECT_TRUE(absl::EndsWith(console, "cpu0: gp 0\n")) << console;

  const CtlRun draft = Ctl({server, "suggest", "--domain=1"});
  ASSERT_EQ(draft.status, 0) << draft.err;
  EXPECT_THAT(draft.out, HasSubstr("msr: \"0x12345602\"\n    read: ZERO\n    write: IGNORE"));
  EXPECT_THAT(draft.out, HasSubstr("msr: \"0x12345610\"\n    read: ZERO\n"));
  EXPECT_THAT(draft.out, HasSubstr("io_port {\n    first: 1296\n    last: 1299"));
  EXPECT_THAT(draft.out, Not(HasSubstr("0x12345601")));
  // Every first occurrence names where the guest was: its image is loaded
  // at 0x100000 (docs/CLI.md, pvemu-vm).
  const CtlRun learned = Ctl({server, "-o", "json", "stats", "--learned"});
  ASSERT_EQ(learned.status, 0) << learned.err;
  EXPECT_THAT(learned.out, HasSubstr("\"index\":\"0x12345610\""));
  EXPECT_THAT(learned.out, Not(HasSubstr("\"rip\":\"0x0\""))) << learned.out;
  EXPECT_THAT(learned.out, ::testing::ContainsRegex("\"rip\":\"0x10[0-9a-f]{4}\"")) << learned.out;
  daemon.Signal(SIGTERM);
  daemon.Wait();
}

// A subscribed VM's decisions reach the operator as the daemon's own do:
// after the VM ends, `stats --msrs`, `top --once -o json` and /metrics show
// exactly what msr_actions.S did per MSR and action (10 RDMSR and 8 WRMSR
// exits), and pvemud logs one first-access line per (MSR, access) that a GP
// rule decided.
TEST_F(KvmLearnTest, ASubscribedVmsDecisionsReachStatsTopMetricsAndTheLogAfterItEnds) {
  // A free port for /metrics.
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  close(probe);

  ChildProcess daemon;
  const std::string socket_path = dir_ + "/pvemu.sock";
  ASSERT_TRUE(daemon.Start({PvemudPath(), "--listen=unix:" + socket_path,
                            "--state-dir=" + dir_ + "/state",
                            "--policy=" + TestPolicyPath("msr-actions"),
                            absl::StrCat("--metrics=127.0.0.1:", port)}))
      << daemon.stderr_text();
  auto channel = grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials());
  ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(30)))
      << daemon.stderr_text();
  const std::string server = "--server=unix:" + socket_path;
  const VmRun vm = Run("msr_actions", server);
  ASSERT_EQ(vm.status, 0) << vm.Describe();

  // The totals and the per-MSR rows equal what the guest did, at once: the
  // VM's last batch arrived before its pvemu_kvm_close returned.
  const CtlRun totals = Ctl({server, "-o", "json", "stats"});
  // 18 MSR exits (4 of them #GP) and one device exit per console byte.
  EXPECT_THAT(totals.out, HasSubstr("\"completed\":14,\"exceptions\":4,")) << totals.out;
  const CtlRun msrs = Ctl({server, "stats", "--msrs", "--domain=1"});
  ASSERT_EQ(msrs.status, 0) << msrs.out << msrs.err;
  for (const char* row : {"0xce        MSR_PLATFORM_INFO", "read PASSTHROUGH 1",
                          "read CONST 1, write GP 1", "read GP 1, write GP 1",
                          "read SHADOW 1, write SHADOW 2", "read SHADOW 2, write SHADOW 1"}) {
    EXPECT_THAT(msrs.out, HasSubstr(row)) << msrs.out;
  }
  const CtlRun top = Ctl({server, "-o", "json", "top", "--once", "--domain=1"});
  ASSERT_EQ(top.status, 0) << top.out << top.err;
  EXPECT_THAT(top.out, HasSubstr("\"msr\":\"0x12345605\""));
  EXPECT_THAT(top.out, HasSubstr("\"reads\":1,\"writes\":2"));

  const CtlRun scrape = [&] {
    ChildProcess curl;
    CtlRun run;
    if (!curl.Start({"/usr/bin/curl", "-sS", absl::StrCat("http://127.0.0.1:", port, "/metrics")}))
      return run;
    while (curl.Pump(std::chrono::milliseconds(100))) {
    }
    run.status = curl.Wait();
    run.out = curl.stdout_text();
    return run;
  }();
  ASSERT_EQ(scrape.status, 0);
  EXPECT_THAT(scrape.out,
              HasSubstr("pvemu_msr_accesses_total{domain=\"1\",msr=\"0x12345605\",name=\"\","
                        "access=\"write\",action=\"SHADOW\"} 2"));
  EXPECT_THAT(scrape.out, HasSubstr("pvemu_traps_total{domain=\"1\",instruction=\"rdmsr\","
                                    "outcome=\"completed\"}"));
  EXPECT_THAT(scrape.out, HasSubstr("method=\"pvemu.v1.KvmService/ReportTraps\""));
  EXPECT_THAT(scrape.out, Not(HasSubstr("method=\"other\",code=\"OK\"} 1")));

  daemon.Signal(SIGTERM);
  while (daemon.Pump(std::chrono::milliseconds(100))) {
  }
  daemon.Wait();
  // One first-access line per (MSR, access) a GP rule decided: 0x12345600
  // write, 0x12345602 read and write.
  const std::string log = daemon.stderr_text();
  for (const char* first : {"first write of MSR 0x12345600", "first read of MSR 0x12345602",
                            "first write of MSR 0x12345602"}) {
    EXPECT_THAT(log, HasSubstr(first)) << log;
    const size_t at = log.find(first);
    EXPECT_EQ(log.find(first, at + 1), std::string::npos) << first;
  }
  EXPECT_THAT(log, HasSubstr("pvemud: kvm pid "));
}

}  // namespace
}  // namespace pvemu::testing
