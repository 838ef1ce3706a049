// Live edits from pvemud reach a running guest:
// pvemu-vm subscribes to a real pvemud (build/server/pvemud), the guest
// (tests/kvm/guests/live_read_loop.S) reads an MSR in a loop and prints it,
// and the tests edit that MSR's rule with pvemuctl, timing the guest's
// console lines as they arrive. Then pvemud is killed mid-run, and the
// guest must finish on the last policy it got.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/kvm/kvm_test_util.h"

namespace pvemu::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

constexpr int kDomain = 1;
// live.textproto: the MSR the guest prints, its stop flag, its read limit.
constexpr uint32_t kValueMsr = 0x12345670;
constexpr uint32_t kStopMsr = 0x12345671;
constexpr uint32_t kLimitMsr = 0x12345672;
constexpr uint64_t kFirstValue = 0xa0;

// The edit-to-guest bound (docs/performance.md, "KVM data plane"). Inside
// run-in-kvm-vm.sh's QEMU guest (run-kvm-suite.sh sets PVEMU_KVM_NESTED_TCG)
// every instruction of pvemud, pvemu-vm and this test is emulated in
// software, tens of times slower (pvemuctl alone takes 1-3 s to start), so
// there the bound is 1 s and the test says so; 147 ms was seen once in 10.
milliseconds EditLatencyBound() {
  if (std::getenv("PVEMU_KVM_NESTED_TCG") != nullptr) {
    std::printf("under nested software emulation: the edit latency bound is 1000 ms, not 100 ms\n");
    return milliseconds(1000);
  }
  return milliseconds(100);
}

// The value in a "cpu0: rdmsr 0x12345670 = 0x..." line, if it is one.
std::optional<uint64_t> ValueRead(const std::string& line) {
  absl::string_view rest = line;
  if (!absl::ConsumePrefix(&rest, absl::StrFormat("cpu0: rdmsr 0x%x = 0x", kValueMsr))) {
    return std::nullopt;
  }
  uint64_t value;
  if (!absl::SimpleHexAtoi(rest, &value)) return std::nullopt;
  return value;
}

// pvemud on a Unix socket in a fresh directory, started from a policy file.
class Pvemud {
 public:
  explicit Pvemud(std::string dir) : dir_(std::move(dir)) {}

  std::string socket() const { return dir_ + "/pvemu.sock"; }
  std::string address() const { return "unix:" + socket(); }

  // Starts the binary and waits until it accepts RPCs (ASSERT inside).
  void Start(const std::string& policy) {
    ASSERT_TRUE(process_.Start({PvemudPath(), "--listen=" + address(),
                                "--state-dir=" + dir_ + "/state", "--policy=" + policy}))
        << process_.stderr_text();
    auto channel = grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
    bool up = channel->WaitForConnected(std::chrono::system_clock::now() + seconds(30));
    if (!up) process_.Pump(milliseconds(100));
    ASSERT_TRUE(up) << "pvemud did not come up on " << address() << ":\n"
                    << process_.stderr_text();
  }

  void Kill() {
    process_.Signal(SIGKILL);
    process_.Wait();
  }

 private:
  std::string dir_;
  ChildProcess process_;
};

// One acknowledged edit: when pvemuctl printed the new generation, and when
// pvemuctl started (the edit happened in between).
struct Ack {
  uint64_t generation = 0;
  steady_clock::time_point at;
  steady_clock::time_point started;
};

class KvmLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PVEMU_REQUIRE_KVM();
    dir_ = (std::filesystem::temp_directory_path() /
            absl::StrCat("pvemu-kvm-live.", getpid(), ".", ++counter_))
               .string();
    std::filesystem::create_directories(dir_);
    daemon_ = std::make_unique<Pvemud>(dir_);
    ASSERT_NO_FATAL_FAILURE(daemon_->Start(TestPolicyPath("live")));
  }
  void TearDown() override {
    vm_.reset();
    daemon_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void StartVm() {
    vm_ = std::make_unique<ChildProcess>();
    ASSERT_TRUE(vm_->Start({PvemuVmPath(), absl::StrCat("--domain=", kDomain),
                            "--server=" + daemon_->address(), "--timeout=600", "-o", "json",
                            GuestPath("live_read_loop")}))
        << vm_->stderr_text();
  }

  // Sets `msr` of domain 1 to read CONST `value`, through pvemuctl, while the
  // VM's console keeps being read (and timed). The ack is the moment
  // pvemuctl's answer arrived.
  Ack SetConst(uint32_t msr, uint64_t value) {
    ChildProcess ctl;
    Ack ack;
    ack.started = steady_clock::now();
    if (!ctl.Start({PvemuctlPath(), "--server=" + daemon_->address(), "-o", "json", "policy",
                    "set-rule", absl::StrCat("--domain=", kDomain),
                    absl::StrFormat("--msr=0x%x", msr), "--read=CONST",
                    absl::StrFormat("--value=0x%x", value)})) {
      ADD_FAILURE() << ctl.stderr_text();
      return ack;
    }
    while (ctl.Pump(milliseconds(1))) {
      if (vm_ != nullptr) vm_->Pump(milliseconds(0));
      if (ack.at == steady_clock::time_point{} && !ctl.lines().empty()) {
        ack.at = ctl.lines().front().at;
      }
    }
    int status = ctl.Wait();
    EXPECT_EQ(status, 0) << ctl.command() << ": " << ctl.stdout_text() << ctl.stderr_text();
    // {"generation":G}
    absl::string_view out = ctl.stdout_text();
    if (absl::ConsumePrefix(&out, "{\"generation\":")) {
      EXPECT_TRUE(absl::SimpleAtoi(out.substr(0, out.find('}')), &ack.generation))
          << ctl.stdout_text();
    } else {
      ADD_FAILURE() << "pvemuctl printed no generation: " << ctl.stdout_text();
    }
    return ack;
  }

  // Reads the VM's console until a line reads `value` (from line `from` on),
  // or `limit` passes. Its index, or nullopt.
  std::optional<size_t> WaitForValue(uint64_t value, size_t from, steady_clock::duration limit) {
    auto deadline = steady_clock::now() + limit;
    for (size_t i = from;; ) {
      for (; i < vm_->lines().size(); ++i) {
        if (ValueRead(vm_->lines()[i].text) == value) return i;
      }
      if (steady_clock::now() > deadline || !vm_->Pump(milliseconds(1))) return std::nullopt;
    }
  }

  std::string Console() const {
    std::string text;
    for (const TimedLine& line : vm_->lines()) absl::StrAppend(&text, line.text, "\n");
    return absl::StrCat(text, "--- stderr ---\n", vm_->stderr_text());
  }

  std::string dir_;
  std::unique_ptr<Pvemud> daemon_;
  std::unique_ptr<ChildProcess> vm_;
  static inline int counter_ = 0;
};

TEST_F(KvmLiveTest, AnAcknowledgedEditReachesTheGuestWithin100ms) {
  ASSERT_NO_FATAL_FAILURE(StartVm());
  std::optional<size_t> first = WaitForValue(kFirstValue, 0, seconds(120));
  ASSERT_TRUE(first.has_value()) << "the guest never read the first value\n" << Console();

  constexpr int kEdits = 10;
  std::vector<milliseconds> latencies;
  // From pvemuctl's start instead: an upper bound that includes pvemuctl's
  // own start-up, printed to show where the time goes.
  std::vector<milliseconds> from_start;
  uint64_t last_generation = 0;
  size_t from = *first;
  for (int edit = 1; edit <= kEdits; ++edit) {
    uint64_t value = kFirstValue + edit;
    Ack ack = SetConst(kValueMsr, value);
    ASSERT_GT(ack.generation, last_generation);
    last_generation = ack.generation;
    std::optional<size_t> seen = WaitForValue(value, from, seconds(30));
    ASSERT_TRUE(seen.has_value()) << "edit " << edit << " (generation " << ack.generation
                                  << ") never reached the guest\n" << Console();
    // The guest may read the new value before pvemuctl prints the ack.
    auto latency = std::max(steady_clock::duration::zero(), vm_->lines()[*seen].at - ack.at);
    latencies.push_back(std::chrono::duration_cast<milliseconds>(latency));
    from_start.push_back(
        std::chrono::duration_cast<milliseconds>(vm_->lines()[*seen].at - ack.started));
    from = *seen;
  }

  SetConst(kStopMsr, 1);
  int status = vm_->Finish(seconds(120));
  EXPECT_EQ(status, 0) << Console();
  EXPECT_EQ(vm_->lines().size() >= 2 ? vm_->lines()[vm_->lines().size() - 2].text : "",
            "cpu0: done: stop flag")
      << "the guest's last console line, then the JSON summary\n" << Console();

  // p99 of the edit-to-guest latency; with 10 edits, the largest.
  std::sort(latencies.begin(), latencies.end());
  std::string all;
  for (milliseconds l : latencies) absl::StrAppend(&all, l.count(), " ");
  std::string all_from_start;
  for (milliseconds l : from_start) absl::StrAppend(&all_from_start, l.count(), " ");
  // 0: the guest read the new value before pvemuctl's answer arrived.
  std::printf("edit-to-guest latencies after the ack (ms): %s\n", all.c_str());
  std::printf("the same from pvemuctl's start (ms): %s\n", all_from_start.c_str());
  EXPECT_LE(latencies.back(), EditLatencyBound()) << "latencies (ms): " << all;

  // Every read returned a value of some generation, and never an older one
  // after a newer one: an edit swaps the policy in whole.
  uint64_t newest = kFirstValue;
  for (const TimedLine& line : vm_->lines()) {
    std::optional<uint64_t> value = ValueRead(line.text);
    if (!value.has_value()) continue;
    EXPECT_GE(*value, kFirstValue) << line.text;
    EXPECT_LE(*value, kFirstValue + kEdits) << line.text;
    EXPECT_GE(*value, newest) << "an older generation's value after a newer one: " << line.text;
    newest = std::max(newest, *value);
  }
}

