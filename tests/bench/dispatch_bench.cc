// The whole trap path, trap → outcome, as pvemud runs it (server/dispatch.h),
// on the shared trap mix (trap_mix.h), with the shipped default policy on
// the Intel sim host. Targets (issue 7), all as ratios within one run:
//   BM_DispatchMix >= 2x BM_DecodeMix_Zydis items/s;
//   BM_DispatchRules/10000 within 1.25x of /10;
//   BM_DispatchHooksOff within 2% of BM_DispatchHooksBare (and
//   BM_DispatchHooksOverhead's overhead_pct, the same comparison interleaved);
//   heap_allocs == 0: allocations over a whole pass of the traps after warm-up.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "emulator/cpu.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "policy/store.h"
#include "pvemu/textproto.h"
#include "server/audit.h"
#include "server/dispatch.h"
#include "server/hosts/sim_host.h"
#include "tests/bench/policy_gen.h"
#include "tests/bench/trap_mix.h"

namespace pvemu::bench {
namespace {

// The sim Intel host, a store of `policy`, and a dispatcher with an audit
// hub that nobody watches (hooks compiled in, switched off).
struct World {
  std::unique_ptr<server::SimHost> host;
  std::unique_ptr<policy::Store> store;
  server::AuditHub audit;
  std::unique_ptr<server::Dispatcher> dispatcher;

