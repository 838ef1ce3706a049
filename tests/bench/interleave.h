// Side-by-side timing for ratio targets on a noisy, shared machine: run
// several variants in alternating short batches over one trap stream, so
// drift and neighbours hit all of them alike, and compare per-batch medians
// (a batch that a preemption hit is an outlier, not a trend).
//
// Rules the helper keeps, because each skews a comparison otherwise:
// - each batch takes the next traps of the stream: re-running the same
//   traps lets the second variant profit from branch history the first one
//   trained;
// - the order rotates, so every variant follows every other equally often;
// - callers give every code path the same share of batches (for example two
//   variants each), because the branch predictor learns a path in
//   proportion to the time it runs.
#ifndef PVEMU_TESTS_BENCH_INTERLEAVE_H_
#define PVEMU_TESTS_BENCH_INTERLEAVE_H_

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

#include "benchmark/benchmark.h"

namespace pvemu::bench {

// Calls run_one(variant, index) for `batch` consecutive stream indices per
// variant per benchmark iteration; returns each variant's median ns per
// call. `stream_size` must be a power of two.
template <int kVariants, typename RunOne>
std::array<double, kVariants> InterleavedMedians(benchmark::State& state, size_t stream_size,
                                                 RunOne run_one, size_t batch = 512) {
  std::array<std::vector<double>, kVariants> ns;
  for (auto& v : ns) v.reserve(1 << 16);
  size_t at = 0;
  int round = 0;
  for (auto _ : state) {
    for (int step = 0; step < kVariants; ++step) {
      const int which = (round + step) % kVariants;
      const auto start = std::chrono::steady_clock::now();
      for (size_t k = 0; k < batch; ++k) run_one(which, (at + k) & (stream_size - 1));
      ns[which].push_back(
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
              .count() /
          static_cast<double>(batch));
      at = (at + batch) & (stream_size - 1);
    }
    round = (round + 1) % kVariants;
  }
  state.SetItemsProcessed(state.iterations() * kVariants * static_cast<int64_t>(batch));
  std::array<double, kVariants> medians{};
  for (int i = 0; i < kVariants; ++i) {
    std::vector<double>& v = ns[i];
    if (v.empty()) continue;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    medians[i] = v[v.size() / 2];
  }
  return medians;
}

}  // namespace pvemu::bench

#endif  // PVEMU_TESTS_BENCH_INTERLEAVE_H_
