// What the kvm suite's tests share: where the runner, the guests and the
// test policies are, whether this machine can run KVM guests, and a child
// process whose stdout lines are timed as they arrive (the live-edit tests
// time the guest's console).
#ifndef PVEMU_TESTS_KVM_KVM_TEST_UTIL_H_
#define PVEMU_TESTS_KVM_KVM_TEST_UTIL_H_

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/capability.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace pvemu::testing {

inline std::string EnvPath(const char* name) {
  const char* value = std::getenv(name);
  // meson's test_env sets both; a bare run of the binary needs them too.
  if (value == nullptr) {
    ADD_FAILURE() << name << " is not set: run through `meson test --suite kvm`, or set "
                  << "PVEMU_BUILD_ROOT and PVEMU_SOURCE_ROOT";
    return "/nonexistent";
  }
  return value;
}
inline std::string BuildRoot() { return EnvPath("PVEMU_BUILD_ROOT"); }
inline std::string SourceRoot() { return EnvPath("PVEMU_SOURCE_ROOT"); }

inline std::string PvemuVmPath() { return BuildRoot() + "/kvm/vm/pvemu-vm"; }
inline std::string PvemudPath() { return BuildRoot() + "/server/pvemud"; }
inline std::string PvemuctlPath() { return BuildRoot() + "/client/pvemuctl"; }
inline std::string GuestPath(const std::string& name) {
  return BuildRoot() + "/tests/kvm/guests/" + name + ".bin";
}
inline std::string TestPolicyPath(const std::string& name) {
  return SourceRoot() + "/tests/kvm/policies/" + name + ".textproto";
}
// The sim host's default profile: PASSTHROUGH reads and host CPUID leaves
// come from it (pvemu-vm --host=sim without --host-profile).
inline std::string DefaultSimProfilePath() {
  return SourceRoot() + "/hosts/profiles/intel-xeon-e-2136.textproto";
}

// ---------------------------------------------------------------------------
// KVM on this machine.

struct KvmAvailability {
  bool present = false;  // /dev/kvm exists
  bool usable = false;   // and opens, with the API version we were built for
  std::string why;       // when not usable
};

inline const KvmAvailability& Kvm() {
  static const KvmAvailability kvm = [] {
    KvmAvailability k;
    if (access("/dev/kvm", F_OK) != 0) {
      k.why =
          "no /dev/kvm on this machine, so no KVM guest can run here; `meson test --suite "
          "kvm` runs this suite inside a QEMU guest with nested KVM "
          "(tests/kvm/run-in-kvm-vm.sh) where it can";
      return k;
    }
    k.present = true;
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      k.why = absl::StrCat("/dev/kvm exists but does not open: ", std::strerror(errno));
      return k;
    }
    int version = ioctl(fd, KVM_GET_API_VERSION, 0);
    close(fd);
    if (version != KVM_API_VERSION) {
      k.why = absl::StrCat("/dev/kvm has API version ", version, ", not ", KVM_API_VERSION);
      return k;
    }
    k.usable = true;
    return k;
  }();
  return kvm;
}

// Skips (saying why) where /dev/kvm is missing; fails where it exists but
// does not work, because a machine with /dev/kvm must run the suite, not
// skip it. For a test body or SetUp.
#define PVEMU_REQUIRE_KVM()                                                           \
  do {                                                                                \
    const ::pvemu::testing::KvmAvailability& kvm_here = ::pvemu::testing::Kvm();      \
    if (!kvm_here.present) GTEST_SKIP() << kvm_here.why;                              \
    ASSERT_TRUE(kvm_here.usable) << kvm_here.why                                      \
                                 << " (a machine with /dev/kvm must run the kvm "     \
                                    "suite, not skip it)";                            \
  } while (0)

// KVM_CAP_NR_VCPUS: the most vCPUs pvemu-vm accepts here (0 without KVM).
inline int KvmRecommendedVcpus() {
  int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return 0;
  int n = ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_NR_VCPUS);
  close(fd);
  return n < 0 ? 0 : n;
}

// ---------------------------------------------------------------------------
// Child processes.

// How a child sees /dev/kvm. Both changes need root: the child gets its own
// mount namespace with a fresh /dev.
enum class DevKvm {
  kAsIs,
  kMissing,       // /dev holds only null, zero, random and urandom
  kNoPermission,  // /dev/kvm is there, mode 0000, and the child cannot override that
};

struct TimedLine {
  std::chrono::steady_clock::time_point at;  // when the line's last byte was read
  std::string text;                          // without the newline
};

