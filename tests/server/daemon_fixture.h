// A real pvemud (server/daemon.h) in process, serving on a Unix socket in a
// fresh temporary directory, with stubs for every service.
#ifndef PVEMU_TESTS_SERVER_DAEMON_FIXTURE_H_
#define PVEMU_TESTS_SERVER_DAEMON_FIXTURE_H_

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/daemon.h"

namespace pvemu::testing {

// The directories MakeTempDir made, removed when the test process exits
// (most callers keep theirs for the whole test). Only by the process that
// made them: a forked child that calls exit() leaves them to its parent.
struct TempDirsMade {
  pid_t owner = getpid();
  std::mutex mu;  // tests may make directories from several threads
  std::vector<std::string> paths;
  static TempDirsMade& Get() {
    static TempDirsMade* made = [] {
      auto* m = new TempDirsMade;
      std::atexit([] {
        TempDirsMade& self = Get();
        if (getpid() != self.owner) return;
        std::lock_guard<std::mutex> lock(self.mu);
        for (const std::string& path : self.paths) {
          std::error_code ignored;
          std::filesystem::remove_all(path, ignored);
        }
      });
      return m;
    }();
    return *made;
  }
};

inline std::string MakeTempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "pvemu-test.XXXXXX").string();
  char* dir = mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr);
  if (dir != nullptr) {
    TempDirsMade& made = TempDirsMade::Get();
    std::lock_guard<std::mutex> lock(made.mu);
    made.paths.push_back(tmpl);
  }
  return tmpl;
}

struct CommandRun {
  int status;          // the exit status; -1 if killed by a signal
  std::string output;  // stdout and stderr
};

// Runs a shell command line (sh -c) and collects what it prints.
inline CommandRun RunCommand(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Runs pvemuctl as another user against the daemon and returns its exit
// status and stderr.
inline std::pair<int, std::string> RunAs(uid_t uid, const std::vector<std::string>& args) {
  // The build tree may sit below a directory other users cannot enter, so
  // the other user runs a copy from a world-readable temp dir.
  const std::string bin_dir = MakeTempDir();
  chmod(bin_dir.c_str(), 0755);
  std::string pvemuctl = bin_dir + "/pvemuctl";
  std::filesystem::copy_file(std::string(std::getenv("PVEMU_BUILD_ROOT")) + "/client/pvemuctl",
                             pvemuctl);
  chmod(pvemuctl.c_str(), 0755);
  std::string err_path = MakeTempDir() + "/stderr";
  pid_t pid = fork();
  if (pid == 0) {
    if (std::freopen(err_path.c_str(), "w", stderr) == nullptr ||
        std::freopen("/dev/null", "w", stdout) == nullptr) {
      _exit(97);
    }
    if (setgid(uid) != 0 || setuid(uid) != 0) _exit(99);
    std::vector<char*> argv;
    argv.push_back(pvemuctl.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(pvemuctl.c_str(), argv.data());
    _exit(98);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(err_path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::filesystem::remove_all(std::filesystem::path(err_path).parent_path());
  std::filesystem::remove_all(bin_dir);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
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
  // Starts a daemon with options_ that is expected to fail: its error (OK
  // if it started, which it then stops).
  absl::Status StartError() {
    std::vector<std::string> warnings;
    auto daemon = server::Daemon::Start(options_, &warnings);
    if (!daemon.ok()) return daemon.status();
    (*daemon)->Shutdown();
    return absl::OkStatus();
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
