// MsrIndex against a brute-force reference: exact MSRs beat intervals,
// intervals are closed, everything else is the fallback, at page edges, at
// 0 and 0xffffffff, and for intervals spanning many pages.
#include "policy/msr_index.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace pvemu::policy {
namespace {

using Singles = std::vector<std::pair<uint32_t, uint32_t>>;
using Intervals = std::vector<MsrIndex::Interval>;

uint32_t Reference(const Singles& singles, const Intervals& intervals, uint32_t fallback,
                   uint32_t msr) {
  for (const auto& [m, d] : singles) {
    if (m == msr) return d;
  }
  for (const auto& r : intervals) {
    if (r.first <= msr && msr <= r.last) return r.decision;
  }
  return fallback;
}

// Every interesting MSR of a table: each boundary, its neighbours, the
// edges of the pages they are on, and the ends of the index space.
std::vector<uint32_t> Probes(const Singles& singles, const Intervals& intervals) {
  std::vector<uint32_t> p = {0, 1, 0xff, 0x100, 0xfffffffe, 0xffffffff};
  auto around = [&p](uint32_t m) {
    for (int64_t d = -2; d <= 2; ++d) {
      const int64_t v = int64_t{m} + d;
      if (v >= 0 && v <= 0xffffffffll) p.push_back(static_cast<uint32_t>(v));
    }
    p.push_back(m & ~0xffu);
    p.push_back(m | 0xffu);
  };
  for (const auto& [m, d] : singles) around(m);
  for (const auto& r : intervals) {
    around(r.first);
    around(r.last);
    p.push_back(r.first + (r.last - r.first) / 2);
  }
  return p;
}

void ExpectMatchesReference(const Singles& singles, const Intervals& intervals,
                            uint32_t fallback) {
  const MsrIndex index = MsrIndex::Build(singles, intervals, fallback);
  for (uint32_t msr : Probes(singles, intervals)) {
    ASSERT_EQ(index.Find(msr), Reference(singles, intervals, fallback, msr))
        << "msr 0x" << std::hex << msr;
  }
}

TEST(MsrIndexTest, EmptyIndexAnswersFallbackEverywhere) {
  const MsrIndex index = MsrIndex::Build({}, {}, 7);
  EXPECT_EQ(index.Find(0), 7u);
  EXPECT_EQ(index.Find(0x10), 7u);
  EXPECT_EQ(index.Find(0xffffffff), 7u);
}

TEST(MsrIndexTest, ExactMsrBeatsTheIntervalAroundIt) {
  const MsrIndex index = MsrIndex::Build({{0x810, 2}}, {{0x800, 0x8ff, 1}}, 0);
  EXPECT_EQ(index.Find(0x810), 2u);
  EXPECT_EQ(index.Find(0x80f), 1u);
  EXPECT_EQ(index.Find(0x811), 1u);
  EXPECT_EQ(index.Find(0x7ff), 0u);
  EXPECT_EQ(index.Find(0x900), 0u);
}

TEST(MsrIndexTest, IntervalSpanningManyPagesCoversPagesWithoutABoundary) {
  // 0xc0010000-0xc001ffff: the pages between its first and last page are
  // not indexed and must still be found.
  const MsrIndex index =
      MsrIndex::Build({}, {{0x10, 0x10, 3}, {0xc0010000, 0xc001ffff, 1}}, 0);
  EXPECT_EQ(index.Find(0xc0010000), 1u);
  EXPECT_EQ(index.Find(0xc0018080), 1u);
  EXPECT_EQ(index.Find(0xc001ffff), 1u);
  EXPECT_EQ(index.Find(0xc0020000), 0u);
  EXPECT_EQ(index.Find(0xc000ffff), 0u);
  EXPECT_EQ(index.Find(0x10), 3u);
}

TEST(MsrIndexTest, WholeIndexSpaceIntervalAndTheEnds) {
  ExpectMatchesReference({{0, 5}, {0xffffffff, 6}}, {{0, 0xffffffff, 1}}, 0);
  ExpectMatchesReference({}, {{0xffffff00, 0xffffffff, 1}}, 9);
}

TEST(MsrIndexTest, ManyIntervalsInOnePage) {
  Intervals intervals;
  for (uint32_t i = 0; i < 128; ++i) intervals.push_back({0x400 + 2 * i, 0x400 + 2 * i, i + 1});
  ExpectMatchesReference({}, intervals, 0);
}

TEST(MsrIndexTest, RandomTablesMatchTheReference) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    // Disjoint intervals of random widths (single MSR to many pages) placed
    // left to right with random gaps, and singles anywhere.
    Intervals intervals;
    uint64_t at = rng() % 0x1000;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n && at <= 0xffffffffu; ++i) {
      const uint64_t width = (rng() % 4 == 0) ? rng() % 0x10000 : rng() % 64;
      const uint64_t last = std::min<uint64_t>(at + width, 0xffffffffu);
      intervals.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(last),
                           static_cast<uint32_t>(i + 100)});
      at = last + 1 + rng() % (rng() % 2 ? 300 : 0x100000);
    }
    Singles singles;
    const int k = static_cast<int>(rng() % 60);
    for (int i = 0; i < k; ++i) {
      const uint32_t msr = (rng() % 2) ? rng() : static_cast<uint32_t>(rng() % 0x2000);
      bool dup = false;
      for (const auto& [m, d] : singles) dup |= m == msr;
      if (!dup) singles.push_back({msr, static_cast<uint32_t>(i + 1000)});
    }
    ExpectMatchesReference(singles, intervals, 0);
  }
}

}  // namespace
}  // namespace pvemu::policy