// A child process with its stdout and stderr on pipes. Stdout is split into
// lines, each stamped with the time it arrived. Not thread-safe.
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  // Starts argv[0] with argv. False (with the reason in stderr()) if the
  // child could not be set up; exec failures show as exit status 127.
  bool Start(const std::vector<std::string>& argv, DevKvm dev_kvm = DevKvm::kAsIs) {
    command_ = absl::StrJoin(argv, " ");
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      err_ = absl::StrCat("pipe: ", std::strerror(errno));
      return false;
    }
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) {
      err_ = absl::StrCat("fork: ", std::strerror(errno));
      return false;
    }
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      if (dev_kvm != DevKvm::kAsIs) ChangeDevKvmOrExit(dev_kvm);
      execv(args[0], args.data());
      std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    start_ = std::chrono::steady_clock::now();
    return true;
  }

  // Reads whatever arrives within `timeout`. False once both pipes are at
  // end of file (the child closed them or exited).
  bool Pump(std::chrono::milliseconds timeout) {
    pollfd fds[2];
    int n = 0;
    if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
    if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
    if (n == 0) return false;
    if (poll(fds, n, static_cast<int>(timeout.count())) <= 0) return true;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      auto now = std::chrono::steady_clock::now();
      bool is_out = fds[i].fd == out_fd_;
      if (got <= 0) {
        close(fds[i].fd);
        (is_out ? out_fd_ : err_fd_) = -1;
        continue;
      }
      if (!is_out) {
        err_.append(buf, got);
        continue;
      }
      out_.append(buf, got);
      partial_.append(buf, got);
      size_t newline;
      while ((newline = partial_.find('\n')) != std::string::npos) {
        lines_.push_back({now, partial_.substr(0, newline)});
        partial_.erase(0, newline + 1);
      }
    }
    return out_fd_ >= 0 || err_fd_ >= 0;
  }

  // Reads until the child closes its output, then reaps it. A child still
  // running at `limit` after Start is killed (timed_out() says so).
  int Finish(std::chrono::seconds limit) {
    auto deadline = start_ + limit;
    while (Pump(std::chrono::milliseconds(100))) {
      if (std::chrono::steady_clock::now() > deadline && pid_ > 0) {
        timed_out_ = true;
        kill(pid_, SIGKILL);
      }
    }
    return Wait();
  }

  // Reaps the child: its exit status, or 128 + the signal that ended it.
  int Wait() {
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      elapsed_ = std::chrono::steady_clock::now() - start_;
    }
    return status_;
  }

  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }

  pid_t pid() const { return pid_; }
  const std::string& stdout_text() const { return out_; }
  const std::string& stderr_text() const { return err_; }
  const std::vector<TimedLine>& lines() const { return lines_; }
  bool timed_out() const { return timed_out_; }
  std::chrono::steady_clock::duration elapsed() const { return elapsed_; }
  const std::string& command() const { return command_; }

 private:
  // In the child, before exec: its own mount namespace with a new /dev.
  // Only async-signal-safe calls; any failure is reported and ends the child
  // with status 125.
  static void ChangeDevKvmOrExit(DevKvm dev_kvm) {
    auto fail = [](const char* what) {
      std::fprintf(stderr, "kvm test: cannot change /dev/kvm for this child: %s: %s\n", what,
                   std::strerror(errno));
      _exit(125);
    };
    if (unshare(CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWNS)");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("mount --make-rprivate /");
    if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=0755") != 0) fail("mount tmpfs /dev");
    struct Node {
      const char* path;
      unsigned major, minor;
    };
    // What a process may expect to find in /dev besides /dev/kvm.
    for (Node node : {Node{"/dev/null", 1, 3}, Node{"/dev/zero", 1, 5}, Node{"/dev/random", 1, 8},
                      Node{"/dev/urandom", 1, 9}}) {
      if (mknod(node.path, S_IFCHR | 0666, makedev(node.major, node.minor)) != 0 ||
          chmod(node.path, 0666) != 0) {
        fail(node.path);
      }
    }
    if (dev_kvm == DevKvm::kNoPermission) {
      if (mknod("/dev/kvm", S_IFCHR | 0000, makedev(10, 232)) != 0) fail("mknod /dev/kvm");
      if (chmod("/dev/kvm", 0000) != 0) fail("chmod /dev/kvm");
      // Root would open it anyway: take the capabilities that override file
      // modes out of the bounding set, so the exec'd runner cannot regain them.
      for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) fail("prctl(PR_CAPBSET_DROP)");
      }
    }
  }

  std::string command_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_, err_, partial_;
  std::vector<TimedLine> lines_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::duration elapsed_{};
  int status_ = -1;
  bool timed_out_ = false;
};

// ---------------------------------------------------------------------------
// A finished pvemu-vm run.

struct VmRun {
  std::string command;
  int status = -1;                  // the runner's exit status
  bool timed_out = false;           // killed by the test, not ended by the runner
  std::chrono::steady_clock::duration elapsed{};
  std::string console;              // stdout less the JSON summary line
  std::vector<std::string> lines;   // the console, line by line
  std::string stderr_text;
  std::string summary_line;         // with -o json: stdout's last line
  google::protobuf::Struct summary;
  bool summary_parsed = false;

