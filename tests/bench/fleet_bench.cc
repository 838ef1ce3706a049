// Fleet mode against a real single-member etcd (/usr/bin/etcd):
//   BM_FleetEditToAllHosts: from sending a `fleet set-rule` (acknowledged,
//     so etcd committed it and the answering host applied it) until all 3
//     fleet-mode pvemud (in process) published the new revision (each one's
//     audit stream says so; each then answers a trap with the new value,
//     checked untimed); p50 and p99. Each iteration also times the floor an edit cannot beat: a
//     bare etcd Put until its Watch event arrives, on the same etcd, so the
//     ratio (edit / round trip) comes from one run on one machine; target:
//     p50 ratio <= 1.5x. ack_p50_us: until set-rule answered (etcd
//     committed, h1 applied). from_put_*: the same edit timed from when h1
//     issued its Txn, as etcd's own latency work measures a write (the
//     read, the checks and the RPC before it left out).
//   BM_FleetEditToOneHost: the same with h1 alone, so that the two differ
//     by what h2 and h3 cost when they apply on the same cores.
// Without /usr/bin/etcd it says so and skips.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>

#include "tests/fleet/etcd_process.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "grpcpp/create_channel.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/daemon.h"
#include "fleet/compose.h"
#include "fleet/editor.h"
#include "fleet/etcd_client.h"
#include "fleet/keys.h"
#include "policy/loader.h"
#include "policy/shipped.h"

namespace pvemu::bench {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";

// One etcd member on loopback, in a directory of its own, and three
// fleet-mode pvemud on it (h1 and h2 Intel, h3 AMD).
struct FleetWorld {
  std::string dir;
  std::string error;  // why the world is not up
  pid_t etcd = -1;
  std::string endpoint;
  std::unique_ptr<fleet::EtcdClient> client;
  std::vector<std::unique_ptr<server::Daemon>> daemons;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::EmulatorService::Stub>> emulators;
  std::unique_ptr<v1::FleetService::Stub> fleet;

