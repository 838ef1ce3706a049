// Trap counts by (domain, instruction, outcome) and MSR accesses by (domain,
// MSR, access, action), for /metrics and `pvemuctl stats --msrs`.
//
// Each session owns one TrapCountTables, allocated with the session, of
// fixed capacity and written only by the session's thread (relaxed loads and
// stores, no read-modify-write, no lock, no allocation): trap counts in one
// block per domain (the first 32 a session sees; the block is found through
// the session's domain cache, so a trap hashes nothing), MSR accesses in an
// open-addressing table. What does not fit counts in an overflow bucket that
// renders as domain="other" (and msr="other"). Readers on other threads (a
// scrape) see each block's domain and each slot's key published with a
// release store after its first count.
#ifndef PVEMU_DISPATCH_TRAP_COUNTS_H_
#define PVEMU_DISPATCH_TRAP_COUNTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/strings/string_view.h"
#include "emulator/domain.h"
#include "emulator/instruction.h"
#include "emulator/trap.h"

namespace pvemu::dispatch {

// The action of an MSR access as the dispatcher's DomainView decided it;
// decisions of the unknown-MSR mode (no rule) are kUnknownGp/kUnknownRelaxed;
// an access a LEARN domain made that ENFORCE would #GP is kLearnRelaxed.
enum class MsrAction : uint8_t {
  kPassthrough,
  kConst,
  kShadow,
  kZero,
  kGp,
  kIgnore,
  kUnknownGp,
  kUnknownRelaxed,
  kLearnRelaxed,
};
// "PASSTHROUGH", "CONST", ..., "UNKNOWN_GP", "UNKNOWN_RELAXED", "LEARN_RELAXED".
absl::string_view MsrActionName(MsrAction action);

// Counters keyed by a 64-bit key with bit 63 set (0 marks a free slot); a
// key that finds no slot counts in overflow bucket `code` (< kCodes).
// One writer thread; any reader. The slots live inline, so that a count
// costs no pointer load beyond the table's own address.
template <int kLog2Slots>
class CountTable {
 public:
  static constexpr uint32_t kCodes = 256;
  static constexpr int kMaxProbes = 8;
  static constexpr uint64_t kUsed = uint64_t{1} << 63;  // in every key

  CountTable() = default;
  CountTable(const CountTable&) = delete;
  CountTable& operator=(const CountTable&) = delete;

  // The writer thread only. True when `key` took a new slot: its first count
  // in this table.
  bool Bump(uint64_t key, uint32_t code) {
    uint32_t i = static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> kShift);
    for (int probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & kMask) {
      Slot& s = slots_[i];
      const uint64_t k = s.key.load(std::memory_order_relaxed);
      if (k == key) {
        Increment(s.count);
        return false;
      }
      if (k == 0) {
        s.count.store(1, std::memory_order_relaxed);
        s.key.store(key, std::memory_order_release);  // readers see count >= 1
        return true;
      }
    }
    full_ = true;
    CountOverflow(code);
    return false;
  }
  void CountOverflow(uint32_t code) { Increment(overflow_[code & (kCodes - 1)]); }
  // The writer thread: whether a key has found no slot (it counted in its
  // overflow bucket).
  bool full() const { return full_; }

  // The writer thread only: adds n (> 0) to `key`'s count, as n Bumps would.
  void Add(uint64_t key, uint64_t n, uint32_t code) {
    uint32_t i = static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> kShift);
    for (int probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & kMask) {
      Slot& s = slots_[i];
      const uint64_t k = s.key.load(std::memory_order_relaxed);
      if (k == key) {
        s.count.store(s.count.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
        return;
      }
      if (k == 0) {
        s.count.store(n, std::memory_order_relaxed);
        s.key.store(key, std::memory_order_release);
        return;
      }
    }
    AddOverflow(code, n);
  }
  void AddOverflow(uint32_t code, uint64_t n) {
    std::atomic<uint64_t>& c = overflow_[code & (kCodes - 1)];
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  // The writer thread only: whether `key` has a slot.
  bool Contains(uint64_t key) const {
    uint32_t i = static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> kShift);
    for (int probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & kMask) {
      const uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
      if (k == key) return true;
      if (k == 0) return false;
    }
    return false;
  }