  explicit World(const v1::Policy* policy = nullptr) {
    v1::HostProfile profile;
    (void)ParseTextProto(policy::ShippedProfile("intel-xeon-e-2136"), "intel", &profile);
    host = std::move(server::SimHost::Create(profile, "intel")).value();
    if (policy == nullptr) {
      auto loaded = policy::ParsePolicy(policy::ShippedPolicy("default"), "default.textproto");
      store = std::move(policy::Store::FromPolicy(loaded->policy, loaded->source, v1::INTEL))
                  .value();
    } else {
      store = std::move(policy::Store::FromPolicy(*policy, policy::SourceMap("bench"),
                                                  v1::INTEL))
                  .value();
    }
    dispatcher = std::make_unique<server::Dispatcher>(*store, *host, &audit,
                                                      server::DispatchOptions());
  }
};

// Heap allocations over one more pass of `traps` after a warm-up pass (the
// first SHADOW access of a vCPU allocates its table once): the trap path's
// own allocations, exactly, without the benchmark library's bookkeeping.
uint64_t AllocationsPerPass(server::Dispatcher::Session& session,
                            const std::vector<emulator::Trap>& traps) {
  for (const auto& t : traps) benchmark::DoNotOptimize(session.Handle(t));
  const uint64_t before = HeapAllocations();
  for (const auto& t : traps) benchmark::DoNotOptimize(session.Handle(t));
  return HeapAllocations() - before;
}

template <bool kBare>
void RunMix(benchmark::State& state) {
  World world;
  auto session = world.dispatcher->NewSession();
  const std::vector<emulator::Trap> traps = MakeTrapMix();
  const uint64_t allocs = AllocationsPerPass(*session, traps);
  size_t i = 0;
  for (auto _ : state) {
    emulator::Outcome out = kBare ? session->HandleBare(traps[i]) : session->Handle(traps[i]);
    benchmark::DoNotOptimize(out);
    i = (i + 1) & (traps.size() - 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["heap_allocs"] = static_cast<double>(allocs);
}

void BM_DispatchMix(benchmark::State& state) { RunMix<false>(state); }
BENCHMARK(BM_DispatchMix);

// Hooks (counters, audit, capture) compiled in and switched off...
void BM_DispatchHooksOff(benchmark::State& state) { RunMix<false>(state); }
BENCHMARK(BM_DispatchHooksOff);
// ...against the same path compiled without them.
void BM_DispatchHooksBare(benchmark::State& state) { RunMix<true>(state); }
BENCHMARK(BM_DispatchHooksBare);

// The 2% target needs a finer instrument than two benchmarks run one after
// the other on a shared machine (identical benchmarks differ by up to 8%
// between runs). This one alternates short batches of the hooked and the
// bare path, so drift hits both alike. Each path runs half the batches (as
// two variants, A and B): the branch predictor learns a path in proportion
// to the time it runs, so an uneven split would favour one. Each batch takes
// the next traps of the stream, and the order rotates so every variant
// follows every other equally often.
// Batches a preemption hit are outliers, so the figures compare medians.
//   overhead_pct = hooked vs bare; noise_pct = bare B vs bare A.
void BM_DispatchHooksOverhead(benchmark::State& state) {
  World world;
  auto session = world.dispatcher->NewSession();
  const std::vector<emulator::Trap> traps = MakeTrapMix();
  (void)AllocationsPerPass(*session, traps);
  constexpr size_t kBatch = 512;
  constexpr int kVariants = 4;  // hooked A, bare A, hooked B, bare B
  std::vector<double> ns[kVariants];
  for (auto& v : ns) v.reserve(1 << 16);
  size_t at = 0;
  int round = 0;
  for (auto _ : state) {
    for (int step = 0; step < kVariants; ++step) {
      const int which = (round + step) % kVariants;
      const bool hooked = (which % 2) == 0;
      const auto start = std::chrono::steady_clock::now();
      for (size_t k = 0; k < kBatch; ++k) {
        const emulator::Trap& t = traps[(at + k) & (traps.size() - 1)];
        emulator::Outcome out = hooked ? session->Handle(t) : session->HandleBare(t);
        benchmark::DoNotOptimize(out);
      }
      ns[which].push_back(std::chrono::duration<double, std::nano>(
                              std::chrono::steady_clock::now() - start)
                              .count() /
                          kBatch);
      at = (at + kBatch) & (traps.size() - 1);
    }
    round = (round + 1) % kVariants;
  }
  state.SetItemsProcessed(state.iterations() * kVariants * kBatch);
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  std::vector<double> hooked = ns[0], bare = ns[1];
  hooked.insert(hooked.end(), ns[2].begin(), ns[2].end());
  bare.insert(bare.end(), ns[3].begin(), ns[3].end());
  const double hooked_ns = median(hooked), bare_ns = median(bare);
  state.counters["hooked_ns"] = hooked_ns;
  state.counters["bare_ns"] = bare_ns;
  state.counters["overhead_pct"] = 100.0 * (hooked_ns - bare_ns) / bare_ns;
  state.counters["noise_pct"] = 100.0 * (median(ns[3]) - median(ns[1])) / median(ns[1]);
}
BENCHMARK(BM_DispatchHooksOverhead);

// RDMSR traps over policies of 10 and 10000 rules (half single, half ranges),
// probing 4096 distinct MSRs: single hits, range hits, gaps and misses.
// The trap itself is one struct whose RCX changes per iteration: a real
// trap's registers arrive hot in cache (the hypervisor just saved them), so
// streaming a 750 KB array of traps through the cache here would measure
// that array evicting the policy, not the policy's size.
void BM_DispatchRules(benchmark::State& state) {
  const int rules = static_cast<int>(state.range(0));
  v1::Policy policy = MakeRulesPolicy(rules);
  World world(&policy);
  auto session = world.dispatcher->NewSession();
  const std::vector<uint32_t> probes = MakeRuleProbes(rules, 4096);
  std::vector<emulator::Trap> traps(probes.size());
  for (size_t k = 0; k < traps.size(); ++k) {
    emulator::Trap& t = traps[k];
    t.domain = k % 4;
    t.insn[0] = 0x0f;
    t.insn[1] = 0x32;
    t.insn_len = 2;
    t.regs.gpr[emulator::kRcx] = probes[k];
  }
  const uint64_t allocs = AllocationsPerPass(*session, traps);
  emulator::Trap trap = traps[0];
  size_t i = 0;
  for (auto _ : state) {
    trap.domain = static_cast<uint32_t>(i & 3);
    trap.regs.gpr[emulator::kRcx] = probes[i];
    emulator::Outcome out = session->Handle(trap);
    benchmark::DoNotOptimize(out);
    i = (i + 1) & (probes.size() - 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["heap_allocs"] = static_cast<double>(allocs);
}
BENCHMARK(BM_DispatchRules)->Arg(10)->Arg(10000);

}  // namespace
}  // namespace pvemu::bench
