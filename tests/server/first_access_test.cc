// With counting on, pvemud logs the first access of each
// (domain, MSR, access) a GP rule or the unknown-MSR mode decided, once,
// with the action, the rule and the guest RIP; repeats are only counted.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;

class FirstAccessTest : public DaemonTest {
 protected:
  // The process's stderr (the in-process daemon's) goes to a file.
  void SetUp() override {
    DaemonTest::SetUp();
    err_path_ = dir_ + "/stderr";
    std::fflush(stderr);
    saved_stderr_ = dup(STDERR_FILENO);
    int fd = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  void TearDown() override {
    RestoreStderr();
    DaemonTest::TearDown();
  }
  void RestoreStderr() {
    if (saved_stderr_ < 0) return;
    std::fflush(stderr);
    dup2(saved_stderr_, STDERR_FILENO);
    close(saved_stderr_);
    saved_stderr_ = -1;
  }
  // The lines of the captured stderr that start with "pvemud: first".
  std::vector<std::string> FirstLines() {
    std::fflush(stderr);
    std::ifstream in(err_path_);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(line, "pvemud: first")) out.emplace_back(line);
    }
    return out;
  }
  void Rdmsr(uint32_t domain, uint32_t msr) {
    grpc::ClientContext context;
    v1::Outcome outcome;
    ASSERT_TRUE(emulator_->Emulate(&context, RdmsrTrap(domain, msr), &outcome).ok());
  }
  std::string err_path_;
  int saved_stderr_ = -1;
};

TEST_F(FirstAccessTest, GpRuleAndUnknownMsrAreLoggedOnceEach) {
  options_.count_msrs = true;
  StartDaemon();
  // Domain 41: a GP rule on IA32_ENERGY_PERF_BIAS.
  v1::SetRuleRequest request;
  request.mutable_layer()->set_domain(41);
  request.mutable_rule()->set_msr("0x1b0");
  request.mutable_rule()->set_read(v1::ReadAction::GP);
  grpc::ClientContext context;
  v1::EditResponse edit;
  ASSERT_TRUE(policy_->SetRule(&context, request, &edit).ok());

  const uint32_t kUnknown = 0x4fff0123;  // no rule and no catalog entry
  for (int i = 0; i < 2; ++i) {
    Rdmsr(41, 0x1b0);
    Rdmsr(41, kUnknown);
    Rdmsr(41, 0x10);  // IA32_TIME_STAMP_COUNTER: not GP, never logged
  }
  std::vector<std::string> lines = FirstLines();
  RestoreStderr();
  ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], HasSubstr("first read of MSR 0x1b0 (IA32_ENERGY_PERF_BIAS) by domain 41: "
                                  "GP by " + options_.state_dir + "/policy.textproto:"));
  EXPECT_THAT(lines[0], HasSubstr(" (domain) at rip 0x1000; repeats are only counted"));
  EXPECT_THAT(lines[1], HasSubstr("first read of MSR 0x4fff0123 by domain 41: UNKNOWN_"));
  EXPECT_THAT(lines[1], HasSubstr("by unknown_msr at rip 0x1000"));
}

TEST_F(FirstAccessTest, NothingIsLoggedWithoutCounting) {
  StartDaemon();
  Rdmsr(42, 0x4fff0124);
  EXPECT_TRUE(FirstLines().empty());
}

}  // namespace
}  // namespace pvemu::testing