  // Any thread: fn(key, count) for every used slot, then overflow(code,
  // count) for every nonzero overflow bucket.
  template <typename Fn, typename OverflowFn>
  void ForEach(Fn&& fn, OverflowFn&& overflow) const {
    for (uint32_t i = 0; i <= kMask; ++i) {
      const uint64_t key = slots_[i].key.load(std::memory_order_acquire);
      if (key != 0) fn(key, slots_[i].count.load(std::memory_order_relaxed));
    }
    for (uint32_t code = 0; code < kCodes; ++code) {
      const uint64_t n = overflow_[code].load(std::memory_order_relaxed);
      if (n != 0) overflow(code, n);
    }
  }

  static void Increment(std::atomic<uint64_t>& c) {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

 private:
  struct alignas(16) Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> count{0};
  };
  static constexpr uint32_t kMask = (uint32_t{1} << kLog2Slots) - 1;
  static constexpr int kShift = 64 - kLog2Slots;
  Slot slots_[kMask + 1];
  std::atomic<uint64_t> overflow_[kCodes] = {};
  bool full_ = false;  // the writer's
};

// One session's tables and their key encodings.
struct TrapCountTables {
  // Trap counts by (instruction, outcome) for each of the first kMaxDomains
  // domains a session sees, found through the session's domain cache (no
  // hashing per trap); later domains count in the block for "other".
  static constexpr uint32_t kMaxDomains = 32;
  static constexpr int kOutcomes = 4;  // emulator::OutcomeKind 1..4
  // The instruction index for a trap that did not decode.
  static constexpr int kUndecodable = emulator::kNumInsnKinds;
  struct DomainKinds {
    std::atomic<uint64_t> counts[(kUndecodable + 1) * kOutcomes] = {};
  };
  DomainKinds domain_kinds[kMaxDomains + 1];  // [kMaxDomains]: "other"
  std::atomic<uint32_t> domain_ids[kMaxDomains] = {};
  std::atomic<uint32_t> domains_used{0};

  // Distinct (domain, MSR, access, action) keys a session holds before it
  // counts into "other".
  static constexpr int kLog2MsrSlots = 10;
  // MSR keys hold domains below this; higher ones count as "other".
  static constexpr uint64_t kMsrKeyDomains = uint64_t{1} << 26;
  static constexpr uint64_t kUsed = CountTable<kLog2MsrSlots>::kUsed;
  CountTable<kLog2MsrSlots> msrs;

