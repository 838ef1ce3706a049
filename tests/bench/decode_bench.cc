// Decoder and trap-path benchmarks: pvemu's decoder vs Zydis (minimal mode,
// instruction only) on the shared trap mix, and one RDMSR through decode +
// emulate with a heap-allocation counter (must stay 0).
//
//   build/tests/bench/pvemu_bench --benchmark_filter='BM_Decode'
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "benchmark/benchmark.h"
#include "emulator/decoder.h"
#include "emulator/emulate.h"
#include "tests/bench/trap_mix.h"
#include "tests/bench/zydis_decoders.h"

namespace pvemu::bench {
namespace {

using emulator::Mode;

// The mix's instruction bytes packed densely (72 KiB instead of the traps'
// 750 KiB of registers), so both decoders are measured on decoding rather
// than on cache misses.
struct Packed {
  uint8_t bytes[emulator::kMaxInsnLength];
  uint8_t len;
  Mode mode;
};

const std::vector<Packed>& Mix() {
  static const std::vector<Packed>* mix = [] {
    auto* packed = new std::vector<Packed>();
    for (const emulator::Trap& t : MakeTrapMix()) {
      Packed p{};
      std::memcpy(p.bytes, t.insn, sizeof(p.bytes));
      p.len = t.insn_len;
      p.mode = t.mode;
      packed->push_back(p);
    }
    return packed;
  }();
  return *mix;
}

void BM_DecodeMix_Pvemu(benchmark::State& state) {
  const std::vector<Packed>& traps = Mix();
  size_t i = 0;
  uint64_t decoded = 0;
  for (auto _ : state) {
    const Packed& t = traps[i];
    i = (i + 1) & (kTrapMixSize - 1);
    const emulator::DecodeResult r = emulator::Decode(t.bytes, t.len, t.mode);
    benchmark::DoNotOptimize(r);
    decoded += r.ok();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["decoded_fraction"] =
      static_cast<double>(decoded) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_DecodeMix_Pvemu);

void BM_DecodeMix_Zydis(benchmark::State& state) {
  const std::vector<Packed>& traps = Mix();
  ZydisDecoder decoders[4];  // indexed by emulator::Mode
  InitZydisDecoders(decoders);
  size_t i = 0;
  uint64_t decoded = 0;
  ZydisDecodedInstruction insn;
  for (auto _ : state) {
    const Packed& t = traps[i];
    i = (i + 1) & (kTrapMixSize - 1);
    const ZyanStatus s = ZydisDecoderDecodeInstruction(
        &decoders[static_cast<int>(t.mode)], nullptr, t.bytes, t.len,
        &insn);
    benchmark::DoNotOptimize(insn);
    decoded += ZYAN_SUCCESS(s);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["decoded_fraction"] =
      static_cast<double>(decoded) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_DecodeMix_Zydis);

// The smallest Domain/Host that answers an RDMSR with a CONST rule.
class ConstDomain final : public emulator::Domain {
 public:
  ConstDomain() {
    decision_.read = emulator::MsrRead::kConst;
    decision_.value = 0x0000'0001'0000'0006;
  }
  const emulator::MsrDecision& Msr(uint32_t) const override {
    return decision_;
  }
  uint64_t* Shadow(uint32_t, uint32_t, bool* fresh) override {
    *fresh = false;
    return &shadow_;
  }
  emulator::CpuidRegs Cpuid(uint32_t, uint32_t,
                            emulator::Host&) const override {
    return {};
  }
  uint64_t GuestTsc(uint64_t host_tsc, const emulator::Host&) const override {
    return host_tsc;
  }
  bool PortAllowed(uint16_t, uint8_t) const override { return false; }
  bool vpmu() const override { return false; }

 private:
  emulator::MsrDecision decision_;
  uint64_t shadow_ = 0;
};

class NullHost final : public emulator::Host {
 public:
  pvemu::v1::Vendor vendor() const override { return pvemu::v1::INTEL; }
  absl::string_view description() const override { return "bench"; }
  uint64_t tsc_khz() const override { return 0; }
  bool ReadMsr(uint32_t, uint32_t, uint64_t*) override { return false; }
  bool WriteMsr(uint32_t, uint32_t, uint64_t) override { return false; }
  emulator::CpuidRegs Cpuid(uint32_t, uint32_t) override { return {}; }
};

void BM_DecodeEmulateRdmsrConst(benchmark::State& state) {
  ConstDomain domain;
  NullHost host;
  emulator::Trap trap;
  trap.mode = Mode::k64;
  trap.insn[0] = 0x0f;
  trap.insn[1] = 0x32;
  trap.insn_len = 2;
  trap.regs.gpr[emulator::kRcx] = 0x1b0;
  emulator::Instruction insn;
  const uint64_t before = HeapAllocations();
  for (auto _ : state) {
    emulator::Outcome out =
        emulator::DecodeAndEmulate(trap, domain, host, &insn);
    benchmark::DoNotOptimize(out);
  }
  const uint64_t allocations = HeapAllocations() - before;
  state.SetItemsProcessed(state.iterations());
  state.counters["heap_allocs"] = static_cast<double>(allocations);
  if (allocations != 0) state.SkipWithError("the trap path allocated");
}
BENCHMARK(BM_DecodeEmulateRdmsrConst);

}  // namespace
}  // namespace pvemu::bench
