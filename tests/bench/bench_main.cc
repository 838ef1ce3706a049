// The one main of pvemu_bench (Google Benchmark).
#include "benchmark/benchmark.h"

BENCHMARK_MAIN();
