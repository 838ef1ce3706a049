// Policy lookups on the trap path: one compiled lookup per MSR access, for
// small and large policies, and the per-trap cost of reading the live
// snapshot (alone, with two threads, and while another thread edits).
//   BM_PolicyLookup/10 vs /10000: target ratio <= 1.25x.
//   BM_SnapshotReadDuringEdits/1 vs /0: target within 10%.
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "policy/compile.h"
#include "policy/shipped.h"
#include "policy/loader.h"
#include "policy/store.h"

namespace pvemu::policy {
namespace {

// A policy of `rules` rules, half single MSRs and half ranges, spread over
// the index space so the hash map and the interval table both grow.
v1::Policy MakePolicy(int rules) {
  v1::Policy p;
  v1::Layer* d = p.mutable_default_();
  d->set_vpmu(true);
  for (int i = 0; i < rules / 2; ++i) {
    v1::MsrRule* r = d->add_msr();
    r->set_msr(absl::StrFormat("0x%x", 0x100000 + i * 16));
    r->set_read(v1::ReadAction::CONST);
    r->set_value(i);
  }
  for (int i = 0; i < rules - rules / 2; ++i) {
    v1::MsrRule* r = d->add_msr();
    uint32_t first = 0x40000000u + i * 64;
    r->mutable_range()->set_first(absl::StrFormat("0x%x", first));
    r->mutable_range()->set_last(absl::StrFormat("0x%x", first + 31));
    r->set_read(v1::ReadAction::ZERO);
    r->set_write(v1::WriteAction::IGNORE);
  }
  return p;
}

// `count` indices (a power of two) that hit singles, hit ranges and miss
// both, drawn from the whole table, in a fixed shuffle.
std::vector<uint32_t> MakeProbes(int rules, int count) {
  std::mt19937 rng(42);
  std::vector<uint32_t> probes;
  int singles = std::max(1, rules / 2), ranges = std::max(1, rules - rules / 2);
  for (int i = 0; i < count; ++i) {
    switch (i % 4) {
      case 0: probes.push_back(0x100000 + (rng() % singles) * 16); break;            // single
      case 1: probes.push_back(0x40000000u + (rng() % ranges) * 64 + rng() % 32); break;  // range
      case 2: probes.push_back(0x40000000u + (rng() % ranges) * 64 + 40); break;     // gap: miss
      default: probes.push_back(0x100000 + (rng() % singles) * 16 + 3); break;       // miss
    }
  }
  std::shuffle(probes.begin(), probes.end(), rng);
  return probes;
}

void LookupLoop(benchmark::State& state, int probe_count) {
  int rules = static_cast<int>(state.range(0));
  auto snap = CompilePolicy(MakePolicy(rules), SourceMap("bench"), v1::INTEL, 1);
  if (!snap.ok()) {
    state.SkipWithError("compile failed");
    return;
  }
  const DomainSnapshot& d = (*snap)->ForDomain(1);
  std::vector<uint32_t> probes = MakeProbes(rules, probe_count);
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

}  // namespace
}  // namespace pvemu::policy