  // The first `hosts_wanted` of h1, h2, h3.
  explicit FleetWorld(size_t hosts_wanted = 3) {
    if (access(kEtcd, X_OK) != 0) {
      error = absl::StrCat(kEtcd, " is missing: install etcd-server (scripts/install-deps)");
      return;
    }
    dir = (std::filesystem::temp_directory_path() / "pvemu-fleet-bench.XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) {
      error = "cannot make a temporary directory";
      return;
    }
    const int client_port = testing::FreePort(), peer_port = testing::FreePort();
    endpoint = absl::StrCat("127.0.0.1:", client_port);
    std::vector<std::string> args = {
        kEtcd,
        "--name=bench",
        "--data-dir=" + dir + "/etcd",
        "--listen-client-urls=http://" + endpoint,
        "--advertise-client-urls=http://" + endpoint,
        absl::StrCat("--listen-peer-urls=http://127.0.0.1:", peer_port),
        absl::StrCat("--initial-advertise-peer-urls=http://127.0.0.1:", peer_port),
        absl::StrCat("--initial-cluster=bench=http://127.0.0.1:", peer_port),
        "--heartbeat-interval=50",
        "--election-timeout=500",
        "--logger=zap",
        "--log-outputs=" + dir + "/etcd.log",
    };
    etcd = testing::SpawnQuiet(std::move(args), dir + "/etcd.stderr");
    // etcd answers etcdctl before pvemu's client is made (see the report of
    // an earlier version of this bench: a channel made while etcd started spent 20 s in
    // connection attempts that saw no SETTINGS frame).
    bool healthy = false;
    const std::string probe = absl::StrCat(
        "ETCDCTL_API=3 /usr/bin/etcdctl --dial-timeout=1s --command-timeout=1s --endpoints=",
        endpoint, " endpoint health >/dev/null 2>&1");
    for (int i = 0; i < 40 && !healthy; ++i) {  // 20 s
      healthy = std::system(probe.c_str()) == 0;
      if (!healthy) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    fleet::EtcdOptions eo;
    eo.endpoints = {endpoint};
    auto c = fleet::EtcdClient::Create(eo);
    if (!c.ok()) {
      error = std::string(c.status().message());
      return;
    }
    client = std::move(*c);
    absl::Status up = absl::UnknownError("not tried");
    for (int i = 0; i < 100 && !up.ok(); ++i) {  // 20 s
      up = client->Put("/pvemu-bench/health", "ok", 0, absl::Seconds(1)).status();
      if (!up.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (!up.ok()) {
      error = absl::StrCat("etcd did not come up within 20 s (", up.message(), "); see ", dir,
                           "/etcd.log");
      return;
    }
    std::vector<std::pair<std::string, std::string>> hosts = {
        {"h1", "web"}, {"h2", "web"}, {"h3", "gpu"}};
    hosts.resize(std::min(hosts.size(), hosts_wanted));
    for (size_t i = 0; i < hosts.size(); ++i) {
      server::DaemonOptions options;
      options.listen = absl::StrCat("unix://", dir, "/", hosts[i].first, ".sock");
      options.state_dir = absl::StrCat(dir, "/state-", hosts[i].first);
      options.fleet = "etcd://" + endpoint;
      options.host_id = hosts[i].first;
      options.host_classes = {hosts[i].second};
      if (i == 2) options.host_profile = "amd-epyc-7443p";
      std::vector<std::string> warnings;
      auto d = server::Daemon::Start(options, &warnings);
      if (!d.ok()) {
        error = absl::StrCat("pvemud ", hosts[i].first, " did not start: ", d.status().message());
        return;
      }
      daemons.push_back(std::move(*d));
      auto channel = grpc::CreateChannel(options.listen, grpc::InsecureChannelCredentials());
      channels.push_back(channel);
      emulators.push_back(v1::EmulatorService::NewStub(channel));
      if (i == 0) fleet = v1::FleetService::NewStub(channel);
    }
  }
  ~FleetWorld() {
    for (auto& d : daemons) d->Shutdown();
    daemons.clear();
    if (etcd > 0) {
      kill(etcd, SIGTERM);
      waitpid(etcd, nullptr, 0);
    }
    // On failure the directory stays, with etcd's log, for the reason.
    if (!dir.empty() && ok()) std::filesystem::remove_all(dir);
  }
  bool ok() const { return error.empty(); }

  // What host i's domain 1 reads from IA32_ENERGY_PERF_BIAS; -1 for no value.
  int64_t Read(size_t i) {
    v1::Trap trap;
    trap.set_domain(1);
    trap.set_mode(v1::MODE_64);
    trap.set_insn(std::string("\x0f\x32", 2));
    trap.mutable_regs()->set_rcx(0x1b0);
    trap.mutable_regs()->set_rip(0x1000);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::Outcome outcome;
    if (!emulators[i]->Emulate(&context, trap, &outcome).ok()) return -1;
    if (outcome.kind() != v1::Outcome::COMPLETED) return -1;
    return static_cast<int64_t>((outcome.regs().rdx() << 32) | (outcome.regs().rax() & 0xffffffff));
  }
};

double Micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}
double Percentile(std::vector<double> v, int p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, v.size() * p / 100)];
}

// When each host published each generation, from its audit stream (what
// `pvemuctl watch --edits` shows): an event is sent once the host's store
// swapped in that generation, so traps from then on get it. A push, as the
// floor's etcd watch is: polling the three hosts with traps instead would
// time the polls (a unary RPC each, one host after another) and take the
// CPU the hosts apply on.
class HostsPublished {
 public:
  explicit HostsPublished(FleetWorld& world) : seen_(world.emulators.size()) {
    for (size_t i = 0; i < world.emulators.size(); ++i) {
      contexts_.push_back(std::make_unique<grpc::ClientContext>());
      v1::WatchRequest request;
      request.set_edits(true);
      audits_.push_back(v1::AuditService::NewStub(world.channels[i]));
      streams_.push_back(audits_[i]->Watch(contexts_[i].get(), request));
      readers_.emplace_back([this, i] {
        v1::AuditEvent event;
        while (streams_[i]->Read(&event)) {
          if (!event.has_edit()) continue;
          const auto now = std::chrono::steady_clock::now();
          absl::MutexLock lock(&mu_);
          seen_[i].push_back({event.edit().generation(), now});
        }
      });
    }
  }
  ~HostsPublished() {
    for (auto& c : contexts_) c->TryCancel();
    for (auto& t : readers_) t.join();
    for (auto& s : streams_) (void)s->Finish();
  }
  // When the last host published `generation` (or a later one); nullopt if
  // one did not within `timeout`.
  std::optional<std::chrono::steady_clock::time_point> AllAt(uint64_t generation,
                                                             absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    const auto when = [&](size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)
        -> std::optional<std::chrono::steady_clock::time_point> {
      for (const Published& p : seen_[i]) {
        if (p.generation >= generation) return p.at;
      }
      return std::nullopt;
    };
    const auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (size_t i = 0; i < seen_.size(); ++i) {
        if (!when(i).has_value()) return false;
      }
      return true;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&all), timeout)) return std::nullopt;
    std::chrono::steady_clock::time_point last{};
    for (size_t i = 0; i < seen_.size(); ++i) last = std::max(last, *when(i));
    for (auto& s : seen_) s.clear();
    return last;
  }

 private:
  struct Published {
    uint64_t generation;
    std::chrono::steady_clock::time_point at;
  };
  std::vector<std::unique_ptr<v1::AuditService::Stub>> audits_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::AuditEvent>>> streams_;
  std::vector<std::thread> readers_;
  absl::Mutex mu_;
  std::vector<std::vector<Published>> seen_ ABSL_GUARDED_BY(mu_);
};

