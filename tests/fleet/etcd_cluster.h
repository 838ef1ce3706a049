// A real etcd cluster for the fleet tests: 3 members (/usr/bin/etcd) on
// loopback, on free ports and in data directories of their own, started
// and stopped (each, or all) by the test, every wait bounded.
#ifndef PVEMU_TESTS_FLEET_ETCD_CLUSTER_H_
#define PVEMU_TESTS_FLEET_ETCD_CLUSTER_H_

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fleet/etcd_client.h"
#include "gtest/gtest.h"
#include "tests/fleet/etcd_process.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {

class EtcdCluster {
 public:
  explicit EtcdCluster(const std::string& dir, int members = 3) : dir_(dir) {
    for (int i = 0; i < members; ++i) {
      members_.push_back(Member{absl::StrCat("m", i), FreePort(), FreePort(), -1});
    }
  }
  ~EtcdCluster() { StopAll(); }

  // Starts every member; true once the cluster answers (within 20 s).
  bool Start() {
    for (size_t i = 0; i < members_.size(); ++i) StartMember(i);
    return WaitHealthy(std::chrono::seconds(20));
  }

  void StartMember(size_t i) {
    Member& m = members_[i];
    if (m.pid > 0) return;
    std::vector<std::string> peers;
    for (const Member& p : members_) {
      peers.push_back(absl::StrCat(p.name, "=http://127.0.0.1:", p.peer_port));
    }
    std::vector<std::string> args = {
        "/usr/bin/etcd",
        "--name=" + m.name,
        "--data-dir=" + dir_ + "/" + m.name,
        absl::StrCat("--listen-client-urls=http://127.0.0.1:", m.client_port),
        absl::StrCat("--advertise-client-urls=http://127.0.0.1:", m.client_port),
        absl::StrCat("--listen-peer-urls=http://127.0.0.1:", m.peer_port),
        absl::StrCat("--initial-advertise-peer-urls=http://127.0.0.1:", m.peer_port),
        "--initial-cluster=" + absl::StrJoin(peers, ","),
        "--initial-cluster-token=pvemu-fleet-test",
        "--initial-cluster-state=new",
        // Fast elections: a test notices a lost or regained quorum in
        // well under a second.
        "--heartbeat-interval=50",
        "--election-timeout=500",
        "--logger=zap",
        "--log-outputs=" + dir_ + "/" + m.name + ".log",
    };
    m.pid = SpawnQuiet(std::move(args), dir_ + "/" + m.name + ".stderr");
  }

  // SIGKILL, as a crash; the data dir stays for a restart.
  void KillMember(size_t i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    kill(m.pid, SIGKILL);
    waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }

  void StopAll() {
    for (Member& m : members_) {
      if (m.pid <= 0) continue;
      kill(m.pid, SIGTERM);
      // Bounded: 5 s for a clean stop, then SIGKILL.
      bool gone = false;
      for (int i = 0; i < 50 && !gone; ++i) {
        gone = waitpid(m.pid, nullptr, WNOHANG) == m.pid;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!gone) {
        kill(m.pid, SIGKILL);
        waitpid(m.pid, nullptr, 0);
      }
      m.pid = -1;
    }
  }
  void StartAll() {
    for (size_t i = 0; i < members_.size(); ++i) StartMember(i);
  }

  bool WaitHealthy(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Etcdctl("put /pvemu-test/health ok").status == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  // "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
  // pvemu's own etcd client on the cluster, for a test's direct reads and
  // writes (an etcdctl in process); a failure to create it fails the test.
  std::unique_ptr<fleet::EtcdClient> Client() const {
    fleet::EtcdOptions options;
    options.endpoints = absl::StrSplit(Endpoints(), ',');
    absl::StatusOr<std::unique_ptr<fleet::EtcdClient>> client = fleet::EtcdClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
  std::string Endpoints() const {
    std::vector<std::string> eps;
    for (const Member& m : members_) eps.push_back(absl::StrCat("127.0.0.1:", m.client_port));
    return absl::StrJoin(eps, ",");
  }
  std::string Url(const std::string& prefix = "") const {
    return absl::StrCat("etcd://", Endpoints(), prefix);
  }

  // Writes `value` under `key` with etcdctl (around pvemu's checks);
  // etcdctl's exit status.
  int Put(const std::string& key, const std::string& value) const {
    const std::string file = dir_ + "/put-value";
    std::ofstream(file, std::ios::trunc) << value;
    return Etcdctl(absl::StrCat("put ", key, " < ", file)).status;
  }

  // etcdctl against the running members, bounded to 5 s.
  CommandRun Etcdctl(const std::string& args) const {
    return RunCommand(absl::StrCat("ETCDCTL_API=3 /usr/bin/etcdctl --command-timeout=5s "
                                   "--dial-timeout=2s --endpoints=",
                                   Endpoints(), " ", args));
  }

 private:
  struct Member {
    std::string name;
    int client_port, peer_port;
    pid_t pid;
  };
  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_FLEET_ETCD_CLUSTER_H_
