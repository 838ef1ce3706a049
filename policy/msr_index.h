// MsrIndex: the compiled map from an MSR index to a decision number, built
// once per domain snapshot and read on every RDMSR/WRMSR trap.
//
// Why not a general hash map: the trap path wants the fewest dependent
// memory loads and unpredictable branches, because with a large policy
// every load is a potential cache miss. Exact MSRs live in an open-addressing
// table of 8-byte slots (key, decision) probed linearly from a Fibonacci
// hash, so a hit is one load in the common case. Ranges are indexed by
// 256-MSR page: each page holding a range boundary points at the few
// intervals that touch it; a page with no boundary is inside a gap or inside
// a range spanning whole pages, of which a policy has few, searched in their
// own small sorted list. Lookup cost therefore does not grow with the
// number of rules.
//
// Immutable after Build; safe to read from any number of threads; Find
// allocates nothing.
#ifndef PVEMU_POLICY_MSR_INDEX_H_
#define PVEMU_POLICY_MSR_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace pvemu::policy {

class MsrIndex {
 public:
  // A closed interval of MSRs and its decision.
  struct Interval {
    uint32_t first;
    uint32_t last;
    uint32_t decision;
  };

  MsrIndex() = default;

  // `singles`: (msr, decision) with distinct MSRs. `intervals`: disjoint,
  // sorted by first. MSRs in neither map to `fallback`. Singles take
  // precedence over intervals.
  static MsrIndex Build(const std::vector<std::pair<uint32_t, uint32_t>>& singles,
                        std::vector<Interval> intervals, uint32_t fallback);

  uint32_t Find(uint32_t msr) const {
    const uint32_t single = FindSingle(msr);
    if (single != 0) return single - 1;
    if (intervals_.empty()) return fallback_;
    return FindInIntervals(msr);
  }

  // Whether `msr` is one of the singles (a rule names it on its own).
  bool HasSingle(uint32_t msr) const { return FindSingle(msr) != 0; }

  // Find, also saying where the MSR's count lives (dispatch/trap_counts.h):
  // *slot is its single's position in the exact table plus one (at most
  // slots()). For an MSR no rule names on its own it is the empty position
  // its probe stopped at, plus one, with kUnnamedSlot set: a position no
  // single holds, which a counter may lend to the first such MSR it sees
  // there. 0 when the table is empty. Same cost as Find: the position is
  // where the probe stopped.
  static constexpr uint32_t kUnnamedSlot = uint32_t{1} << 31;
  uint32_t FindCounted(uint32_t msr, uint32_t* slot) const {
    if (singles_.empty()) {
      *slot = 0;
    } else {
      for (uint32_t i = Slot(msr, singles_shift_);; i = (i + 1) & singles_mask_) {
        const Entry& e = singles_[i];
        if (e.value == 0) {
          *slot = kUnnamedSlot | (i + 1);
          break;
        }
        if (e.key == msr) {
          *slot = i + 1;
          return e.value - 1;
        }
      }
    }
    if (intervals_.empty()) return fallback_;
    return FindInIntervals(msr);
  }
  // How many slots FindCounted numbers (the exact table's size, a power of
  // two at most 8/3 of the singles; some positions hold no MSR).
  uint32_t slots() const { return static_cast<uint32_t>(singles_.size()); }
  // The single at `slot` (1..slots()): its MSR and decision; false for a
  // position that holds none.
  bool SlotSingle(uint32_t slot, uint32_t* msr, uint32_t* decision) const {
    const Entry& e = singles_[slot - 1];
    if (e.value == 0) return false;
    *msr = e.key;
    *decision = e.value - 1;
    return true;
  }

  size_t single_count() const { return single_count_; }
  // Every single as (msr, decision), sorted by MSR (off the trap path: for
  // tools such as the KVM filter, which must know every named MSR).
  std::vector<std::pair<uint32_t, uint32_t>> Singles() const;
  const std::vector<Interval>& intervals() const { return intervals_; }

  // The page size the range index works in (MSRs per page, as a shift).
  static constexpr int kPageShift = 8;

 private:
  // value 0 marks an empty slot; otherwise it holds decision + 1.
  struct Entry {
    uint32_t key;
    uint32_t value;
  };
  // A page's intervals are intervals_[begin, end); begin_plus_one 0 marks an
  // empty slot.
  struct Page {
    uint32_t key;
    uint32_t begin_plus_one;
    uint32_t end;
  };

  // The single's decision + 1, or 0.
  uint32_t FindSingle(uint32_t msr) const {
    if (singles_.empty()) return 0;
    for (uint32_t i = Slot(msr, singles_shift_);; i = (i + 1) & singles_mask_) {
      const Entry& e = singles_[i];
      if (e.value == 0) return 0;
      if (e.key == msr) return e.value;
    }
  }
  static uint32_t Slot(uint32_t key, int shift) {
    // Fibonacci hashing: MSR numbers cluster, and the multiply spreads
    // neighbours over the whole table.
    return static_cast<uint32_t>((uint64_t{key} * 0x9E3779B97F4A7C15ull) >> shift);
  }
  // Sizes an open-addressing table for n keys (at most 3/4 full: denser
  // tables miss the cache less, and a probe sequence stays in one line).
  static void Size(size_t n, uint32_t* mask, int* shift);
  uint32_t FindInIntervals(uint32_t msr) const;
  // The decision of the interval in [begin, end) holding msr, or fallback_.
  uint32_t Search(const Interval* begin, const Interval* end, uint32_t msr) const;

  std::vector<Entry> singles_;
  uint32_t singles_mask_ = 0;
  int singles_shift_ = 64;
  size_t single_count_ = 0;

  std::vector<Interval> intervals_;
  // Pages holding an interval's first or last MSR.
  std::vector<Page> pages_;
  uint32_t pages_mask_ = 0;
  int pages_shift_ = 64;
  // Intervals spanning at least one whole page, sorted: the only candidates
  // for an MSR on a page with no interval boundary.
  std::vector<Interval> wide_;
  uint32_t fallback_ = 0;
};

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_MSR_INDEX_H_
