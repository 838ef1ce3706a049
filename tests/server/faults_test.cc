// Faults around a live daemon: a full or read-only state directory, damaged
// state files at start. Each edit fails with a clear status, the previous
// policy stays in force and on disk, and traps keep being served.
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/textproto.h"
#include "server/fault_logging_host.h"
#include "hosts/sim_host.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;

class FaultsTest : public DaemonTest {
 protected:
  void TearDown() override {
    StopDaemon();
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
    DaemonTest::TearDown();
  }

  // A small tmpfs as the state directory; false if this machine cannot mount.
  bool MountSmallStateDir() {
    mount_point_ = dir_ + "/small";
    std::filesystem::create_directories(mount_point_);
    if (mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, "size=256k") != 0) return false;
    mounted_ = true;
    options_.state_dir = mount_point_ + "/state";
    return true;
  }

  grpc::Status SetRule(uint32_t domain, const std::string& msr, v1::EditResponse* edit) {
    v1::SetRuleRequest request;
    request.mutable_layer()->set_domain(domain);
    request.mutable_rule()->set_msr(msr);
    request.mutable_rule()->set_read(v1::ReadAction::ZERO);
    grpc::ClientContext context;
    return policy_->SetRule(&context, request, edit);
  }

  uint64_t Generation() {
    grpc::ClientContext context;
    v1::GetPolicyResponse response;
    EXPECT_TRUE(policy_->GetPolicy(&context, v1::GetPolicyRequest(), &response).ok());
    return response.generation();
  }

  bool TrapsStillServed() {
    v1::Trap trap;
    trap.set_insn(std::string("\x0f\x32", 2));
    trap.mutable_regs()->set_rcx(0x1b0);
    grpc::ClientContext context;
    v1::Outcome outcome;
    return emulator_->Emulate(&context, trap, &outcome).ok() &&
           outcome.kind() == v1::Outcome::COMPLETED;
  }

  std::string mount_point_;
  bool mounted_ = false;
};

TEST_F(FaultsTest, FullStateDirRefusesTheEditAndKeepsThePolicy) {
  if (!MountSmallStateDir()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  StartDaemon();
  v1::EditResponse edit;
  ASSERT_TRUE(SetRule(1, "0x10", &edit).ok());
  const uint64_t before = Generation();
  {
    // Fill the file system.
    std::ofstream filler(mount_point_ + "/filler", std::ios::binary);
    std::string block(4096, 'x');
    while (filler.write(block.data(), block.size())) {
    }
  }
  grpc::Status status = SetRule(2, "0x11", &edit);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr(options_.state_dir));
  EXPECT_EQ(Generation(), before);
  EXPECT_TRUE(TrapsStillServed());

  // Space again: edits work, and what is on disk loads.
  std::filesystem::remove(mount_point_ + "/filler");
  ASSERT_TRUE(SetRule(2, "0x11", &edit).ok());
  EXPECT_EQ(edit.generation(), before + 1);
  StopDaemon();
  StartDaemon();
  EXPECT_EQ(Generation(), before + 1);
}

