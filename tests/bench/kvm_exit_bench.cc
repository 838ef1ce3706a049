// The KVM data plane's decision alone, on this machine's CPU without a
// guest: one RDMSR exit written into a kvm_run buffer and answered through
// kvm::Vcpu::HandleExit, the code pvemu_kvm_handle_exit runs. Next to the
// exit round trip measured by pvemu_kvm_bench (a real guest), it gives
// pvemu's share of an exit on hosts where that guest cannot run.
#include <linux/kvm.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "benchmark/benchmark.h"
#include "kvm/data_plane.h"

namespace pvemu::bench {
namespace {

void BM_KvmExitDecision(benchmark::State& state) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "pvemu-kvm-exit-bench.textproto").string();
  std::ofstream(path) << R"pb(default {
    unknown_msr: UNKNOWN_GP
    msr { msr: "0x1b0" read: CONST value: 0x5 write: IGNORE }
    msr { msr: "IA32_PAT" read: SHADOW write: SHADOW value: 0x0007040600070406 }
  })pb";
  kvm::DataPlaneOptions options;
  options.domain = 1;
  options.policy = path;
  auto plane = kvm::DataPlane::Open(options);
  std::filesystem::remove(path);
  if (!plane.ok()) {
    state.SkipWithError(std::string(plane.status().message()).c_str());
    return;
  }
  std::vector<uint8_t> buffer(8192);
  auto* run = reinterpret_cast<kvm_run*>(buffer.data());
  auto vcpu = (*plane)->NewVcpu(0, buffer.size());
  // Alternate a CONST read and a SHADOW read, as a guest's mix would.
  const uint32_t msrs[2] = {0x1b0, 0x277};
  size_t i = 0;
  for (auto _ : state) {
    run->exit_reason = KVM_EXIT_X86_RDMSR;
    run->msr.reason = KVM_MSR_EXIT_REASON_FILTER;
    run->msr.index = msrs[i++ & 1];
    benchmark::DoNotOptimize(vcpu->HandleExit(run));
    benchmark::DoNotOptimize(run->msr.data);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KvmExitDecision);

}  // namespace
}  // namespace pvemu::bench