TEST_F(KvmLiveTest, AfterPvemudIsKilledTheGuestFinishesOnTheLastPolicy) {
  // The guest stops by itself after 600 reads of a changed value: once the
  // edit below reached it, it needs no daemon to finish.
  constexpr uint64_t kReadsAfterTheEdit = 600;
  SetConst(kLimitMsr, kReadsAfterTheEdit);
  ASSERT_NO_FATAL_FAILURE(StartVm());
  std::optional<size_t> first = WaitForValue(kFirstValue, 0, seconds(120));
  ASSERT_TRUE(first.has_value()) << "the guest never read the first value\n" << Console();

  constexpr uint64_t kLastValue = 0xb0;
  SetConst(kValueMsr, kLastValue);
  std::optional<size_t> seen = WaitForValue(kLastValue, *first, seconds(30));
  ASSERT_TRUE(seen.has_value()) << "the edit never reached the guest\n" << Console();
  daemon_->Kill();
  auto killed_at = steady_clock::now();

  int status = vm_->Finish(seconds(300));
  EXPECT_EQ(status, 0) << Console();
  // No exit waits for the daemon: 600 reads take seconds even under
  // software emulation.
  EXPECT_LT(steady_clock::now() - killed_at, seconds(60)) << Console();
  ASSERT_FALSE(vm_->lines().empty()) << Console();
  EXPECT_EQ(vm_->lines()[0].text,
            absl::StrFormat("cpu0: rdmsr 0x%x = 0x%016x", kLimitMsr, kReadsAfterTheEdit))
      << "the VM's first policy is the daemon's current one, edits included\n" << Console();
  std::vector<std::string> reads_after_edit;
  size_t arrived_after_kill = 0;
  for (size_t i = *seen; i < vm_->lines().size(); ++i) {
    const TimedLine& line = vm_->lines()[i];
    std::optional<uint64_t> value = ValueRead(line.text);
    if (!value.has_value()) continue;
    // Nothing reverts: the last policy stays in force without its daemon.
    EXPECT_EQ(*value, kLastValue) << line.text;
    reads_after_edit.push_back(line.text);
    if (line.at > killed_at) ++arrived_after_kill;
  }
  EXPECT_EQ(reads_after_edit.size(), kReadsAfterTheEdit) << Console();
  EXPECT_EQ(vm_->lines().size() >= 2 ? vm_->lines()[vm_->lines().size() - 2].text : "",
            "cpu0: done: read limit")
      << Console();
  // Reads went on with pvemud dead. Natively nearly all of them arrive after
  // the kill; under software emulation this test may be starved while the
  // guest runs, and finds many lines already waiting in the pipe (they count
  // as before the kill), so only "some" is a bound that holds everywhere.
  EXPECT_GT(arrived_after_kill, 0u)
      << "no read after the kill: nothing shows the VM ran on without pvemud\n" << Console();
  std::printf("%zu of %llu reads arrived after pvemud was killed\n", arrived_after_kill,
              static_cast<unsigned long long>(kReadsAfterTheEdit));
}

}  // namespace
}  // namespace pvemu::testing