void RunFleetEdit(benchmark::State& state, size_t hosts) {
  FleetWorld world(hosts);
  if (!world.ok()) return state.SkipWithError(world.error.c_str());
  HostsPublished published(world);

  // The round trip's watch, on a key of its own.
  const std::string key = "/pvemu-bench/roundtrip";
  grpc::ClientContext watch_context;
  fleet::EtcdClient::Prepare(&watch_context, absl::InfiniteDuration());
  auto watch = world.client->watch().Watch(&watch_context);
  etcdserverpb::WatchRequest create;
  create.mutable_create_request()->set_key(key);
  etcdserverpb::WatchResponse response;
  if (!watch->Write(create) || !watch->Read(&response) || !response.created()) {
    return state.SkipWithError("cannot watch etcd");
  }

  std::vector<double> edit_us, ack_us, etcd_us, from_put_us;
  uint64_t value = 0x100;
  for (auto _ : state) {
    ++value;
    // The floor: a bare Put until its Watch event arrives.
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<int64_t> put =
        world.client->Put(key, absl::StrCat(value), 0, absl::Seconds(5));
    if (!put.ok()) return state.SkipWithError("etcd put failed");
    bool seen = false;
    while (!seen && watch->Read(&response)) {
      for (const mvccpb::Event& e : response.events()) seen |= e.kv().mod_revision() >= *put;
    }
    if (!seen) return state.SkipWithError("etcd watch ended");
    etcd_us.push_back(Micros(std::chrono::steady_clock::now() - start));

    // The edit, through h1, until every host serves it.
    v1::FleetRuleRequest request;
    request.set_layer("default");
    request.mutable_rule()->set_msr("0x1b0");
    request.mutable_rule()->set_read(v1::ReadAction::CONST);
    request.mutable_rule()->set_value(value);
    start = std::chrono::steady_clock::now();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::FleetEditResponse edited;
    grpc::Status s = world.fleet->SetRule(&context, request, &edited);
    if (!s.ok()) return state.SkipWithError(("fleet set-rule failed: " + s.error_message()).c_str());
    ack_us.push_back(Micros(std::chrono::steady_clock::now() - start));
    const std::optional<std::chrono::steady_clock::time_point> served =
        published.AllAt(edited.revision(), absl::Seconds(10));
    if (!served.has_value()) return state.SkipWithError("a host did not apply the edit within 10 s");
    // Untimed: every host that said so answers a trap with the new value.
    for (size_t i = 0; i < world.emulators.size(); ++i) {
      if (world.Read(i) != static_cast<int64_t>(value)) {
        return state.SkipWithError(
            absl::StrCat("host h", i + 1, " published revision ", edited.revision(),
                         " but does not answer with its value ", value)
                .c_str());
      }
    }
    edit_us.push_back(Micros(*served - start));
    // The same edit from when h1 issued its Txn (the put), as the floor is.
    from_put_us.push_back(Micros(*served - fleet::LastEditTxnIssued()));
  }
  watch->WritesDone();
  watch_context.TryCancel();
  (void)watch->Finish();

  if (edit_us.empty()) return;
  state.counters["edit_p50_us"] = Percentile(edit_us, 50);
  state.counters["edit_p99_us"] = Percentile(edit_us, 99);
  state.counters["ack_p50_us"] = Percentile(ack_us, 50);
  state.counters["etcd_p50_us"] = Percentile(etcd_us, 50);
  state.counters["etcd_p99_us"] = Percentile(etcd_us, 99);
  state.counters["ratio_p50"] = Percentile(edit_us, 50) / Percentile(etcd_us, 50);
  state.counters["ratio_p99"] = Percentile(edit_us, 99) / Percentile(etcd_us, 99);
  state.counters["from_put_p50_us"] = Percentile(from_put_us, 50);
  state.counters["from_put_ratio_p50"] = Percentile(from_put_us, 50) / Percentile(etcd_us, 50);
}
void BM_FleetEditToAllHosts(benchmark::State& state) { RunFleetEdit(state, 3); }
BENCHMARK(BM_FleetEditToAllHosts)->UseRealTime()->Iterations(200);

