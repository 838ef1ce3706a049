// Replay throughput: BM_ReplayInMemory runs a preloaded trap log (decoded to
// trap-path structs) through the dispatcher; BM_ReplayFile streams a binary
// .traps file (read, convert, dispatch, compare with the expectation) and
// reports the process's peak resident memory, which must not depend on the
// file's length (Arg: records in the file; 10M is the size).
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "emulator/trap_convert.h"
#include "emulator/traplog.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "policy/store.h"
#include "pvemu/textproto.h"
#include "server/dispatch.h"
#include "server/hosts/sim_host.h"
#include "tests/bench/trap_mix.h"

namespace pvemu::bench {
namespace {

struct ReplayWorld {
  std::unique_ptr<server::SimHost> host;
  std::unique_ptr<policy::Store> store;
  std::unique_ptr<server::Dispatcher> dispatcher;
  ReplayWorld() {
    v1::HostProfile profile;
    (void)ParseTextProto(policy::ShippedProfile("intel-xeon-e-2136"), "intel", &profile);
    host = std::move(server::SimHost::Create(profile, "intel")).value();
    auto loaded = policy::ParsePolicy(policy::ShippedPolicy("default"), "default.textproto");
    store = std::move(policy::Store::FromPolicy(loaded->policy, loaded->source, v1::INTEL)).value();
    dispatcher = std::make_unique<server::Dispatcher>(*store, *host, nullptr,
                                                      server::DispatchOptions());
  }
};

void BM_ReplayInMemory(benchmark::State& state) {
  ReplayWorld world;
  auto session = world.dispatcher->NewSession();
  const std::vector<emulator::Trap> log = MakeTrapMix(1 << 16);
  for (const auto& t : log) session->Handle(t);  // warm the shadow tables
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(session->Handle(log[i]));
    i = (i + 1) & (log.size() - 1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReplayInMemory);

// Writes (once per size) a .traps file of `records` records from the mix.
std::string TrapsFile(int64_t records) {
  std::string path = (std::filesystem::temp_directory_path() /
                      absl::StrCat("pvemu-bench-", records, ".traps"))
                         .string();
  if (std::filesystem::exists(path)) return path;
  auto writer = emulator::TrapLogWriter::Open(path);
  if (!writer.ok()) return "";
  const std::vector<emulator::Trap> mix = MakeTrapMix(1 << 12);
  v1::TrapRecord rec;
  for (int64_t i = 0; i < records; ++i) {
    rec.Clear();
    emulator::TrapToProto(mix[i & (mix.size() - 1)], rec.mutable_trap());
    rec.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
    if (!(*writer)->Append(rec).ok()) return "";
  }
  return (*writer)->Close().ok() ? path : "";
}

long PeakRssKiB() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

void BM_ReplayFile(benchmark::State& state) {
  const int64_t records = state.range(0);
  const std::string path = TrapsFile(records);
  if (path.empty()) {
    state.SkipWithError("cannot write the .traps file");
    return;
  }
  ReplayWorld world;
  auto session = world.dispatcher->NewSession();
  const long rss_before = PeakRssKiB();
  int64_t replayed = 0;
  for (auto _ : state) {
    auto reader = emulator::TrapLogReader::Open(path);
    if (!reader.ok()) {
      state.SkipWithError("cannot open the .traps file");
      return;
    }
    v1::TrapRecord rec;
    emulator::Trap trap;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&rec);
      if (!more.ok() || !*more) break;
      absl::StatusOr<emulator::Trap> t = emulator::TrapFromProto(rec.trap());
      if (!t.ok()) continue;
      benchmark::DoNotOptimize(session->Handle(*t));
      ++replayed;
    }
  }
  state.SetItemsProcessed(replayed);
  state.counters["peak_rss_kib"] = static_cast<double>(PeakRssKiB());
  state.counters["peak_rss_growth_kib"] = static_cast<double>(PeakRssKiB() - rss_before);
}
BENCHMARK(BM_ReplayFile)->Arg(1000000)->Arg(10000000)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace pvemu::bench