  // The session's thread, once per domain and policy generation: the block
  // `domain` counts in (kMaxDomains: "other").
  uint32_t BlockFor(uint32_t domain) {
    const uint32_t used = domains_used.load(std::memory_order_relaxed);
    for (uint32_t b = 0; b < used; ++b) {
      if (domain_ids[b].load(std::memory_order_relaxed) == domain) return b;
    }
    if (used == kMaxDomains) return kMaxDomains;
    domain_ids[used].store(domain, std::memory_order_relaxed);
    domains_used.store(used + 1, std::memory_order_release);
    return used;
  }
  void CountTrap(uint32_t block, int insn, emulator::OutcomeKind outcome) {
    CountTable<kLog2MsrSlots>::Increment(domain_kinds[block].counts[KindIndex(insn, outcome)]);
  }
  static constexpr int KindIndex(int insn, emulator::OutcomeKind outcome) {
    return insn * kOutcomes + ((static_cast<int>(outcome) - 1) & 3);
  }
  // Any thread: fn(domain or kOtherDomain, insn, outcome, count) for every
  // nonzero count. An RDMSR or WRMSR counted at its slot is counted there
  // only (kCountersPerSlot): its block's counts are read with its slots
  // inside layout_seq, so that a fold moving them is never seen half done.
  static constexpr uint64_t kOtherDomain = uint64_t{1} << 32;
  template <typename Fn>
  void ForEachKind(Fn&& fn) const {
    constexpr int kKinds = (kUndecodable + 1) * kOutcomes;
    const uint32_t used = domains_used.load(std::memory_order_acquire);
    for (uint32_t b = 0; b <= kMaxDomains; ++b) {
      if (b < kMaxDomains && b >= used) continue;
      const uint64_t domain =
          b == kMaxDomains ? kOtherDomain : domain_ids[b].load(std::memory_order_relaxed);
      uint64_t counts[kKinds];
      for (;;) {
        const uint32_t seq = layout_seq.load(std::memory_order_acquire);
        if ((seq & 1) != 0) continue;
        for (int i = 0; i < kKinds; ++i) {
          counts[i] = domain_kinds[b].counts[i].load(std::memory_order_relaxed);
        }
        if (b < kMaxDomains) {
          ForEachSlotOf(b, [&](uint32_t, uint32_t code, emulator::OutcomeKind outcome, uint64_t n) {
            counts[KindIndex(SlotInsn(code), outcome)] += n;
          });
        }
        std::atomic_thread_fence(std::memory_order_acquire);
        if (layout_seq.load(std::memory_order_relaxed) == seq) break;
      }
      for (int i = 0; i < kKinds; ++i) {
        if (counts[i] != 0) {
          fn(domain, i / kOutcomes, static_cast<emulator::OutcomeKind>(i % kOutcomes + 1), counts[i]);
        }
      }
    }
  }

  // msrs: kUsed | domain << 37 | msr << 5 | code; code = write << 4 |
  // unknown << 3 | the raw action (emulator::MsrRead/MsrWrite, 1..5), or
  // kRelaxedCode for an access a learning domain's policy would fault: no
  // table, no branch on the trap path.
  static constexpr uint32_t kRelaxedCode = 7;
  static uint32_t MsrCode(bool write, const emulator::MsrDecision& d, bool relaxed = false) {
    const uint32_t action = relaxed ? kRelaxedCode
                            : write ? static_cast<uint32_t>(d.write)
                                    : static_cast<uint32_t>(d.read);
    return uint32_t{write} << 4 | uint32_t{d.unknown} << 3 | (action & 7);
  }
  // True when the session's table took a new (domain, MSR, access, action)
  // key: the first such access this session counts.
  bool CountMsr(uint32_t domain, uint32_t msr, bool write, const emulator::MsrDecision& d,
                bool relaxed = false) {
    const uint32_t code = MsrCode(write, d, relaxed);
    const uint64_t key = MsrKey(domain, msr, code);
    if (domain < kMsrKeyDomains) [[likely]] return msrs.Bump(key, code);
    msrs.CountOverflow(code);
    return false;
  }

  // A slot's four counters: (read, write) x (completed, #GP), so that the
  // count at a slot is also the trap's count by (domain, instruction,
  // outcome) and a trap makes one counting store, not two; an outcome that
  // is neither (none an MSR access has today) counts by kind and by key.
  static constexpr uint32_t kCountersPerSlot = 4;
  // The counter of `slot` (1..) for an access with this outcome; false when
  // the outcome has none.
  static bool SlotCounter(uint32_t slot, bool write, emulator::OutcomeKind outcome,
                          uint32_t* counter) {
    const uint32_t k = static_cast<uint32_t>(outcome) - 1;  // kCompleted 0, kException 1
    *counter = (slot - 1) * kCountersPerSlot + k * 2 + (write ? 1 : 0);
    return k < 2;
  }
  static emulator::OutcomeKind CounterOutcome(uint32_t counter) {
    return (counter & 2) != 0 ? emulator::OutcomeKind::kException : emulator::OutcomeKind::kCompleted;
  }
  static int SlotInsn(uint32_t code) {
    return static_cast<int>((code & 16) != 0 ? emulator::InsnKind::kWrmsr : emulator::InsnKind::kRdmsr);
  }