// The same edit with h1 alone on the machine: what the other two hosts'
// applying costs when all three share its cores (a real fleet's hosts do not).
void BM_FleetEditToOneHost(benchmark::State& state) { RunFleetEdit(state, 1); }
BENCHMARK(BM_FleetEditToOneHost)->UseRealTime()->Iterations(200);

// Composing a host's layers as an etcd writer may size them: a default, two
// classes of the host and the host's layer of N single-MSR rules each (half
// of them the same MSRs in every layer, so each layer shadows the one below
// and the classes are checked for ties rule by rule). 20,000 rules is about
// what etcd's 1.5 MiB request limit holds. The time should grow with N, not
// N squared: compare /2000 and /20000.
void BM_FleetComposeLayers(benchmark::State& state) {
  const int rules = static_cast<int>(state.range(0));
  const auto layer = [rules](uint32_t own_base, uint64_t value) {
    std::string text = "default {\n";
    for (int i = 0; i < rules; ++i) {
      // Even rules: MSRs every layer names; odd rules: this layer's own.
      const uint32_t msr = (i % 2 == 0) ? 0x60000000u + i : own_base + i;
      absl::StrAppend(&text, "  msr { msr: \"0x", absl::Hex(msr), "\" read: CONST value: ",
                      value, " write: GP }\n");
    }
    return text + "}\n";
  };
  static const pvemu::policy::LoadedPolicy* base = [] {
    auto p = pvemu::policy::ParsePolicy(pvemu::policy::ShippedPolicy("default"),
                                        "default.textproto");
    if (!p.ok()) std::abort();
    return new pvemu::policy::LoadedPolicy(*std::move(p));
  }();
  const pvemu::fleet::FleetKeys keys("/pvemu", "h1", {"web", "gpu"});
  pvemu::fleet::LevelSet layers;
  layers[keys.Default()] = layer(0x61000000, 1);
  // The classes agree on the shared MSRs (or they would tie).
  layers[keys.Class("web")] = layer(0x62000000, 2);
  layers[keys.Class("gpu")] = layer(0x63000000, 2);
  layers[keys.Host("h1")] = layer(0x64000000, 3);
  size_t bytes = 0;
  for (const auto& [key, value] : layers) bytes += value.size();
  for (auto _ : state) {
    auto composed = pvemu::fleet::Compose(*base, keys, layers, pvemu::v1::INTEL);
    if (!composed.ok()) {
      state.SkipWithError(std::string(composed.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(composed);
  }
  state.counters["rules"] = 4.0 * rules;
  state.counters["value_bytes"] = static_cast<double>(bytes) / 4;
}
BENCHMARK(BM_FleetComposeLayers)->Arg(1)->Arg(2000)->Arg(20000)->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace pvemu::bench
