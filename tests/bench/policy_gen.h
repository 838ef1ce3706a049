// Generated policies and probe indices shared by the policy and dispatch
// benchmarks: N rules, half single MSRs and half ranges, spread over the
// index space, and probes that hit singles, hit ranges and miss both.
#ifndef PVEMU_TESTS_BENCH_POLICY_GEN_H_
#define PVEMU_TESTS_BENCH_POLICY_GEN_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::bench {

inline v1::Policy MakeRulesPolicy(int rules) {
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

// `count` indices (a power of two), a quarter each: single hit, range hit,
// a gap between ranges, a miss near the singles; in a fixed shuffle.
inline std::vector<uint32_t> MakeRuleProbes(int rules, int count) {
  std::mt19937 rng(42);
  std::vector<uint32_t> probes;
  int singles = std::max(1, rules / 2), ranges = std::max(1, rules - rules / 2);
  for (int i = 0; i < count; ++i) {
    switch (i % 4) {
      case 0: probes.push_back(0x100000 + (rng() % singles) * 16); break;
      case 1: probes.push_back(0x40000000u + (rng() % ranges) * 64 + rng() % 32); break;
      case 2: probes.push_back(0x40000000u + (rng() % ranges) * 64 + 40); break;
      default: probes.push_back(0x100000 + (rng() % singles) * 16 + 3); break;
    }
  }
  std::shuffle(probes.begin(), probes.end(), rng);
  return probes;
}

}  // namespace pvemu::bench

#endif  // PVEMU_TESTS_BENCH_POLICY_GEN_H_
