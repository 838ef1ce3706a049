// Replay throughput: BM_ReplayInMemory runs a preloaded trap log (decoded to
// trap-path structs) through the dispatcher, on one thread or split by vCPU
// over two; BM_ReplayFileJobs is pvemuctl's replay of a file on N threads;
// BM_ReplayFile streams a binary .traps file (read, decode to structs with
// NextTrap, dispatch, compare with the record's expectation). BM_ReplayFile's
// counters: the process's peak resident memory, which must not depend on the
// file's length (Arg: records in the file; 10M is the size); the
// records whose outcome did not match (0: the expectations are what a fresh
// dispatcher answered when the file was written); the heap allocations of
// the timed loop (a few per file, none per record).
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "emulator/decoder.h"
#include "emulator/trap_convert.h"
#include "traplog/expectations.h"
#include "traplog/reader.h"
#include "traplog/traps_format.h"
#include "traplog/writer.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "hosts/profiles.h"
#include "policy/store.h"
#include "base/textproto.h"
#include "dispatch/dispatch.h"
#include "dispatch/replay.h"
#include "hosts/sim_host.h"
#include "tests/bench/recorded_expectation.h"
#include "tests/bench/trap_mix.h"

namespace pvemu::bench {
namespace {

struct ReplayWorld {
  std::unique_ptr<hosts::SimHost> host;
  std::unique_ptr<policy::Store> store;
  std::unique_ptr<dispatch::Dispatcher> dispatcher;
  ReplayWorld() {
    v1::HostProfile profile;
    (void)ParseTextProto(hosts::ShippedProfile("intel-xeon-e-2136"), "intel", &profile);
    host = std::move(hosts::SimHost::Create(profile, "intel")).value();
    auto loaded = policy::ParsePolicy(policy::ShippedPolicy("default"), "default.textproto");
    store = std::move(policy::Store::FromPolicy(loaded->policy, loaded->source, v1::INTEL)).value();
    dispatcher = std::make_unique<dispatch::Dispatcher>(*store, *host, nullptr,
                                                      dispatch::DispatchOptions());
  }
};

// The preloaded mix split by vCPU number over the benchmark's threads
// (traplog::VcpuShare, as `pvemuctl replay --jobs` splits a file): each thread
// replays its share with a session of its own. Real time, so items/s is the
// whole log's rate.
void BM_ReplayInMemory(benchmark::State& state) {
  static ReplayWorld* const world = new ReplayWorld;  // one for every thread
  static const std::vector<emulator::Trap>* const log =
      new std::vector<emulator::Trap>(MakeTrapMix(1 << 16));
  const traplog::VcpuShare share{static_cast<uint32_t>(state.thread_index()),
                                 static_cast<uint32_t>(state.threads())};
  std::vector<emulator::Trap> mine;
  for (const emulator::Trap& t : *log) {
    if (share.Owns(t.vcpu)) mine.push_back(t);
  }
  // A skipped thread still enters the loop, which then runs nothing: the
  // threads start together.
  if (mine.empty()) state.SkipWithError("the mix has no vCPU for this thread");
  auto session = world->dispatcher->NewSession();
  for (const auto& t : mine) session->Handle(t);  // warm the shadow tables
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(session->Handle(mine[i]));
    if (++i == mine.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ReplayInMemory)->Threads(1)->Threads(2)->UseRealTime();

// Writes (once per size and format) a .traps file of `records` records from
// the mix, each expecting what a fresh dispatcher answers when the records
// are replayed in order from the start (as BM_ReplayFile does). A file kept
// from before a change in what the dispatcher answers shows mismatches;
// delete $TMPDIR/pvemu-bench-PVTRAPS2-* to write it again.
std::string TrapsFile(int64_t records) {
  std::string path = (std::filesystem::temp_directory_path() /
                      absl::StrCat("pvemu-bench-", traplog::kTrapsMagic, "-", records, ".traps"))
                         .string();
  if (std::filesystem::exists(path)) return path;
  auto writer = traplog::TrapLogWriter::Open(path);
  if (!writer.ok()) return "";
  ReplayWorld world;
  auto session = world.dispatcher->NewSession();
  const std::vector<emulator::Trap> mix = MakeTrapMix(1 << 12);
  v1::TrapRecord rec;
  for (int64_t i = 0; i < records; ++i) {
    const emulator::Trap& trap = mix[i & (mix.size() - 1)];
    emulator::Instruction insn;
    emulator::DecodeError error = emulator::DecodeError::kOk;
    const emulator::Outcome out = session->Handle(trap, &insn, &error);
    rec.Clear();
    emulator::TrapToProto(trap, rec.mutable_trap());
    SetExpectation(trap, out, insn, error, rec.mutable_expect());
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
  int64_t mismatches = 0;
  const uint64_t allocations_before = HeapAllocations();
  for (auto _ : state) {
    auto reader = traplog::TrapLogReader::Open(path);
    if (!reader.ok()) {
      state.SkipWithError("cannot open the .traps file");
      return;
    }
    emulator::Trap trap;
    traplog::ExpectedOutcome expect;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->NextTrap(&trap, &expect);
      if (!more.ok()) {
        state.SkipWithError(std::string(more.status().message()).c_str());
        return;
      }
      if (!*more) break;
      const emulator::Outcome out = session->Handle(trap);
      if (!traplog::CheckExpectation(expect, trap, out).ok()) ++mismatches;
      ++replayed;
    }
  }
  state.SetItemsProcessed(replayed);
  state.counters["mismatches"] = static_cast<double>(mismatches);
  // Opening the reader allocates a few times; reading must not, per record.
  state.counters["heap_allocs"] = static_cast<double>(HeapAllocations() - allocations_before);
  state.counters["peak_rss_kib"] = static_cast<double>(PeakRssKiB());
  state.counters["peak_rss_growth_kib"] = static_cast<double>(PeakRssKiB() - rss_before);
}
BENCHMARK(BM_ReplayFile)->Arg(1000000)->Arg(10000000)->Iterations(1)->Unit(benchmark::kSecond);

// What `pvemuctl replay --jobs=N` runs (dispatch::ReplayLogs): the 10M-record
// file split by vCPU over N threads, each reading it through its own mmap
// windows. Arg: N.
void BM_ReplayFileJobs(benchmark::State& state) {
  const std::string path = TrapsFile(10000000);
  if (path.empty()) {
    state.SkipWithError("cannot write the .traps file");
    return;
  }
  ReplayWorld world;
  dispatch::ReplayOptions options;
  options.jobs = static_cast<int>(state.range(0));
  dispatch::ReplayTotals totals;
  for (auto _ : state) {
    absl::Status status = dispatch::ReplayLogs(*world.dispatcher, {path}, options, &totals);
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(totals.traps));
  state.counters["mismatches"] = static_cast<double>(totals.mismatches);
}
BENCHMARK(BM_ReplayFileJobs)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace pvemu::bench
