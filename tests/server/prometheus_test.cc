// A real Prometheus scrapes a real pvemud: /usr/bin/prometheus on a free
// loopback port with its own config (scrape_interval 1s) and TSDB in a
// temporary directory, targeting the daemon's --metrics address; after N
// traps through the Emulate RPC, its query API must answer
// sum(pvemu_traps_total) == N within 30 s. Prometheus is stopped (SIGTERM,
// then SIGKILL) whatever happens.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/server/daemon_fixture.h"
#include "tests/server/metrics_helpers.h"

namespace pvemu::testing {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";

// The value of the first result of an instant query's JSON answer
// ({"data":{"result":[{"value":[TIME,"VALUE"]}]}}), or "" if none.
std::string FirstValue(const std::string& json) {
  const size_t value = json.find("\"value\":[");
  if (value == std::string::npos) return "";
  const size_t open = json.find('"', json.find(',', value));
  const size_t close = json.find('"', open + 1);
  if (open == std::string::npos || close == std::string::npos) return "";
  return json.substr(open + 1, close - open - 1);
}

class PrometheusTest : public DaemonTest {
 protected:
  void TearDown() override {
    StopPrometheus();
    DaemonTest::TearDown();
  }

  void StartPrometheus(uint16_t port, uint16_t target_port) {
    const std::string config = dir_ + "/prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          << "scrape_configs:\n  - job_name: pvemud\n    scrape_interval: 1s\n"
                          << "    static_configs:\n      - targets: ['127.0.0.1:" << target_port
                          << "']\n";
    log_ = dir_ + "/prometheus.log";
    const std::string config_flag = "--config.file=" + config;
    const std::string storage_flag = "--storage.tsdb.path=" + dir_ + "/tsdb";
    const std::string listen_flag = absl::StrCat("--web.listen-address=127.0.0.1:", port);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(kPrometheus, kPrometheus, config_flag.c_str(), storage_flag.c_str(),
            listen_flag.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }

  void StopPrometheus() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    pid_ = -1;
  }

  std::string Log() {
    std::ifstream in(log_);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
  }

  pid_t pid_ = -1;
  std::string log_;
};

TEST_F(PrometheusTest, ScrapesTheTrapsSent) {
  ASSERT_EQ(access(kPrometheus, X_OK), 0)
      << kPrometheus << " is missing: scripts/install-deps installs package prometheus";
  const uint16_t metrics_port = FreeLoopbackPort();
  options_.metrics = absl::StrCat("127.0.0.1:", metrics_port);
  StartDaemon();
  const uint16_t prometheus_port = FreeLoopbackPort();
  StartPrometheus(prometheus_port, metrics_port);

  constexpr int kTraps = 42;
  for (int i = 0; i < kTraps; ++i) {
    grpc::ClientContext context;
    v1::Outcome outcome;
    ASSERT_TRUE(emulator_->Emulate(&context, RdmsrTrap(i % 3, 0x1b0 + i % 2), &outcome).ok());
  }

  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string last;
  while (absl::Now() < deadline) {
    HttpResponse r = HttpGet(prometheus_port, "/api/v1/query?query=sum(pvemu_traps_total)");
    if (r.status == 200) {
      last = r.body;
      if (FirstValue(r.body) == absl::StrCat(kTraps)) break;
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_EQ(FirstValue(last), absl::StrCat(kTraps))
      << "last answer: " << last << "\nprometheus log:\n" << Log();
}

}  // namespace
}  // namespace pvemu::testing
