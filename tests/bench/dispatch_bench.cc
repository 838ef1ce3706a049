// The whole trap path, trap → outcome, as pvemud runs it (server/dispatch.h),
// on the shared trap mix (trap_mix.h), with the shipped default policy on
// the Intel sim host. Targets (issue 7), all as ratios within one run:
//   BM_DispatchMix >= 2x BM_DecodeMix_Zydis items/s;
//   BM_DispatchRules/10000 within 1.25x of /10;
//   BM_DispatchHooksOff within 2% of BM_DispatchHooksBare;
//   heap_allocs == 0 everywhere on the trap path.
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

template <bool kBare>
void RunMix(benchmark::State& state) {
  World world;
  auto session = world.dispatcher->NewSession();
  const std::vector<emulator::Trap> traps = MakeTrapMix();
  // Warm up: first SHADOW accesses allocate each vCPU's table once.
  for (const auto& t : traps) session->Handle(t);
  const uint64_t allocs_before = HeapAllocations();
  size_t i = 0;
  for (auto _ : state) {
    emulator::Outcome out = kBare ? session->HandleBare(traps[i]) : session->Handle(traps[i]);
    benchmark::DoNotOptimize(out);
    i = (i + 1) & (traps.size() - 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["heap_allocs"] = static_cast<double>(HeapAllocations() - allocs_before);
}

void BM_DispatchMix(benchmark::State& state) { RunMix<false>(state); }
BENCHMARK(BM_DispatchMix);

// Hooks (counters, audit, capture) compiled in and switched off...
void BM_DispatchHooksOff(benchmark::State& state) { RunMix<false>(state); }
BENCHMARK(BM_DispatchHooksOff);
// ...against the same path compiled without them.
void BM_DispatchHooksBare(benchmark::State& state) { RunMix<true>(state); }
BENCHMARK(BM_DispatchHooksBare);

// RDMSR traps over policies of 10 and 10000 rules (half single, half ranges).
void BM_DispatchRules(benchmark::State& state) {
  const int rules = static_cast<int>(state.range(0));
  v1::Policy policy = MakeRulesPolicy(rules);
  World world(&policy);
  auto session = world.dispatcher->NewSession();
  std::vector<emulator::Trap> traps(4096);
  std::vector<uint32_t> probes = MakeRuleProbes(rules, 4096);
  for (size_t k = 0; k < traps.size(); ++k) {
    emulator::Trap& t = traps[k];
    t.domain = k % 4;
    t.insn[0] = 0x0f;
    t.insn[1] = 0x32;
    t.insn_len = 2;
    t.regs.gpr[emulator::kRcx] = probes[k];
  }
  const uint64_t allocs_before = HeapAllocations();
  size_t i = 0;
  for (auto _ : state) {
    emulator::Outcome out = session->Handle(traps[i]);
    benchmark::DoNotOptimize(out);
    i = (i + 1) & (traps.size() - 1);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["heap_allocs"] = static_cast<double>(HeapAllocations() - allocs_before);
}
BENCHMARK(BM_DispatchRules)->Arg(10)->Arg(10000);

}  // namespace
}  // namespace pvemu::bench
