// Starting /usr/bin/etcd for tests and benchmarks: a free loopback port and
// a quiet child process. No GoogleTest here, so the benchmarks can use it.
#ifndef PVEMU_TESTS_FLEET_ETCD_PROCESS_H_
#define PVEMU_TESTS_FLEET_ETCD_PROCESS_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace pvemu::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Runs args[0] with `args` as a child whose stdout is discarded and whose
// stderr is appended to `stderr_path` (etcd's own log goes where its
// --log-outputs says). Returns the child's pid, or -1 if fork failed.
inline pid_t SpawnQuiet(std::vector<std::string> args, const std::string& stderr_path) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen(stderr_path.c_str(), "a", stderr);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_FLEET_ETCD_PROCESS_H_