TEST_F(FaultsTest, ReadOnlyStateDirRefusesTheEditAndKeepsServing) {
  if (!MountSmallStateDir()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  StartDaemon();
  v1::EditResponse edit;
  ASSERT_TRUE(SetRule(1, "0x10", &edit).ok());
  ASSERT_EQ(mount("tmpfs", mount_point_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=256k"), 0);
  grpc::Status status = SetRule(2, "0x11", &edit);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("Read-only file system"));
  EXPECT_EQ(Generation(), 2u);
  EXPECT_TRUE(TrapsStillServed());
}

TEST_F(FaultsTest, DamagedStateFileIsReportedByNameAndTheLastGoodPolicyKept) {
  StartDaemon();
  v1::EditResponse edit;
  ASSERT_TRUE(SetRule(1, "0x10", &edit).ok());
  ASSERT_TRUE(SetRule(1, "0x11", &edit).ok());
  StopDaemon();
  const std::string state_file = options_.state_dir + "/policy.textproto";
  for (const char* damage : {"truncate", "garbage", "schema"}) {
    SCOPED_TRACE(damage);
    std::string good;
    {
      std::ifstream in(state_file);
      good.assign(std::istreambuf_iterator<char>(in), {});
    }
    {
      std::ofstream out(state_file, std::ios::trunc);
      if (std::string(damage) == "truncate") out << good.substr(0, good.size() / 2);
      if (std::string(damage) == "garbage") out << "\x01\x02 not a policy {{{";
      if (std::string(damage) == "schema") out << "trap { domain: 1 }\n";
    }
    StartDaemon();
    ASSERT_FALSE(warnings_.empty());
    EXPECT_THAT(warnings_[0], HasSubstr("policy.textproto"));
    // The daemon serves the last good policy it has on disk.
    EXPECT_GE(Generation(), 2u);
    EXPECT_TRUE(TrapsStillServed());
    // ...and a new edit is durable again.
    ASSERT_TRUE(SetRule(1, "0x12", &edit).ok());
    StopDaemon();
  }
}

TEST_F(FaultsTest, HostMsrFaultGivesTheGuestGpAndIsLoggedOnce) {
  // An Intel profile whose ENERGY_PERF_BIAS faults on the host (a firmware
  // lock, a missing msr driver): the default policy passes reads through.
  const std::string profile = dir_ + "/faulty.textproto";
  {
    std::ofstream out(profile);
    out << "name: \"faulty Intel\" vendor: INTEL family: 6 model: 0x9e cpus: 2 tsc_khz: 3000000\n"
           "msr { msr: \"IA32_ENERGY_PERF_BIAS\" faults: true }\n";
  }
  options_.host_profile = profile;
  StartDaemon();
  for (int i = 0; i < 3; ++i) {
    v1::Trap trap;
    trap.set_insn(std::string("\x0f\x32", 2));
    trap.mutable_regs()->set_rcx(0x1b0);
    grpc::ClientContext context;
    v1::Outcome outcome;
    ASSERT_TRUE(emulator_->Emulate(&context, trap, &outcome).ok());
    EXPECT_EQ(outcome.kind(), v1::Outcome::EXCEPTION);
    EXPECT_EQ(outcome.exception().vector(), v1::GP);
  }
}

TEST(FaultLoggingHostTest, LogsTheFirstFaultOfEachMsrOnly) {
  v1::HostProfile profile;
  ASSERT_TRUE(ParseTextProto("name: \"p\" vendor: AMD cpus: 1 "
                             "msr { msr: \"0x10\" value: 5 }",
                             "p", &profile)
                  .ok());
  char* text = nullptr;
  size_t size = 0;
  std::FILE* log = open_memstream(&text, &size);
  {
    server::FaultLoggingHost host(std::move(hosts::SimHost::Create(profile, "p")).value(), log);
    uint64_t value = 0;
    EXPECT_TRUE(host.ReadMsr(0, 0x10, &value));
    EXPECT_EQ(value, 5u);
    EXPECT_FALSE(host.ReadMsr(0, 0x1b0, &value));
    EXPECT_FALSE(host.ReadMsr(1, 0x1b0, &value));
    EXPECT_FALSE(host.WriteMsr(0, 0x1b0, 1));
    EXPECT_EQ(host.reported(), 2u);  // read 0x1b0, write 0x1b0
  }
  std::fclose(log);
  std::string logged(text, size);
  free(text);
  EXPECT_THAT(logged, HasSubstr("host read of MSR 0x1b0 faulted"));
  EXPECT_THAT(logged, HasSubstr("host write of MSR 0x1b0 faulted"));
  EXPECT_EQ(std::count(logged.begin(), logged.end(), '\n'), 2);
}

}  // namespace
}  // namespace pvemu::testing
