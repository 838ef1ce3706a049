// The three fleet-mode pvemud both fleet suites run in process (fleet_test,
// soak_test): h1 Intel with class web, h2 Intel with web and gpu, h3 AMD
// with gpu, each on a Unix socket and a state dir under the test's dir,
// taking its layers from one etcd. Header-only, for tests.
#ifndef PVEMU_TESTS_FLEET_FLEET_HOSTS_H_
#define PVEMU_TESTS_FLEET_FLEET_HOSTS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/daemon.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {

struct FleetHost {
  std::string id;
  std::vector<std::string> classes;
  server::DaemonOptions options;
  std::unique_ptr<server::Daemon> daemon;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::EmulatorService::Stub> emulator;
  std::unique_ptr<v1::FleetService::Stub> fleet;
  std::unique_ptr<v1::PolicyService::Stub> policy;

  // Starts the daemon with `options` and connects the stubs; a failed start
  // is a test failure (check with HasFatalFailure where it matters).
  void Start() {
    std::vector<std::string> warnings;
    auto started = server::Daemon::Start(options, &warnings);
    ASSERT_TRUE(started.ok()) << id << ": " << started.status();
    daemon = std::move(*started);
    channel = grpc::CreateChannel(options.listen, grpc::InsecureChannelCredentials());
    emulator = v1::EmulatorService::NewStub(channel);
    fleet = v1::FleetService::NewStub(channel);
    policy = v1::PolicyService::NewStub(channel);
  }
  // What a guest of `domain` on this host reads from `msr`; -1 for #GP.
  int64_t ReadMsr(uint32_t domain, uint32_t msr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::Outcome outcome;
    grpc::Status s = emulator->Emulate(&context, RdmsrTrap(domain, msr), &outcome);
    EXPECT_TRUE(s.ok()) << id << ": " << s.error_message();
    if (outcome.kind() != v1::Outcome::COMPLETED) return -1;
    return static_cast<int64_t>((outcome.regs().rdx() << 32) | (outcome.regs().rax() & 0xffffffff));
  }
  // Drops the stubs, then shuts the daemon down; a stopped host stays so.
  void Stop() {
    emulator.reset();
    fleet.reset();
    policy.reset();
    channel.reset();
    if (daemon != nullptr) daemon->Shutdown();
    daemon.reset();
  }
};

// h1, h2, h3 as above, not started, for the etcd at `etcd_url`.
inline std::vector<FleetHost> ThreeFleetHosts(const std::string& dir,
                                              const std::string& etcd_url) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> specs = {
      {"h1", {"web"}}, {"h2", {"web", "gpu"}}, {"h3", {"gpu"}}};
  std::vector<FleetHost> hosts(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    FleetHost& h = hosts[i];
    h.id = specs[i].first;
    h.classes = specs[i].second;
    h.options.listen = absl::StrCat("unix://", dir, "/", h.id, ".sock");
    h.options.state_dir = absl::StrCat(dir, "/state-", h.id);
    h.options.fleet = etcd_url;
    h.options.host_id = h.id;
    h.options.host_classes = h.classes;
    if (i == 2) h.options.host_profile = "amd-epyc-7443p";
  }
  return hosts;
}

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_FLEET_FLEET_HOSTS_H_
