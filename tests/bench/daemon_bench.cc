// The daemon over its Unix socket (an in-process pvemud, real gRPC):
//   BM_DaemonEmulateStream vs BM_DaemonEmulateUnary: traps/s on one client;
//     target: the stream at least 10x the unary rate.
//   BM_DaemonSetRule vs BM_DaemonBaseline: edit latency (p50/p99 counters,
//     microseconds) against an empty unary RPC plus one durable atomic file
//     write of the same size on the same disk; target: edit p50 <= 1.5x.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "grpcpp/create_channel.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/daemon.h"

namespace pvemu::bench {
namespace {

struct DaemonWorld {
  std::string dir;
  std::unique_ptr<server::Daemon> daemon;
  std::shared_ptr<grpc::Channel> channel;
  DaemonWorld() {
    dir = (std::filesystem::temp_directory_path() / "pvemu-bench.XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) return;
    server::DaemonOptions options;
    options.listen = "unix://" + dir + "/s.sock";
    options.state_dir = dir + "/state";
    std::vector<std::string> warnings;
    auto d = server::Daemon::Start(options, &warnings);
    if (!d.ok()) return;
    daemon = std::move(*d);
    channel = grpc::CreateChannel(options.listen, grpc::InsecureChannelCredentials());
  }
  ~DaemonWorld() {
    if (daemon) daemon->Shutdown();
    std::filesystem::remove_all(dir);
  }
};

v1::Trap Rdmsr() {
  v1::Trap trap;
  trap.set_domain(1);
  trap.set_insn(std::string("\x0f\x32", 2));
  trap.mutable_regs()->set_rcx(0x1b0);
  return trap;
}

void BM_DaemonEmulateUnary(benchmark::State& state) {
  DaemonWorld world;
  if (!world.daemon) return state.SkipWithError("daemon did not start");
  auto stub = v1::EmulatorService::NewStub(world.channel);
  const v1::Trap trap = Rdmsr();
  v1::Outcome outcome;
  for (auto _ : state) {
    grpc::ClientContext context;
    if (!stub->Emulate(&context, trap, &outcome).ok()) return state.SkipWithError("rpc failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DaemonEmulateUnary)->UseRealTime();

void BM_DaemonEmulateStream(benchmark::State& state) {
  DaemonWorld world;
  if (!world.daemon) return state.SkipWithError("daemon did not start");
  auto stub = v1::EmulatorService::NewStub(world.channel);
  grpc::ClientContext context;
  auto stream = stub->EmulateStream(&context);
  const v1::Trap trap = Rdmsr();
  v1::Outcome outcome;
  // A window of traps in flight, as a trap source with many vCPUs keeps.
  constexpr int kWindow = 128;
  int in_flight = 0;
  for (auto _ : state) {
    while (in_flight < kWindow) {
      stream->Write(trap);
      ++in_flight;
    }
    stream->Read(&outcome);
    --in_flight;
  }
  stream->WritesDone();
  while (in_flight-- > 0) stream->Read(&outcome);
  (void)stream->Finish();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DaemonEmulateStream)->UseRealTime();

void ReportLatencies(benchmark::State& state, std::vector<double>& micros) {
  if (micros.empty()) return;
  std::sort(micros.begin(), micros.end());
  state.counters["p50_us"] = micros[micros.size() / 2];
  state.counters["p99_us"] = micros[std::min(micros.size() - 1, micros.size() * 99 / 100)];
}

void BM_DaemonSetRule(benchmark::State& state) {
  DaemonWorld world;
  if (!world.daemon) return state.SkipWithError("daemon did not start");
  auto stub = v1::PolicyService::NewStub(world.channel);
  std::vector<double> micros;
  uint64_t value = 0;
  for (auto _ : state) {
    v1::SetRuleRequest request;
    request.mutable_layer()->set_domain(3);
    request.mutable_rule()->set_msr("0x1b0");
    request.mutable_rule()->set_read(v1::ReadAction::CONST);
    request.mutable_rule()->set_value(++value);
    grpc::ClientContext context;
    v1::EditResponse response;
    auto start = std::chrono::steady_clock::now();
    if (!stub->SetRule(&context, request, &response).ok()) return state.SkipWithError("edit failed");
    micros.push_back(std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - start).count());
  }
  ReportLatencies(state, micros);
}
BENCHMARK(BM_DaemonSetRule)->UseRealTime();

// The floor an edit cannot beat: one empty unary RPC and one durable atomic
// write (temp file, fsync, rename, fsync dir) of a policy-sized file.
void BM_DaemonBaseline(benchmark::State& state) {
  DaemonWorld world;
  if (!world.daemon) return state.SkipWithError("daemon did not start");
  auto stub = v1::EmulatorService::NewStub(world.channel);
  const std::string body(12 * 1024, 'x');
  const std::string dir = world.dir + "/state";
  std::vector<double> micros;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    grpc::ClientContext context;
    v1::StatsResponse stats;
    (void)stub->GetStats(&context, v1::StatsRequest(), &stats);
    const std::string tmp = dir + "/baseline.tmp", final_path = dir + "/baseline";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    (void)!write(fd, body.data(), body.size());
    fsync(fd);
    close(fd);
    rename(tmp.c_str(), final_path.c_str());
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    fsync(dfd);
    close(dfd);
    micros.push_back(std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - start).count());
  }
  ReportLatencies(state, micros);
}
BENCHMARK(BM_DaemonBaseline)->UseRealTime();

}  // namespace
}  // namespace pvemu::bench
