// Tests of permission errors that mean the same when the suite runs as root:
// root's CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER let it open a
// mode-0 file and write into a read-only directory, so such a test runs its
// check in a forked child that has dropped those capabilities first. The
// test process keeps its own (they would not come back).
#ifndef PVEMU_TESTS_WITHOUT_FILE_MODE_OVERRIDES_H_
#define PVEMU_TESTS_WITHOUT_FILE_MODE_OVERRIDES_H_

#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace pvemu::testing {

// This process's capabilities without the three that override file modes
// (effective and permitted). False if the kernel refuses.
inline bool DropFileModeOverrides() {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
    data[cap / 32].effective &= ~(1u << (cap % 32));
    data[cap / 32].permitted &= ~(1u << (cap % 32));
  }
  return syscall(SYS_capset, &header, data) == 0;
}

// Runs `check` in a forked child without the overrides and returns what it
// returned (a std::string: the answer to look at), or what went wrong
// running it, prefixed "child: ". `check` must not use gtest assertions
// (the child's do not reach the test) nor need a thread the test process
// started before the fork.
template <typename Check>
std::string InChildWithoutFileModeOverrides(Check check) {
  int fds[2];
  if (pipe(fds) != 0) return absl::StrCat("child: pipe: ", std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) return absl::StrCat("child: fork: ", std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    const std::string answer =
        DropFileModeOverrides() ? check() : "child: capset refused dropping the overrides";
    size_t done = 0;
    while (done < answer.size()) {
      const ssize_t n = write(fds[1], answer.data() + done, answer.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) answer.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::StrCat("child: did not exit cleanly (status ", status, "); it said: ", answer);
  }
  return answer;
}

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_WITHOUT_FILE_MODE_OVERRIDES_H_
