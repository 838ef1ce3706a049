#include "policy/msr_index.h"

#include <algorithm>

namespace pvemu::policy {

void MsrIndex::Size(size_t n, uint32_t* mask, int* shift) {
  int bits = 3;
  while ((size_t{1} << bits) < n + n / 3) ++bits;  // at most 3/4 full
  *mask = (uint32_t{1} << bits) - 1;
  *shift = 64 - bits;
}

MsrIndex MsrIndex::Build(const std::vector<std::pair<uint32_t, uint32_t>>& singles,
                         std::vector<Interval> intervals, uint32_t fallback) {
  MsrIndex index;
  index.fallback_ = fallback;
  index.single_count_ = singles.size();
  if (!singles.empty()) {
    Size(singles.size(), &index.singles_mask_, &index.singles_shift_);
    index.singles_.assign(size_t{index.singles_mask_} + 1, Entry{0, 0});
    for (const auto& [msr, decision] : singles) {
      uint32_t i = Slot(msr, index.singles_shift_);
      while (index.singles_[i].value != 0) i = (i + 1) & index.singles_mask_;
      index.singles_[i] = Entry{msr, decision + 1};
    }
  }

  index.intervals_ = std::move(intervals);
  const std::vector<Interval>& all = index.intervals_;
  // Every page holding a boundary, with the intervals touching it.
  std::vector<uint32_t> pages;
  for (const Interval& r : all) {
    pages.push_back(r.first >> kPageShift);
    pages.push_back(r.last >> kPageShift);
    if ((r.last >> kPageShift) - (r.first >> kPageShift) >= 2) {
      // Covers the pages strictly between its first and last page, which
      // hold no boundary and so are not indexed.
      index.wide_.push_back(r);
    }
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  if (!pages.empty()) {
    Size(pages.size(), &index.pages_mask_, &index.pages_shift_);
    index.pages_.assign(size_t{index.pages_mask_} + 1, Page{0, 0, 0});
    for (uint32_t page : pages) {
      const uint32_t start = page << kPageShift;
      const uint32_t end = start | ((1u << kPageShift) - 1);
      auto begin = std::lower_bound(all.begin(), all.end(), start,
                                    [](const Interval& r, uint32_t m) { return r.last < m; });
      auto stop = std::upper_bound(all.begin(), all.end(), end,
                                   [](uint32_t m, const Interval& r) { return m < r.first; });
      uint32_t i = Slot(page, index.pages_shift_);
      while (index.pages_[i].begin_plus_one != 0) i = (i + 1) & index.pages_mask_;
      index.pages_[i] = Page{page, static_cast<uint32_t>(begin - all.begin()) + 1,
                             static_cast<uint32_t>(stop - all.begin())};
    }
  }
  return index;
}

uint32_t MsrIndex::FindInIntervals(uint32_t msr) const {
  const uint32_t page = msr >> kPageShift;
  for (uint32_t i = Slot(page, pages_shift_);; i = (i + 1) & pages_mask_) {
    const Page& p = pages_[i];
    if (p.begin_plus_one == 0) break;
    if (p.key == page) {
      const Interval* base = intervals_.data();
      return Search(base + p.begin_plus_one - 1, base + p.end, msr);
    }
  }
  if (wide_.empty()) return fallback_;
  return Search(wide_.data(), wide_.data() + wide_.size(), msr);
}

uint32_t MsrIndex::Search(const Interval* begin, const Interval* end, uint32_t msr) const {
  // The first interval ending at or after msr; a page usually has one or
  // two, so the binary search rarely loops.
  size_t n = static_cast<size_t>(end - begin);
  const Interval* base = begin;
  while (n > 1) {
    const size_t half = n / 2;
    base = base[half - 1].last < msr ? base + half : base;
    n -= half;
  }
  if (n == 1 && base->first <= msr && msr <= base->last) return base->decision;
  return fallback_;
}

std::vector<std::pair<uint32_t, uint32_t>> MsrIndex::Singles() const {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  out.reserve(single_count_);
  for (const Entry& e : singles_) {
    if (e.value != 0) out.emplace_back(e.key, e.value - 1);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace pvemu::policy