  static uint64_t MsrKey(uint32_t domain, uint32_t msr, uint32_t code) {
    return kUsed | uint64_t{domain} << 37 | uint64_t{msr} << 5 | code;
  }

  // --- The MSRs a rule names on its own: a count slot each, no hashing.
  // A domain's block gets, once per policy generation, a region of
  // kSlotCounters: two counters (read, write) per position of the domain's
  // exact-MSR table (policy::DomainSnapshot::LookupCounted), so that a
  // count is one load and one store at an address the lookup gave. Each
  // slot's meta says its MSR and the two action codes, so that a reader
  // needs no snapshot. At a generation change the writer folds the regions
  // into `msrs` by key (FoldSlots); readers bracket what they read with
  // layout_seq (a seqlock: odd while folding) and retry. MSRs no rule names
  // alone, domains past the arena and reserved-bit relaxations count in
  // `msrs` as before, but for the first unnamed MSR each empty position of
  // the exact table meets: it counts there as a named one does (LentTo).
  static constexpr uint32_t kSlotCounters = 16384;  // 128 KiB a counting session
  std::atomic<uint64_t> slot_counts[kSlotCounters] = {};
  // Per slot (its four counters): kUsed | read code << 42 | write code << 37 |
  // msr (codes as MsrCode gives them); 0 for a position with no MSR.
  std::atomic<uint64_t> slot_meta[kSlotCounters / kCountersPerSlot] = {};
  // Per block, its region [begin, end) in counters; end 0: none laid out.
  std::atomic<uint32_t> region_begin[kMaxDomains] = {};
  std::atomic<uint32_t> region_end[kMaxDomains] = {};
  std::atomic<uint32_t> layout_seq{0};
  uint32_t slots_used = 0;  // the writer's, in counters
  // Blocks whose domain did not fit the arena this generation (bits).
  uint64_t region_refused = 0;  // the writer's

