// Policy lookups on the trap path: one compiled lookup per MSR access, for
// small and large policies, and the per-trap cost of reading the live
// snapshot (alone, with two threads, and while another thread edits).
//   BM_PolicyLookup/10 vs /10000: target ratio <= 1.25x.
//   BM_SnapshotReadDuringEdits/1 vs /0: target within 10%.
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "tests/bench/policy_gen.h"
#include "policy/compile.h"
#include "policy/shipped.h"
#include "policy/loader.h"
#include "policy/store.h"

namespace pvemu::policy {
namespace {

void LookupLoop(benchmark::State& state, int probe_count) {
  int rules = static_cast<int>(state.range(0));
  auto snap = CompilePolicy(::pvemu::bench::MakeRulesPolicy(rules), SourceMap("bench"), v1::INTEL, 1);
  if (!snap.ok()) {
    state.SkipWithError("compile failed");
    return;
  }
  const DomainSnapshot& d = (*snap)->ForDomain(1);
  std::vector<uint32_t> probes = ::pvemu::bench::MakeRuleProbes(rules, probe_count);
  size_t i = 0;
  for (auto _ : state) {
    const MsrEntry& e = d.Lookup(probes[i]);
    benchmark::DoNotOptimize(e.read);
    i = (i + 1) & (probes.size() - 1);
  }
  state.SetItemsProcessed(state.iterations());
}

// A guest's trap stream touches a small working set of MSRs (a few dozen),
// so the ratio target is measured on 64 distinct indices spread over the
// whole table: hash and interval sizes matter, cache misses mostly do not.
void BM_PolicyLookup(benchmark::State& state) { LookupLoop(state, 64); }
BENCHMARK(BM_PolicyLookup)->Arg(10)->Arg(10000);

// Worst case for caches: 4096 distinct indices, every lookup cold-ish.
void BM_PolicyLookupSpread(benchmark::State& state) { LookupLoop(state, 4096); }
BENCHMARK(BM_PolicyLookupSpread)->Arg(10)->Arg(10000);

Store& SharedStore() {
  static Store* store = [] {
    auto loaded = ParsePolicy(ShippedPolicy("default"), "default");
    return Store::FromPolicy(loaded->policy, loaded->source, v1::INTEL)->release();
  }();
  return *store;
}

constexpr uint32_t kReadProbes[] = {0x1b0, 0x19a, 0x277, 0xc0000080, 0x12345, 0xc1, 0x1b, 0x8b};

// One trap's policy access: refresh-if-moved, pick the domain, one lookup.
void BM_SnapshotRead(benchmark::State& state) {
  SnapshotReader reader(SharedStore());
  size_t i = 0;
  for (auto _ : state) {
    const MsrEntry& e = reader.Get().ForDomain(1).Lookup(kReadProbes[i++ & 7]);
    benchmark::DoNotOptimize(e.read);
  }
}
BENCHMARK(BM_SnapshotRead)->Threads(1)->Threads(2);

// The same while (arg 1) another thread edits the policy in a loop.
void BM_SnapshotReadDuringEdits(benchmark::State& state) {
  Store& store = SharedStore();
  std::atomic<bool> stop{false};
  std::thread editor;
  if (state.range(0) == 1) {
    editor = std::thread([&] {
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        v1::MsrRule r;
        r.set_msr("0x10");
        r.set_read(v1::ReadAction::CONST);
        r.set_value(++n);
        (void)store.SetRule(LayerRef::Domain(7), r, {});
      }
    });
  }
  SnapshotReader reader(store);
  size_t i = 0;
  for (auto _ : state) {
    const MsrEntry& e = reader.Get().ForDomain(1).Lookup(kReadProbes[i++ & 7]);
    benchmark::DoNotOptimize(e.read);
  }
  stop = true;
  if (editor.joinable()) editor.join();
  state.counters["generation"] = static_cast<double>(store.generation());
}
BENCHMARK(BM_SnapshotReadDuringEdits)->Arg(0)->Arg(1)->Repetitions(5)->ReportAggregatesOnly(true);

// One SetRule per iteration: a CONST read of IA32_ENERGY_PERF_BIAS in
// domain 3's overlay, with a new value each time.
void RunSetRules(benchmark::State& state, Store& store) {
  v1::MsrRule rule;
  rule.set_msr("0x1b0");
  rule.set_read(v1::ReadAction::CONST);
  uint64_t value = 0;
  for (auto _ : state) {
    rule.set_value(++value);
    if (!store.SetRule(LayerRef::Domain(3), rule, EditOptions()).ok()) {
      return state.SkipWithError("edit failed");
    }
  }
}

// The CPU part of one SetRule on the shipped default policy, in memory (no
// state directory, so no fsync): validation, text rendering, compilation and
// the diff. The daemon's edit latency is this plus one durable write
// (BM_DaemonSetRule vs BM_DaemonBaseline).
void BM_StoreSetRuleInMemory(benchmark::State& state) {
  auto loaded = ParsePolicy(ShippedPolicy("default"), "default");
  auto store = Store::FromPolicy(loaded->policy, loaded->source, v1::INTEL);
  if (!store.ok()) return state.SkipWithError("store");
  RunSetRules(state, **store);
}
BENCHMARK(BM_StoreSetRuleInMemory)->Unit(benchmark::kMicrosecond);

// The same edit with a state directory: plus the state file's text, its
// re-parse for source positions and the durable write (which overlaps the
// compilation).
void BM_StoreSetRuleDurable(benchmark::State& state) {
  std::string dir = (std::filesystem::temp_directory_path() / "pvemu-store-bench.XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return state.SkipWithError("mkdtemp");
  {
    auto store = Store::Open(dir, "", v1::INTEL, nullptr);
    if (!store.ok()) return state.SkipWithError("store");
    RunSetRules(state, **store);
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StoreSetRuleDurable)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace pvemu::policy
