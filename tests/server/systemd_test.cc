// pvemud under systemd, with the real binary: socket activation (LISTEN_FDS,
// LISTEN_PID, the socket on fd 3) keeps the SO_PEERCRED roles and refuses a
// socket it cannot serve on; Type=notify sends READY=1 only once the socket
// answers, and STOPPING=1 on SIGTERM.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;

const std::string& Pvemud() {
  static const std::string path = std::string(std::getenv("PVEMU_BUILD_ROOT")) + "/server/pvemud";
  return path;
}

sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
}

// A Unix socket of `type` bound at `path`; listening if `listen_too`.
int BoundSocket(int type, const std::string& path, bool listen_too) {
  int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_un addr = UnixAddress(path);
  EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0) << path;
  if (listen_too) {
    EXPECT_EQ(listen(fd, 16), 0);
  }
  return fd;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Runs the real pvemud with `args`, stderr to `log`. With `listen_fd` >= 0 as
// systemd would: that fd on 3, LISTEN_FDS=1 and LISTEN_PID the child's pid.
// `env` entries ("NAME=value") are added to the child's environment.
pid_t SpawnPvemud(const std::vector<std::string>& args, const std::string& log,
                  int listen_fd = -1, const std::vector<std::string>& env = {}) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  int err = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (err < 0 || dup2(err, 2) < 0) _exit(97);
  if (listen_fd >= 0) {
    if (listen_fd == 3 ? fcntl(3, F_SETFD, 0) != 0 : dup2(listen_fd, 3) != 3) _exit(96);
    setenv("LISTEN_FDS", "1", 1);
    setenv("LISTEN_PID", std::to_string(getpid()).c_str(), 1);
  }
  for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
  std::vector<char*> argv = {const_cast<char*>(Pvemud().c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(98);
}

// Waits for `pid` to exit (bounded): its exit status, or -1.
int WaitExit(pid_t pid, int seconds = 20) {
  for (int i = 0; i < seconds * 20; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

bool WaitForLine(const std::string& log, const std::string& text, int seconds = 20) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (ReadFile(log).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class SystemdTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// pvemud.socket's case: systemd bound and listens; pvemud serves on fd 3
// (its --listen names another place, which stays untouched), readers and
// strangers are told apart by SO_PEERCRED as on a socket pvemud binds, and on
// SIGTERM the socket file stays: it is systemd's.
TEST_F(SystemdTest, ServesOnTheSocketSystemdPasses) {
  const std::string sock = dir_ + "/pvemu.sock";
  const std::string log = dir_ + "/pvemud.log";
  int fd = BoundSocket(SOCK_STREAM, sock, true);
  chmod(sock.c_str(), 0666);  // the roles decide, not the mode
  chmod(dir_.c_str(), 0755);
  pid_t pid = SpawnPvemud({"--listen=unix://" + dir_ + "/unused/other.sock",
                           "--state-dir=" + dir_ + "/state", "--readers=uid:65534"},
                          log, fd);
  close(fd);
  ASSERT_TRUE(WaitForLine(log, "ready on")) << ReadFile(log);
  EXPECT_THAT(ReadFile(log), HasSubstr("ready on unix://" + sock + " (from systemd)"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/unused"));

  const std::string server = "--server=unix://" + sock;
  CommandRun stats = RunCommand(absl::StrCat(std::getenv("PVEMU_BUILD_ROOT"),
                                             "/client/pvemuctl -o json ", server, " stats"));
  EXPECT_EQ(stats.status, 0) << stats.output;
  EXPECT_THAT(stats.output, HasSubstr("\"generation\""));

  if (geteuid() == 0) {
    auto [read_rc, read_err] = RunAs(65534, {server, "policy", "get", "--domain=default"});
    EXPECT_EQ(read_rc, 0) << read_err;
    auto [edit_rc, edit_err] =
        RunAs(65534, {server, "policy", "set-rule", "--domain=3", "--msr=0x1b0", "--read=ZERO"});
    EXPECT_EQ(edit_rc, 1);
    EXPECT_THAT(edit_err, HasSubstr("editing is not allowed for uid=65534"));
    auto [stranger_rc, stranger_err] = RunAs(65533, {server, "policy", "get"});
    EXPECT_EQ(stranger_rc, 1);
    EXPECT_THAT(stranger_err, HasSubstr("reading is not allowed for uid=65533"));
  }

  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0) << ReadFile(log);
  EXPECT_TRUE(std::filesystem::exists(sock)) << "the socket belongs to systemd";
}

// A passed fd pvemud cannot serve on: it exits 1 at once, saying what the fd
// is and what pvemud.socket must pass.
TEST_F(SystemdTest, RefusesAPassedFdThatIsNotAListeningUnixStreamSocket) {
  struct Case {
    std::string name;
    int fd;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({"file", open((dir_ + "/plain").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600),
                   "is not a socket"});
  cases.push_back({"datagram", BoundSocket(SOCK_DGRAM, dir_ + "/dgram.sock", false),
                   "is not a stream socket"});
  cases.push_back({"not listening", BoundSocket(SOCK_STREAM, dir_ + "/idle.sock", false),
                   "is not listening"});
  int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in loopback{};
  loopback.sin_family = AF_INET;
  loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(tcp, reinterpret_cast<const sockaddr*>(&loopback), sizeof(loopback)), 0);
  ASSERT_EQ(listen(tcp, 1), 0);
  cases.push_back({"tcp", tcp, "is not a Unix socket"});
  for (const Case& c : cases) {
    const std::string log = dir_ + "/" + c.name + ".log";
    pid_t pid = SpawnPvemud({"--listen=unix://" + dir_ + "/x.sock", "--state-dir="}, log, c.fd);
    close(c.fd);
    EXPECT_EQ(WaitExit(pid), 1) << c.name << ": " << ReadFile(log);
    EXPECT_THAT(ReadFile(log), HasSubstr("pvemud: the socket passed as fd 3 (LISTEN_FDS) " + c.says))
        << c.name;
    EXPECT_THAT(ReadFile(log), HasSubstr("pvemud.socket must pass one listening Unix stream socket"))
        << c.name;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/x.sock")) << c.name;
  }
}

// One datagram from the notify socket (bounded wait); "" if none came.
std::string ReceiveNotification(int fd, int seconds = 20) {
  pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, seconds * 1000) != 1) return "";
  char buf[4096];
  ssize_t n = recv(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, n) : "";
}

// Type=notify: READY=1 (with a STATUS= line) arrives once the gRPC socket
// answers: a call made the moment it arrives, without waiting for the
// channel, succeeds. SIGTERM brings STOPPING=1, then a clean exit.
TEST_F(SystemdTest, NotifiesReadyOnceServingAndStoppingOnSigterm) {
  const std::string notify = dir_ + "/notify.sock";
  const std::string sock = dir_ + "/pvemu.sock";
  const std::string log = dir_ + "/pvemud.log";
  int fd = BoundSocket(SOCK_DGRAM, notify, false);
  const std::string env = "NOTIFY_SOCKET=" + notify;
  pid_t pid = SpawnPvemud({"--listen=unix://" + sock, "--state-dir=" + dir_ + "/state"}, log, -1,
                          {env});

  std::string ready = ReceiveNotification(fd);
  ASSERT_THAT(ready, HasSubstr("READY=1")) << ReadFile(log);
  auto channel = grpc::CreateChannel("unix://" + sock, grpc::InsecureChannelCredentials());
  auto stub = v1::EmulatorService::NewStub(channel);
  grpc::ClientContext context;
  context.set_wait_for_ready(false);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::StatsResponse stats;
  grpc::Status status = stub->GetStats(&context, v1::StatsRequest(), &stats);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(ready, HasSubstr("STATUS=ready on unix://" + sock));
  EXPECT_THAT(ReadFile(log), HasSubstr("pvemud: ready on"));

  kill(pid, SIGTERM);
  std::string stopping = ReceiveNotification(fd);
  EXPECT_THAT(stopping, HasSubstr("STOPPING=1"));
  EXPECT_EQ(WaitExit(pid), 0) << ReadFile(log);
  close(fd);
}

}  // namespace
}  // namespace pvemu::testing