  static uint64_t SlotMeta(uint32_t msr, uint32_t read_code, uint32_t write_code) {
    return kUsed | uint64_t{read_code & 31} << 42 | uint64_t{write_code & 31} << 37 | msr;
  }
  // The meta of slot `slot` (1..) of the region whose counters begin at
  // `counters` (what SlotsFor returned). Unsigned: a region never begins
  // before the arena, and a signed division by 4 is what GCC emits as an
  // idiv (about 40 cycles) when it lays this out as a cold block.
  std::atomic<uint64_t>& MetaAt(const std::atomic<uint64_t>* counters, uint32_t slot) {
    const size_t first = static_cast<size_t>(counters - slot_counts) / kCountersPerSlot;
    return slot_meta[first + slot - 1];
  }
  // Whether `meta` is lent to `msr`, for a slot no rule names: a position the
  // exact table leaves empty counts for the first MSR no rule names whose
  // probe stops there (MsrIndex::FindCounted); any other such MSR counts by
  // key. The writer lends it, in CountMsrDetail; a new generation's layout
  // takes it back (FoldSlots).
  static bool LentTo(uint64_t meta, uint32_t msr) {
    return (meta & kUsed) != 0 && static_cast<uint32_t>(meta) == msr;
  }
  // The writer, when the session's domain cache takes `block` in a new
  // generation: its counters (two per slot), laid out now if they were not,
  // or null (the "other" block, a domain with no named MSR, or no room).
  // meta(slot) gives SlotMeta for slot 1..slots, or 0.
  template <typename MetaFn>
  std::atomic<uint64_t>* SlotsFor(uint32_t block, uint32_t slots, MetaFn&& meta) {
    if (block >= kMaxDomains || slots == 0) return nullptr;
    const uint32_t end = region_end[block].load(std::memory_order_relaxed);
    if (end != 0) return &slot_counts[region_begin[block].load(std::memory_order_relaxed)];
    if ((region_refused >> block & 1) != 0) return nullptr;
    if (uint64_t{slots} * kCountersPerSlot > kSlotCounters - slots_used) {
      region_refused |= uint64_t{1} << block;
      return nullptr;
    }
    const uint32_t begin = slots_used;
    for (uint32_t s = 1; s <= slots; ++s) {
      slot_meta[begin / kCountersPerSlot + s - 1].store(meta(s), std::memory_order_relaxed);
    }
    slots_used += slots * kCountersPerSlot;
    region_begin[block].store(begin, std::memory_order_relaxed);
    region_end[block].store(begin + slots * kCountersPerSlot, std::memory_order_release);
    return &slot_counts[begin];
  }
  // The writer, at a generation change: every slot count moves into `msrs`
  // by key, and the arena is free for the new generation's layout.
  void FoldSlots();
  // Any thread, inside layout_seq: fn(block, domain, msr, code, outcome,
  // count) for every nonzero slot counter (a domain from kMsrKeyDomains up
  // counts as "other").
  template <typename Fn>
  void ForEachSlot(Fn&& fn) const {
    const uint32_t used = domains_used.load(std::memory_order_acquire);
    for (uint32_t b = 0; b < used && b < kMaxDomains; ++b) {
      const uint32_t domain = domain_ids[b].load(std::memory_order_relaxed);
      ForEachSlotOf(b, [&](uint32_t msr, uint32_t code, emulator::OutcomeKind outcome, uint64_t n) {
        fn(b, domain, msr, code, outcome, n);
      });
    }
  }
  // The same for block b's slots: fn(msr, code, outcome, count).
  template <typename Fn>
  void ForEachSlotOf(uint32_t b, Fn&& fn) const {
    const uint32_t end = region_end[b].load(std::memory_order_acquire);
    if (end == 0) return;
    const uint32_t begin = region_begin[b].load(std::memory_order_relaxed);
    for (uint32_t c = begin; c < end; ++c) {
      // Acquire: a lent slot's meta is stored before its first count.
      const uint64_t n = slot_counts[c].load(std::memory_order_acquire);
      if (n == 0) continue;
      const uint64_t meta = slot_meta[c / kCountersPerSlot].load(std::memory_order_relaxed);
      if (meta == 0) continue;
      const uint32_t code = static_cast<uint32_t>(meta >> ((c & 1) != 0 ? 37 : 42)) & 31;
      fn(static_cast<uint32_t>(meta), code, CounterOutcome(c - begin), n);
    }
  }

  static void DecodeMsr(uint64_t key, uint32_t* domain, uint32_t* msr, uint32_t* code) {
    *domain = static_cast<uint32_t>((key & ~kUsed) >> 37);
    *msr = static_cast<uint32_t>(key >> 5);
    *code = static_cast<uint32_t>(key & 31);
  }
  static MsrAction DecodeMsrAction(uint32_t code, bool* write);
};

// Sums over sessions, bounded for rendering (Dispatcher::Counts()).
struct KindCount {
  std::optional<uint32_t> domain;  // nullopt: "other" (a session's table was full)
  int insn = 0;                    // emulator::InsnKind, or TrapCountTables::kUndecodable
  emulator::OutcomeKind outcome = emulator::OutcomeKind::kCompleted;
  uint64_t count = 0;
};
struct MsrCount {
  std::optional<uint32_t> domain;  // nullopt: "other" (a session's table was full)
  std::optional<uint32_t> msr;     // nullopt: "other" (beyond the per-domain bound)
  bool write = false;
  MsrAction action = MsrAction::kGp;
  uint64_t count = 0;
};

// "rdmsr", ..., "mov_to_cr" (the MOV kinds apart), "undecodable".
absl::string_view InstructionLabel(int insn);
// "completed", "exception", "unhandled", "device_io".
absl::string_view OutcomeLabel(emulator::OutcomeKind kind);

// The inverses, for counts that travel as labels (a KVM data plane's
// reports to pvemud); nullopt for a label this version does not know.
std::optional<int> InstructionFromLabel(absl::string_view label);
std::optional<emulator::OutcomeKind> OutcomeFromLabel(absl::string_view label);
std::optional<MsrAction> MsrActionFromName(absl::string_view name);

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_TRAP_COUNTS_H_
