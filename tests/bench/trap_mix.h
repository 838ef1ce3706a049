// A reproducible stream of traps shaped like a busy PV host's: ~40% RDMSR,
// 25% WRMSR, 15% CPUID, 10% RDTSC/RDTSCP, 5% IN/OUT, 5% other privileged
// instructions; ~20% carry prefixes; ~10% come from 32-bit guests. Shared by
// the benchmarks so decode, dispatch and replay numbers describe one mix.
//
// Also brings in HeapAllocations(): pvemu_bench links tests/heap_counter.cc,
// which counts the global operator new, so any benchmark can assert that its
// trap path does not allocate.
#ifndef PVEMU_TESTS_BENCH_TRAP_MIX_H_
#define PVEMU_TESTS_BENCH_TRAP_MIX_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "emulator/trap.h"
#include "tests/heap_counter.h"

namespace pvemu::bench {

// Heap allocations (global operator new calls) since the process started.
using ::pvemu::testing::HeapAllocations;

inline constexpr size_t kTrapMixSize = 4096;

inline std::vector<emulator::Trap> MakeTrapMix(size_t n = kTrapMixSize,
                                               uint64_t seed = 20240601) {
  using emulator::Mode;
  using emulator::Trap;
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint64_t k) { return rng() % k; };
  static const uint32_t kMsrs[] = {0x1b,  0x10,  0x1a0, 0x19a, 0x1b0, 0x277,
                                   0xe7,  0xe8,  0x38d, 0x6e0, 0xc0000080,
                                   0xc0000103, 0x8b, 0x3a, 0x17, 0xce};
  static const uint8_t kLegacy[] = {0x66, 0x2e, 0x3e, 0x26, 0x64, 0x65, 0xf3};
  struct Body {
    uint8_t bytes[4];
    uint8_t len;
  };
  static const Body kOthers[] = {
      {{0xf4}, 1},                   // hlt
      {{0xfa}, 1},                   // cli
      {{0xfb}, 1},                   // sti
      {{0x0f, 0x20, 0xd8}, 3},       // mov rax, cr3
      {{0x0f, 0x22, 0xe0}, 3},       // mov cr4, rax
      {{0x0f, 0x01, 0x38}, 3},       // invlpg [rax]
      {{0x0f, 0x09}, 2},             // wbinvd
      {{0x0f, 0x01, 0xd1}, 3},       // xsetbv
      {{0x0f, 0x06}, 2},             // clts
      {{0x0f, 0x33}, 2},             // rdpmc
  };
  std::vector<Trap> traps(n);
  for (size_t i = 0; i < n; ++i) {
    Trap& t = traps[i];
    t.domain = static_cast<uint32_t>(uniform(4));
    t.vcpu = static_cast<uint32_t>(uniform(8));
    t.mode = uniform(10) == 0 ? Mode::k32 : Mode::k64;
    t.cpl = 0;
    t.host_tsc = rng();
    for (auto& r : t.regs.gpr) r = rng();
    t.regs.gpr[emulator::kRcx] = kMsrs[uniform(sizeof(kMsrs) / 4)];
    t.regs.rip = 0xffffffff81000000ull + uniform(1 << 20);
    uint8_t len = 0;
    if (uniform(5) == 0) {  // ~20% with 1-3 prefixes
      const uint64_t k = 1 + uniform(3);
      for (uint64_t j = 0; j < k; ++j) {
        t.insn[len++] = kLegacy[uniform(sizeof(kLegacy))];
      }
      if (t.mode == Mode::k64 && uniform(2) == 0) t.insn[len++] = 0x48;
    }
    const uint64_t pick = uniform(100);
    auto put = [&](std::initializer_list<uint8_t> b) {
      for (uint8_t x : b) t.insn[len++] = x;
    };
    if (pick < 40) {
      put({0x0f, 0x32});
    } else if (pick < 65) {
      put({0x0f, 0x30});
    } else if (pick < 80) {
      put({0x0f, 0xa2});
      t.regs.gpr[emulator::kRax] = uniform(0x20);
    } else if (pick < 85) {
      put({0x0f, 0x31});
    } else if (pick < 90) {
      put({0x0f, 0x01, 0xf9});
    } else if (pick < 95) {
      static const uint8_t kIo[] = {0xe4, 0xe5, 0xe6, 0xe7,
                                    0xec, 0xed, 0xee, 0xef};
      const uint8_t op = kIo[uniform(8)];
      t.insn[len++] = op;
      if (op < 0xe8) t.insn[len++] = static_cast<uint8_t>(0x60 + uniform(16));
      t.regs.gpr[emulator::kRdx] = 0x3f8 + uniform(8);
    } else {
      const Body& b = kOthers[uniform(sizeof(kOthers) / sizeof(kOthers[0]))];
      std::memcpy(t.insn + len, b.bytes, b.len);
      len += b.len;
    }
    // Trap sources hand over what they fetched: up to 15 bytes at RIP.
    while (len < emulator::kMaxInsnLength && uniform(2) == 0) {
      t.insn[len++] = static_cast<uint8_t>(rng());
    }
    t.insn_len = len;
  }
  return traps;
}

}  // namespace pvemu::bench

#endif  // PVEMU_TESTS_BENCH_TRAP_MIX_H_
