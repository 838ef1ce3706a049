// A real pvemud (server/daemon.h) in process, serving on a Unix socket in a
// fresh temporary directory, with stubs for every service.
#ifndef PVEMU_TESTS_SERVER_DAEMON_FIXTURE_H_
#define PVEMU_TESTS_SERVER_DAEMON_FIXTURE_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/daemon.h"

namespace pvemu::testing {

inline std::string MakeTempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "pvemu-test.XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  return tmpl;
}

// An RDMSR of `msr` by `domain`'s vCPU 0 in 64-bit mode.
inline v1::Trap RdmsrTrap(uint32_t domain, uint32_t msr) {
  v1::Trap trap;
  trap.set_domain(domain);
  trap.set_mode(v1::MODE_64);
  trap.set_insn(std::string("\x0f\x32", 2));
  trap.mutable_regs()->set_rcx(msr);
  trap.mutable_regs()->set_rip(0x1000);
  return trap;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    options_.listen = "unix://" + dir_ + "/pvemu.sock";
    options_.state_dir = dir_ + "/state";
  }
  void TearDown() override {
    StopDaemon();
    std::filesystem::remove_all(dir_);
  }

  // Starts the daemon with options_ (tests adjust them first).
  void StartDaemon() {
    std::vector<std::string> warnings;
    auto daemon = server::Daemon::Start(options_, &warnings);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    warnings_ = warnings;
    channel_ = grpc::CreateChannel(options_.listen, grpc::InsecureChannelCredentials());
    policy_ = v1::PolicyService::NewStub(channel_);
    emulator_ = v1::EmulatorService::NewStub(channel_);
    audit_ = v1::AuditService::NewStub(channel_);
  }
  void StopDaemon() {
    policy_.reset();
    emulator_.reset();
    audit_.reset();
    channel_.reset();
    if (daemon_ != nullptr) daemon_->Shutdown();
    daemon_.reset();
  }

  std::string dir_;
  server::DaemonOptions options_;
  std::unique_ptr<server::Daemon> daemon_;
  std::vector<std::string> warnings_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PolicyService::Stub> policy_;
  std::unique_ptr<v1::EmulatorService::Stub> emulator_;
  std::unique_ptr<v1::AuditService::Stub> audit_;
};

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_SERVER_DAEMON_FIXTURE_H_