  // For failure messages: everything a reader needs to see what happened.
  std::string Describe() const {
    return absl::StrCat("\n$ ", command, "\nexit status ", status, timed_out ? " (killed by the test)" : "",
                        "\n--- console ---\n", console, "--- summary ---\n", summary_line,
                        "\n--- stderr ---\n", stderr_text);
  }

  // A number in the summary at `path` ({"exits", "rdmsr"}); nullopt if
  // missing or not a number.
  std::optional<double> Number(std::initializer_list<const char*> path) const {
    const google::protobuf::Struct* object = &summary;
    const google::protobuf::Value* value = nullptr;
    for (const char* key : path) {
      if (object == nullptr) return std::nullopt;
      auto it = object->fields().find(key);
      if (it == object->fields().end()) return std::nullopt;
      value = &it->second;
      object = value->has_struct_value() ? &value->struct_value() : nullptr;
    }
    if (value == nullptr || !value->has_number_value()) return std::nullopt;
    return value->number_value();
  }
};

// Splits a runner's stdout into the console and, when `json`, the summary:
// one JSON object on stdout's last line.
inline void SplitConsoleAndSummary(std::string out, bool json, VmRun* run) {
  if (json) {
    std::string body = out;
    if (!body.empty() && body.back() == '\n') body.pop_back();
    size_t start = body.rfind('\n');
    start = start == std::string::npos ? 0 : start + 1;
    if (start < body.size() && body[start] == '{') {
      run->summary_line = body.substr(start);
      out.resize(start);
      run->summary_parsed =
          google::protobuf::util::JsonStringToMessage(run->summary_line, &run->summary).ok();
    }
  }
  run->console = out;
  run->lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
}

// Runs a command to its end (killing it after `limit`) and splits its stdout
// into the console and, when `json`, the summary on the last line.
inline VmRun RunVmCommand(const std::vector<std::string>& argv, bool json,
                          DevKvm dev_kvm = DevKvm::kAsIs,
                          std::chrono::seconds limit = std::chrono::seconds(180)) {
  VmRun run;
  run.command = absl::StrJoin(argv, " ");
  ChildProcess child;
  if (!child.Start(argv, dev_kvm)) {
    run.stderr_text = child.stderr_text();
    return run;
  }
  run.status = child.Finish(limit);
  run.timed_out = child.timed_out();
  run.elapsed = child.elapsed();
  run.stderr_text = child.stderr_text();
  SplitConsoleAndSummary(child.stdout_text(), json, &run);
  return run;
}

// The summary's keys (docs/CLI.md, pvemu-vm's "Statistics").
inline constexpr const char* kExits = "exits";
inline constexpr const char* kOutcomes = "outcomes";
inline constexpr const char* kCompleted = "completed";
inline constexpr const char* kException = "exception";
inline constexpr const char* kDevice = "device";

// pvemu-vm as domain `domain` on a guest with a test policy, printing the
// JSON summary.
inline std::vector<std::string> VmArgs(const std::string& guest, const std::string& policy,
                                       std::vector<std::string> extra = {}, int domain = 1,
                                       int timeout_seconds = 120) {
  std::vector<std::string> argv = {PvemuVmPath(), absl::StrCat("--domain=", domain),
                                   "--policy=" + TestPolicyPath(policy),
                                   absl::StrCat("--timeout=", timeout_seconds), "-o", "json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(GuestPath(guest));
  return argv;
}

// Several tests check one run of a guest: it runs once per binary.
inline const VmRun& CachedRun(const std::vector<std::string>& argv) {
  static auto* runs = new std::map<std::vector<std::string>, VmRun>;
  auto it = runs->find(argv);
  if (it == runs->end()) it = runs->emplace(argv, RunVmCommand(argv, /*json=*/true)).first;
  return it->second;
}

// A run that ended by itself with status 0 and printed its summary.
#define ASSERT_CLEAN_RUN(run)                                                    \
  do {                                                                           \
    ASSERT_EQ((run).status, 0) << (run).Describe();                              \
    ASSERT_TRUE((run).summary_parsed) << "no JSON summary" << (run).Describe();  \
  } while (0)

// The summary's number at group.key (a failure, and ~0, if it has none).
inline uint64_t Count(const VmRun& run, const char* group, const char* key) {
  std::optional<double> n = run.Number({group, key});
  if (!n.has_value()) {
    ADD_FAILURE() << "the summary has no number at " << group << "." << key << run.Describe();
    return ~uint64_t{0};
  }
  return static_cast<uint64_t>(*n);
}

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_KVM_KVM_TEST_UTIL_H_
