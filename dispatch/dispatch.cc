#include "dispatch/dispatch.h"
#include "dispatch/dispatch_testing.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "absl/base/attributes.h"
#include "absl/functional/function_ref.h"
#include "absl/numeric/int128.h"
#include "emulator/domain.h"
#include "emulator/emulate.h"
#include "emulator/emulate_inl.h"
#include "emulator/trap_convert.h"
#include "traplog/writer.h"
#include "x86/msr_catalog.h"
#include "policy/compile.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "policy/explain.h"

namespace pvemu::dispatch {
namespace {

using emulator::MsrDecision;
using emulator::MsrRead;
using emulator::MsrWrite;

static_assert(static_cast<int>(MsrRead::kPassthrough) == v1::ReadAction::PASSTHROUGH &&
                  static_cast<int>(MsrRead::kConst) == v1::ReadAction::CONST &&
                  static_cast<int>(MsrRead::kShadow) == v1::ReadAction::SHADOW &&
                  static_cast<int>(MsrRead::kZero) == v1::ReadAction::ZERO &&
                  static_cast<int>(MsrRead::kGp) == v1::ReadAction::GP,
              "emulator::MsrRead must equal pvemu.v1.ReadAction numbers");
static_assert(static_cast<int>(MsrWrite::kPassthrough) == v1::WriteAction::PASSTHROUGH &&
                  static_cast<int>(MsrWrite::kShadow) == v1::WriteAction::SHADOW &&
                  static_cast<int>(MsrWrite::kIgnore) == v1::WriteAction::IGNORE &&
                  static_cast<int>(MsrWrite::kGp) == v1::WriteAction::GP,
              "emulator::MsrWrite must equal pvemu.v1.WriteAction numbers");

}  // namespace

// The emulator's view of one domain's compiled policy. One per session,
// pointed at the trap's domain snapshot before each trap (Reset), so a trap
// builds nothing. Final, so the emulator's template calls it directly. In
// the plain view (kCounting false) a lookup keeps nothing but its answer;
// the counting view (count_by_domain_and_msr) also keeps which MSR it was
// and its count slot (policy::DomainSnapshot::LookupCounted), for
// Count.
template <bool kCounting>
class Dispatcher::DomainView final : public emulator::Domain {
 public:
  DomainView(ShadowStore& shadow, bool allow_host_writes)
      : shadow_(shadow), allow_host_writes_(allow_host_writes) {}

  void Reset(const policy::DomainSnapshot& snap, uint32_t domain) {
    snap_ = &snap;
    domain_ = domain;
    if constexpr (kCounting) slot_ = kNoLookup;
  }

  const MsrDecision& decision() const { return decision_; }
  // The last lookup's MsrEntry::relaxed bits (a LEARN domain's would-fault
  // halves), so that marking a relaxed access needs no second lookup.
  uint8_t relaxed() const { return relaxed_; }

  const MsrDecision& Msr(uint32_t index) const override {
    if constexpr (kCounting) {
      msr_ = index;
      return Decide(snap_->LookupCounted(index, &slot_));
    } else {
      return Decide(snap_->Lookup(index));
    }
  }
  // Counting: whether Msr() ran during this trap (since Reset), which MSR,
  // and its slot (policy::DomainSnapshot::LookupCounted).
  bool LookedUp() const { return slot_ != kNoLookup; }
  uint32_t msr() const { return msr_; }
  uint32_t slot() const { return slot_; }

  uint64_t* Shadow(uint32_t vcpu, uint32_t index, bool* fresh) override {
    return shadow_.Get(domain_, vcpu, index, fresh);
  }

  emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf,
                            emulator::Host& host) const override {
    const policy::CpuidDecision* d = snap_->Cpuid(leaf, subleaf);
    if (d != nullptr && d->source == v1::CpuidEntry::CONST) {
      return {d->set[0], d->set[1], d->set[2], d->set[3]};  // no host read needed
    }
    emulator::CpuidRegs r = host.Cpuid(leaf, subleaf);
    if (d != nullptr) {
      uint32_t regs[4] = {r.eax, r.ebx, r.ecx, r.edx};
      d->Apply(regs);
      r = {regs[0], regs[1], regs[2], regs[3]};
    }
    return r;
  }

  uint64_t GuestTsc(uint64_t host_tsc, const emulator::Host& host) const override {
    const policy::TscConfig& tsc = snap_->tsc();
    switch (tsc.mode) {
      case v1::TscPolicy::OFFSET:
        return host_tsc + static_cast<uint64_t>(tsc.offset);
      case v1::TscPolicy::EMULATED: {
        const uint64_t host_khz = host.tsc_khz();
        if (host_khz == 0 || tsc.frequency_khz == 0) {
          return host_tsc + static_cast<uint64_t>(tsc.offset);
        }
        // 128-bit product: a 64-bit TSC times a kHz ratio overflows 64 bits.
        absl::uint128 scaled = absl::uint128(host_tsc) * tsc.frequency_khz / host_khz;
        return absl::Uint128Low64(scaled) + static_cast<uint64_t>(tsc.offset);
      }
      default:
        return host_tsc;
    }
  }

  bool PortAllowed(uint16_t port, uint8_t width) const override {
    return snap_->PortAllowed(port, width);
  }

  bool vpmu() const override { return snap_->vpmu(); }


 private:
  const MsrDecision& Decide(const policy::MsrEntry& e) const {
    // Same numbering (static_asserts above); unspecified (0) reads as #GP.
    decision_.read = static_cast<MsrRead>(e.read);
    decision_.write = static_cast<MsrWrite>(e.write);
    decision_.drop_reserved = e.drop_reserved;
    decision_.host_write_allowed = e.allow_host_write && allow_host_writes_;
    decision_.audit = e.audit;
    decision_.unknown = e.unknown;
    decision_.value = e.value;
    decision_.value_from_host = !e.has_value;
    decision_.writable_mask = e.writable_mask;
    relaxed_ = e.relaxed;
    return decision_;
  }

  const policy::DomainSnapshot* snap_ = nullptr;
  ShadowStore& shadow_;
  uint32_t domain_ = 0;
  const bool allow_host_writes_;
  mutable MsrDecision decision_;  // Msr()'s answer, valid until the next call
  mutable uint8_t relaxed_ = 0;
  // Counting only. No slot LookupCounted gives has every bit set.
  static constexpr uint32_t kNoLookup = ~uint32_t{0};
  mutable uint32_t msr_ = 0;
  mutable uint32_t slot_ = kNoLookup;
};

// One session's counters: its tables, written only by its thread (relaxed
// stores, no read-modify-write), read by Stats() and CountsByKey() from any
// thread until the session ends and they are folded into the sums.
struct Dispatcher::Session::Counters {
  // Indexed by OutcomeKind (1..4, masked to stay in bounds); the trap count
  // is their sum, so a trap costs one counter update. Always on (Stats()),
  // in `tables` instead when it is there (AddCounters).
  std::atomic<uint64_t> by_kind[8] = {};
  std::atomic<uint64_t> decode_errors{0};
  // Only with count_by_domain_and_msr (tens of KiB a session).
  std::unique_ptr<TrapCountTables> tables;
  // Accesses learning domains made that ENFORCE would fault, by LearnedKey
  // (a few KiB a session, written only by a learning domain's traps).
  CountTable<8> learned;
};

namespace {

// Learned keys: kUsed | domain << 39 | insn << 34 | log2(width) << 32 | index.
// Domains from 2^24 up count only in the overflow buckets (by insn).
constexpr uint64_t kLearnedKeyDomains = uint64_t{1} << 24;
uint64_t LearnedKey(uint32_t domain, emulator::InsnKind insn, uint8_t width, uint32_t index) {
  const uint64_t wlog = width >= 4 ? 2 : width >= 2 ? 1 : 0;
  return CountTable<8>::kUsed | uint64_t{domain} << 39 | uint64_t{static_cast<uint8_t>(insn)} << 34 |
         wlog << 32 | index;
}
void DecodeLearnedKey(uint64_t key, LearnedAccess* a) {
  a->domain = static_cast<uint32_t>((key & ~CountTable<8>::kUsed) >> 39);
  a->insn = static_cast<emulator::InsnKind>((key >> 34) & 31);
  const uint32_t wlog = (key >> 32) & 3;
  const bool port = a->insn == emulator::InsnKind::kIn || a->insn == emulator::InsnKind::kOut;
  a->width = port ? static_cast<uint8_t>(1u << wlog) : 0;
  a->index = static_cast<uint32_t>(key);
  a->write = a->insn == emulator::InsnKind::kWrmsr || a->insn == emulator::InsnKind::kOut;
}

}  // namespace

namespace {
void Bump(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
void AddOutcome(emulator::OutcomeKind k, uint64_t n, TrapStats* s) {
  switch (k) {
    case emulator::OutcomeKind::kCompleted: s->completed += n; break;
    case emulator::OutcomeKind::kException: s->exceptions += n; break;
    case emulator::OutcomeKind::kUnhandled: s->unhandled += n; break;
    case emulator::OutcomeKind::kDeviceIo: s->device_io += n; break;
  }
}
// A session's trap counts. A counting session counts each trap once, in its
// tables by (domain, instruction, outcome), and not again in by_kind: the
// totals are the tables' sums (an undecodable trap is a decode error).
void AddCounters(const std::atomic<uint64_t> (&by_kind)[8],
                 const std::atomic<uint64_t>& decode_errors, const TrapCountTables* tables,
                 TrapStats* s) {
  for (int k = 1; k <= 4; ++k) {
    AddOutcome(static_cast<emulator::OutcomeKind>(k), by_kind[k].load(std::memory_order_relaxed),
               s);
  }
  s->decode_errors += decode_errors.load(std::memory_order_relaxed);
  if (tables == nullptr) return;
  tables->ForEachKind([s](uint64_t, int insn, emulator::OutcomeKind outcome, uint64_t n) {
    AddOutcome(outcome, n, s);
    if (insn == TrapCountTables::kUndecodable) s->decode_errors += n;
  });
}
}  // namespace

Dispatcher::Dispatcher(const policy::Store& store, emulator::Host& host, AuditHub* audit,
                       DispatchOptions options)
    : store_(store), host_(host), options_(options) {
  // A fresh set has room for it.
  if (audit != nullptr) (void)observers_.Add(audit);
}

Dispatcher::~Dispatcher() = default;

std::unique_ptr<Dispatcher::Session> Dispatcher::NewSession() { return NewSession(host_); }

std::unique_ptr<Dispatcher::Session> Dispatcher::NewSession(emulator::Host& host) {
  auto counters = std::make_unique<Session::Counters>();
  if (options_.count_by_domain_and_msr) counters->tables = std::make_unique<TrapCountTables>();
  Session::Counters* raw = counters.get();
  {
    absl::MutexLock lock(&mu_);
    counters_.push_back(std::move(counters));
  }
  return std::unique_ptr<Session>(new Session(this, raw, host));
}

TrapStats Dispatcher::Stats() const {
  absl::MutexLock lock(&mu_);
  TrapStats s = retired_stats_;
  for (const auto& c : counters_) AddCounters(c->by_kind, c->decode_errors, c->tables.get(), &s);
  s.traps = s.completed + s.exceptions + s.unhandled + s.device_io;
  return s;
}

Dispatcher::Session::Session(Dispatcher* owner, Counters* counters, emulator::Host& host)
    : owner_(owner),
      host_(host),
      reader_(owner->store_),
      counters_(counters),
      tables_(counters->tables.get()),
      count_detail_(owner->options_.count_by_domain_and_msr),
      view_(count_detail_ ? std::unique_ptr<emulator::Domain>(new DomainView<true>(
                                owner->shadow_, owner->options_.allow_host_writes))
                          : std::unique_ptr<emulator::Domain>(new DomainView<false>(
                                owner->shadow_, owner->options_.allow_host_writes))) {}

Dispatcher::Session::~Session() { owner_->Retire(counters_); }

void Dispatcher::Retire(Session::Counters* counters) {
  std::shared_ptr<const policy::Snapshot> snapshot = store_.Current();
  absl::MutexLock lock(&mu_);
  AddCounters(counters->by_kind, counters->decode_errors, counters->tables.get(), &retired_stats_);
  counters->learned.ForEach([&](uint64_t key, uint64_t n) { retired_learned_[key] += n; },
                            [](uint32_t, uint64_t) {});
  if (counters->tables != nullptr) {
    AddTables(*counters->tables, *snapshot, &retired_domains_, &retired_kinds_, &retired_msrs_);
  }
  counters_.erase(std::find_if(counters_.begin(), counters_.end(),
                               [&](const auto& c) { return c.get() == counters; }));
}

void Dispatcher::AddTables(const TrapCountTables& tables, const policy::Snapshot& snapshot,
                           absl::flat_hash_set<uint32_t>* domains, KindSums* kinds,
                           MsrSums* msrs) const {
  // A domain kept apart, or kOtherDomain past the bound.
  const auto domain_key = [&](uint32_t domain) -> uint64_t {
    if (domains == nullptr || domains->contains(domain)) return domain;
    if (domains->size() >= kMaxRetiredDomains) return kOtherDomain;
    domains->insert(domain);
    return domain;
  };
  tables.ForEachKind([&](uint64_t domain, int insn, emulator::OutcomeKind outcome, uint64_t n) {
    const uint64_t key = domain == kOtherDomain ? kOtherDomain : domain_key(static_cast<uint32_t>(domain));
    (*kinds)[KindKey(key, insn, outcome)] += n;
  });
  struct Access {
    uint32_t domain, msr, code;
    uint64_t count;
  };
  std::vector<Access> accesses;
  std::vector<std::pair<uint32_t, uint64_t>> overflow;  // (code, count)
  // The slots and the by-key table in one consistent read: the session's
  // thread may be folding the one into the other (TrapCountTables::layout_seq).
  for (;;) {
    accesses.clear();
    overflow.clear();
    const uint32_t seq = tables.layout_seq.load(std::memory_order_acquire);
    if ((seq & 1) != 0) continue;
    tables.msrs.ForEach(
        [&](uint64_t key, uint64_t n) {
          Access a{0, 0, 0, n};
          TrapCountTables::DecodeMsr(key, &a.domain, &a.msr, &a.code);
          accesses.push_back(a);
        },
        [&](uint32_t code, uint64_t n) { overflow.emplace_back(code, n); });
    tables.ForEachSlot([&](uint32_t, uint32_t domain, uint32_t msr, uint32_t code,
                           emulator::OutcomeKind, uint64_t n) {
      if (domain < TrapCountTables::kMsrKeyDomains) {
        accesses.push_back(Access{domain, msr, code, n});
      } else {
        overflow.emplace_back(code, n);
      }
    });
    std::atomic_thread_fence(std::memory_order_acquire);
    if (tables.layout_seq.load(std::memory_order_relaxed) == seq) break;
  }
  for (const auto& [code, n] : overflow) {
    bool write = false;
    const MsrAction action = TrapCountTables::DecodeMsrAction(code, &write);
    (*msrs)[MsrKey(kOtherDomain, kOtherMsr, write, action)] += n;
  }
  // "The first seen" in MSR order, so that one call admits the same MSRs
  // whatever the order of the table's slots.
  std::sort(accesses.begin(), accesses.end(), [](const Access& x, const Access& y) {
    return std::tie(x.domain, x.msr, x.code) < std::tie(y.domain, y.msr, y.code);
  });
  for (const Access& a : accesses) {
    const uint64_t domain = domain_key(a.domain);
    uint64_t msr = kOtherMsr;
    if (domain != kOtherDomain) {
      absl::flat_hash_set<uint32_t>& admitted = admitted_[a.domain];
      if (snapshot.ForDomain(a.domain).NamesMsr(a.msr) || admitted.contains(a.msr)) {
        msr = a.msr;
      } else if (admitted.size() < kMaxOtherMsrs) {
        admitted.insert(a.msr);
        msr = a.msr;
      }
    }
    bool write = false;
    const MsrAction action = TrapCountTables::DecodeMsrAction(a.code, &write);
    (*msrs)[MsrKey(domain, msr, write, action)] += a.count;
  }
}

Dispatcher::Counts Dispatcher::CountsByKey() const {
  std::shared_ptr<const policy::Snapshot> snapshot = store_.Current();
  KindSums kinds;
  MsrSums msrs;
  {
    absl::MutexLock lock(&mu_);
    kinds = retired_kinds_;
    msrs = retired_msrs_;
    for (const auto& c : counters_) {
      if (c->tables != nullptr) AddTables(*c->tables, *snapshot, nullptr, &kinds, &msrs);
    }
  }
  const auto domain_of = [](uint64_t key) {
    return key == kOtherDomain ? std::nullopt : std::optional<uint32_t>(static_cast<uint32_t>(key));
  };
  Counts out;
  for (const auto& [key, n] : kinds) {
    KindCount k;
    k.domain = domain_of(std::get<0>(key));
    k.insn = std::get<1>(key);
    k.outcome = std::get<2>(key);
    k.count = n;
    out.kinds.push_back(k);
  }
  for (const auto& [key, n] : msrs) {
    const auto& [domain, msr, write, action] = key;
    out.msrs.push_back(MsrCount{domain_of(domain), domain_of(msr), write, action, n});
  }
  // nullopt ("other") sorts last.
  const auto rank = [](const std::optional<uint32_t>& v) {
    return v.has_value() ? uint64_t{*v} : kOtherDomain;
  };
  std::sort(out.kinds.begin(), out.kinds.end(), [&](const KindCount& x, const KindCount& y) {
    return std::make_tuple(rank(x.domain), x.insn, x.outcome) <
           std::make_tuple(rank(y.domain), y.insn, y.outcome);
  });
  std::sort(out.msrs.begin(), out.msrs.end(), [&](const MsrCount& x, const MsrCount& y) {
    return std::make_tuple(rank(x.domain), rank(x.msr), x.write, x.action) <
           std::make_tuple(rank(y.domain), rank(y.msr), y.write, y.action);
  });
  return out;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline const Dispatcher::Session::CachedDomain&
Dispatcher::Session::ForDomain(const policy::Snapshot& snapshot, uint32_t domain) {
  if (domain_cache_generation_ != reader_.generation()) [[unlikely]] {
    for (CachedDomain& c : domain_cache_) c = CachedDomain{};
    domain_cache_generation_ = reader_.generation();
    // Count slots are laid out per generation: the old ones move to the
    // by-key table (bounded work, no allocation, once per edit).
    if (count_detail_) tables_->FoldSlots();
  }
  CachedDomain& slot = domain_cache_[domain & (kDomainCacheSize - 1)];
  if (slot.snap == nullptr || slot.domain != domain) [[unlikely]] {
    slot.domain = domain;
    slot.snap = &snapshot.ForDomain(domain);
    slot.learning = slot.snap->learning();
    if (count_detail_) {
      slot.block = static_cast<uint16_t>(tables_->BlockFor(domain));
      domain_slots_[domain & (kDomainCacheSize - 1)] = LayOutSlots(slot.block, *slot.snap);
    }
  }
  return slot;
}

std::atomic<uint64_t>* Dispatcher::Session::LayOutSlots(uint32_t block,
                                                        const policy::DomainSnapshot& snap) {
  return tables_->SlotsFor(block, snap.count_slots(), [&](uint32_t s) -> uint64_t {
    uint32_t msr = 0;
    const policy::MsrEntry* e = nullptr;
    if (!snap.SlotMsr(s, &msr, &e)) return 0;
    emulator::MsrDecision d;
    d.read = static_cast<MsrRead>(e->read);
    d.write = static_cast<MsrWrite>(e->write);
    d.unknown = e->unknown;
    return TrapCountTables::SlotMeta(
        msr, TrapCountTables::MsrCode(false, d, (e->relaxed & policy::MsrEntry::kRelaxedRead) != 0),
        TrapCountTables::MsrCode(true, d, (e->relaxed & policy::MsrEntry::kRelaxedWrite) != 0));
  });
}

namespace {

// How many (domain, MSR, access) first accesses the process logs.
constexpr size_t kMaxFirstAccessLogs = 4096;

// The process's first-access log: which (domain, MSR, access) it named, and
// whether it has stopped (at its bound, or when a session's count table can
// no longer tell a first from a repeat).
struct FirstAccessLog {
  absl::Mutex mu;
  absl::flat_hash_set<uint64_t> logged ABSL_GUARDED_BY(mu);
  bool stopped ABSL_GUARDED_BY(mu) = false;
};
FirstAccessLog& TheFirstAccessLog() {
  static auto* state = new FirstAccessLog();
  return *state;
}

// Says once per process that the first-access log stopped, and why.
ABSL_ATTRIBUTE_NOINLINE void StopFirstAccessLog(const std::function<void(absl::string_view)>& log,
                                                absl::string_view why) {
  if (!log) return;
  FirstAccessLog& state = TheFirstAccessLog();
  size_t logged = 0;
  {
    absl::MutexLock lock(&state.mu);
    if (state.stopped) return;
    state.stopped = true;
    logged = state.logged.size();
  }
  log(absl::StrFormat("%s (%zu logged): %s", DispatchOptions::kFirstAccessLogStopped, logged, why));
}

// Logs, once per process, the first access of (domain, MSR, access) that a
// GP rule or the unknown-MSR mode decided. Off the trap's fast path: only
// when a session's count table takes a new key.
ABSL_ATTRIBUTE_NOINLINE void LogFirstAccess(const std::function<void(absl::string_view)>& log,
                                            const policy::Snapshot& snapshot, uint32_t domain,
                                            uint32_t msr, bool write,
                                            const emulator::MsrDecision& decision,
                                            absl::FunctionRef<uint64_t()> rip) {
  bool decoded_write = false;
  const MsrAction action =
      TrapCountTables::DecodeMsrAction(TrapCountTables::MsrCode(write, decision), &decoded_write);
  const bool unknown = action == MsrAction::kUnknownGp || action == MsrAction::kUnknownRelaxed;
  if (!unknown && action != MsrAction::kGp) return;
  if (!log) return;
  FirstAccessLog& state = TheFirstAccessLog();
  bool at_bound = false;
  {
    absl::MutexLock lock(&state.mu);
    if (state.stopped) return;
    const uint64_t key = uint64_t{domain} << 33 | uint64_t{msr} << 1 | uint64_t{write};
    if (state.logged.contains(key)) return;
    at_bound = state.logged.size() == kMaxFirstAccessLogs;
    if (!at_bound) state.logged.insert(key);
  }
  if (at_bound) {
    StopFirstAccessLog(log, "the process logs at most that many");
    return;
  }
  std::string rule = "unknown_msr";
  if (!unknown) {
    const policy::Explanation e = policy::ExplainMsr(
        snapshot, domain, msr, write ? std::optional<uint64_t>(0) : std::nullopt);
    rule = e.source.empty() ? e.layer : absl::StrCat(e.source, " (", e.layer, ")");
  }
  const absl::string_view name = x86::MsrName(msr);
  log(absl::StrFormat(
      "first %s of MSR 0x%x%s%s%s by domain %u: %s by %s at rip 0x%llx; repeats are only counted",
      write ? "write" : "read", msr, name.empty() ? "" : " (", name, name.empty() ? "" : ")",
      domain, MsrActionName(action), rule, static_cast<unsigned long long>(rip())));
}

}  // namespace

void Dispatcher::Session::NoteLearning(const policy::Snapshot& snapshot,
                                       const policy::DomainSnapshot& snap,
                                       const emulator::Trap& trap,
                                       const emulator::Instruction& decoded,
                                       uint8_t entry_relaxed, emulator::Outcome* out) {
  // Privilege faults and host faults are not the policy's: only a completed
  // access (or one handed to the device model) can have been relaxed.
  if (out->kind != emulator::OutcomeKind::kCompleted &&
      out->kind != emulator::OutcomeKind::kDeviceIo) {
    return;
  }
  uint32_t index = 0;
  uint8_t width = 0;
  switch (decoded.kind) {
    case emulator::InsnKind::kRdmsr:
    case emulator::InsnKind::kWrmsr: {
      index = static_cast<uint32_t>(trap.regs.gpr[emulator::kRcx]);
      // A completed RDMSR/WRMSR looked its MSR up during this trap.
      const uint8_t relaxed = entry_relaxed;
      const bool write = decoded.kind == emulator::InsnKind::kWrmsr;
      const bool was_fault =
          write ? (relaxed & policy::MsrEntry::kRelaxedWrite) != 0 ||
                      ((relaxed & policy::MsrEntry::kRelaxedReserved) != 0 && out->reserved_dropped)
                : (relaxed & policy::MsrEntry::kRelaxedRead) != 0;
      if (!was_fault) return;
      break;
    }
    case emulator::InsnKind::kIn:
    case emulator::InsnKind::kOut:
      index = out->msr_or_port;
      width = static_cast<uint8_t>(decoded.operand_size / 8);
      if (snap.EnforcedPortAllowed(index, width)) return;
      break;
    default:
      return;
  }
  out->relaxed = true;
  const uint64_t key = LearnedKey(trap.domain, decoded.kind, width, index);
  if (trap.domain >= kLearnedKeyDomains) [[unlikely]] {
    counters_->learned.CountOverflow(static_cast<uint32_t>(decoded.kind));
    return;
  }
  if (!counters_->learned.Bump(key, static_cast<uint32_t>(decoded.kind))) return;
  // This session's first: the dispatcher keeps the first of all sessions.
  LearnedAccess first;
  DecodeLearnedKey(key, &first);
  first.rip = FirstAccessRip(trap);
  if (width == 0) {
    const policy::Explanation e = policy::ExplainEnforcedMsr(
        snapshot, trap.domain, index, first.write ? std::optional<uint64_t>(0) : std::nullopt);
    first.rule = e.source.empty() ? e.layer : absl::StrCat(e.source, " (", e.layer, ")");
    first.enforcing = "#GP(0)";
    first.given = first.write ? "IGNORE" : "ZERO";
  } else {
    first.rule = absl::StrFormat("io_port (no range of domain %u grants %#x-%#x)", trap.domain,
                                 index, index + width - 1);
    first.enforcing = "FLOAT";
    first.given = out->kind == emulator::OutcomeKind::kDeviceIo ? "DEVICE" : "HOST";
  }
  owner_->NoteFirstLearned(key, std::move(first));
}

void Dispatcher::NoteFirstLearned(uint64_t key, LearnedAccess first) {
  {
    absl::MutexLock lock(&mu_);
    if (learned_firsts_.contains(key)) return;
    if (learned_firsts_.size() >= kMaxLearnedFirsts) return;
    learned_firsts_.emplace(key, first);
  }
  if (!options_.log) return;
  const bool port = first.width != 0;
  options_.log(absl::StrFormat(
      "learning: first %s of %s %#x%s by domain %u: %s enforces %s, answered %s; at rip %#x",
      emulator::KindMnemonic(first.insn), port ? "port" : "MSR", first.index,
      port ? absl::StrCat(" (", first.width, " byte", first.width == 1 ? "" : "s", ")") : "",
      first.domain, first.rule, first.enforcing, first.given, first.rip));
}

std::vector<LearnedAccess> Dispatcher::Learned() const {
  absl::flat_hash_map<uint64_t, uint64_t> counts;
  std::vector<LearnedAccess> out;
  {
    absl::MutexLock lock(&mu_);
    counts = retired_learned_;
    for (const auto& c : counters_) {
      c->learned.ForEach([&](uint64_t key, uint64_t n) { counts[key] += n; },
                         [](uint32_t, uint64_t) {});
    }
    for (const auto& [key, n] : counts) {
      auto first = learned_firsts_.find(key);
      LearnedAccess a = first != learned_firsts_.end() ? first->second : LearnedAccess{};
      DecodeLearnedKey(key, &a);
      a.count = n;
      out.push_back(std::move(a));
    }
  }
  std::sort(out.begin(), out.end(), [](const LearnedAccess& x, const LearnedAccess& y) {
    return std::make_tuple(x.domain, x.insn, x.index, x.width) <
           std::make_tuple(y.domain, y.insn, y.index, y.width);
  });
  return out;
}

void Dispatcher::Session::CountMsrDetail(const policy::Snapshot& snapshot,
                                         const emulator::Trap& trap, bool write,
                                         const emulator::Outcome& out,
                                         const CachedDomain& cached) {
  TrapCountTables& tables = *tables_;
  DomainView<true>& view = static_cast<DomainView<true>&>(*view_);
  const uint8_t entry_relaxed =
      view.relaxed() & (write ? policy::MsrEntry::kRelaxedWrite : policy::MsrEntry::kRelaxedRead);
  std::atomic<uint64_t>* const slots = domain_slots_[&cached - domain_cache_];
  const uint32_t slot = view.slot() & ~policy::MsrIndex::kUnnamedSlot;
  // A slot's counter is also the trap's count by kind (kCountersPerSlot).
  uint32_t counter = 0;
  bool at_slot = slot != 0 && slots != nullptr && out.relaxed == (entry_relaxed != 0) &&
                 TrapCountTables::SlotCounter(slot, write, out.kind, &counter);
  if (at_slot && (view.slot() & policy::MsrIndex::kUnnamedSlot) != 0) {
    // A position no rule names: this MSR's if it is free or already lent to
    // it (TrapCountTables::LentTo), with the codes a named slot's layout
    // would give it.
    std::atomic<uint64_t>& meta = tables.MetaAt(slots, slot);
    const uint64_t m = meta.load(std::memory_order_relaxed);
    if (m == 0) {
      const emulator::MsrDecision& d = view.decision();
      meta.store(TrapCountTables::SlotMeta(
                     view.msr(),
                     TrapCountTables::MsrCode(false, d,
                                              (view.relaxed() & policy::MsrEntry::kRelaxedRead) != 0),
                     TrapCountTables::MsrCode(true, d,
                                              (view.relaxed() & policy::MsrEntry::kRelaxedWrite) != 0)),
                 std::memory_order_relaxed);
    } else {
      at_slot = TrapCountTables::LentTo(m, view.msr());
    }
  }
  if (at_slot) {
    // Count counts a slot in line but for its first count this generation
    // and a learning domain's accesses. Release: a reader that sees the
    // count sees a lent slot's meta.
    std::atomic<uint64_t>& c = slots[counter];
    const uint64_t n = c.load(std::memory_order_relaxed);
    c.store(n + 1, std::memory_order_release);
    if (n != 0) return;
    // This generation's first: the session's first unless an earlier
    // generation's count was folded under the same key.
    const uint32_t code = TrapCountTables::MsrCode(write, view.decision(), out.relaxed);
    if (tables.msrs.Contains(TrapCountTables::MsrKey(trap.domain, view.msr(), code))) return;
  } else {
    // Not at a slot: counted by kind here, and by key.
    tables.CountTrap(cached.block,
                     static_cast<int>(write ? emulator::InsnKind::kWrmsr : emulator::InsnKind::kRdmsr),
                     out.kind);
    if (!tables.CountMsr(trap.domain, view.msr(), write, view.decision(), out.relaxed)) {
      // A full table counts what it cannot place as "other" and can no
      // longer tell a first access from a repeat: the log says so, once.
      if (tables.msrs.full() && !first_access_log_stopped_) [[unlikely]] {
        first_access_log_stopped_ = true;
        StopFirstAccessLog(owner_->options_.log,
                           absl::StrFormat("a trap source counted %d distinct (domain, MSR, "
                                           "access, action) keys, all it keeps apart",
                                           1 << TrapCountTables::kLog2MsrSlots));
      }
      return;
    }
  }
  // A relaxed access's first is the learning log's (NoteFirstLearned).
  if (!out.relaxed) [[unlikely]] {
    LogFirstAccess(owner_->options_.log, snapshot, trap.domain, view.msr(), write,
                   view.decision(), [&] { return FirstAccessRip(trap); });
  }
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Dispatcher::Session::Count(
    const policy::Snapshot& snapshot, const emulator::Trap& trap,
    const emulator::Instruction& decoded, emulator::DecodeError decode_error,
    const emulator::Outcome& out, const CachedDomain& cached) {
  TrapCountTables& tables = *tables_;
  DomainView<true>& view = static_cast<DomainView<true>&>(*view_);
  const bool decoded_ok = decode_error == emulator::DecodeError::kOk;
  const bool msr_access = view.LookedUp() && decoded_ok &&
                          (decoded.kind == emulator::InsnKind::kRdmsr ||
                           decoded.kind == emulator::InsnKind::kWrmsr);
  if (!msr_access) {
    // The trap's one count by (domain, instruction, outcome): it is also its
    // count in Stats(), so a counting trap bumps nothing else for it.
    tables.CountTrap(cached.block,
                     decoded_ok ? static_cast<int>(decoded.kind) : TrapCountTables::kUndecodable,
                     out.kind);
    return;
  }
  const bool write = decoded.kind == emulator::InsnKind::kWrmsr;
  // A named MSR whose answer is its entry's, after its first count: one load
  // and one store at its slot's counter for the access and outcome, which
  // is also the trap's count by kind (TrapCountTables::kCountersPerSlot); an
  // MSR no rule names, the same at the free slot its look-up stopped at once
  // that slot is lent to it (one more load). The rest (a first count, a slot
  // lent to another MSR, a learning domain's access) out of line.
  std::atomic<uint64_t>* const slots = domain_slots_[&cached - domain_cache_];
  const uint32_t slot = view.slot() & ~policy::MsrIndex::kUnnamedSlot;
  uint32_t counter = 0;
  if (slot != 0 && slots != nullptr && !out.relaxed && view.relaxed() == 0 &&
      TrapCountTables::SlotCounter(slot, write, out.kind, &counter)) [[likely]] {
    if ((view.slot() & policy::MsrIndex::kUnnamedSlot) == 0 ||
        TrapCountTables::LentTo(tables.MetaAt(slots, slot).load(std::memory_order_relaxed),
                                view.msr())) {
      std::atomic<uint64_t>& c = slots[counter];
      const uint64_t n = c.load(std::memory_order_relaxed);
      if (n != 0) [[likely]] {
        c.store(n + 1, std::memory_order_relaxed);
        return;
      }
    }
  }
  CountMsrDetail(snapshot, trap, write, out, cached);
}

template <bool kObservers, bool kHeld>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline emulator::Outcome Dispatcher::Session::HandleImpl(
    const emulator::Trap& trap, emulator::Instruction* insn, emulator::DecodeError* error) {
  // Every feature that is off costs this one test, which always predicts:
  // the breakdown by domain, instruction and MSR (CountsByKey, /metrics;
  // fixed for the session) and, compiled in, the observers (audit,
  // capture). An OR of the switches, so that it is one branch, not one each.
  const int observers = kObservers ? owner_->observers_.active_count() : 0;
  if ((observers | count_detail_) != 0) [[unlikely]] {
    if (observers != 0) return HandleObserved<kHeld>(trap, insn, error);
    // The counting copy of the path stays in line: --metrics runs it on every trap.
    return HandleWith<false, kHeld, true>(trap, insn, error);
  }
  return HandleWith<false, kHeld, false>(trap, insn, error);
}

template <bool kHeld>
emulator::Outcome Dispatcher::Session::HandleObserved(const emulator::Trap& trap,
                                                      emulator::Instruction* insn,
                                                      emulator::DecodeError* error) {
  if (count_detail_) return HandleWith<true, kHeld, true>(trap, insn, error);
  return HandleWith<true, kHeld, false>(trap, insn, error);
}

template <bool kObservers, bool kHeld, bool kCounting>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline emulator::Outcome Dispatcher::Session::HandleWith(
    const emulator::Trap& trap, emulator::Instruction* insn, emulator::DecodeError* error) {
  const policy::Snapshot& snapshot = kHeld ? reader_.Held() : reader_.Get();
  const CachedDomain& cached = ForDomain(snapshot, trap.domain);
  DomainView<kCounting>& view = static_cast<DomainView<kCounting>&>(*view_);
  view.Reset(*cached.snap, trap.domain);
  // Decoded in place into the caller's Instruction when it wants one.
  emulator::Instruction local;
  emulator::Instruction& decoded = insn != nullptr ? *insn : local;
  emulator::DecodeError decode_error = emulator::DecodeError::kOk;
  emulator::Outcome out =
      emulator::DecodeAndEmulateWith(trap, view, host_, &decoded, &decode_error);
  // The trap counters are GetStats: always on; a counting session's are
  // its tables (Count).
  if constexpr (!kCounting) {
    Bump(counters_->by_kind[static_cast<int>(out.kind) & 7]);
    if (decode_error != emulator::DecodeError::kOk) [[unlikely]] Bump(counters_->decode_errors);
  }
  // LEARN: what the enforcing policy would fault is marked and counted; an
  // ENFORCE domain pays this one branch on a field beside the snapshot.
  if (cached.learning && decode_error == emulator::DecodeError::kOk) [[unlikely]] {
    NoteLearning(snapshot, *cached.snap, trap, decoded, view.relaxed(), &out);
  }
  if constexpr (kCounting) Count(snapshot, trap, decoded, decode_error, out, cached);
  // Audit (off unless a watcher listens), capture (off unless pvemud
  // --capture): active at HandleImpl's test; Notify skips one gone since.
  if constexpr (kObservers) owner_->observers_.Notify(trap, out, decoded, decode_error);
  if (error != nullptr) *error = decode_error;
  return out;
}

emulator::Outcome Dispatcher::Session::Handle(const emulator::Trap& trap,
                                              emulator::Instruction* insn,
                                              emulator::DecodeError* error) {
  return HandleImpl<true>(trap, insn, error);
}

emulator::Outcome Dispatcher::Session::HandleNextElement(const emulator::Trap& trap) {
  return HandleImpl<true, true>(trap, nullptr, nullptr);
}

emulator::Outcome DispatchTesting::HandleWithoutObservers(Dispatcher::Session& session,
                                                          const emulator::Trap& trap) {
  return session.HandleImpl<false>(trap, nullptr, nullptr);
}

void LearnedToProto(const LearnedAccess& a, v1::LearnedAccess* msg) {
  msg->set_domain(a.domain);
  msg->set_instruction(std::string(InstructionLabel(static_cast<int>(a.insn))));
  msg->set_index(a.index);
  msg->set_access(a.write ? "write" : "read");
  msg->set_width(a.width);
  msg->set_count(a.count);
  msg->set_rule(a.rule);
  msg->set_enforcing(a.enforcing);
  msg->set_given(a.given);
  msg->set_rip(a.rip);
}

void FillOutcome(const emulator::Trap& trap, const emulator::Outcome& outcome,
                 const emulator::Instruction& insn, emulator::DecodeError error,
                 uint64_t generation, v1::Outcome* msg) {
  emulator::OutcomeToProto(trap, outcome, msg);
  msg->set_generation(generation);
  if (error != emulator::DecodeError::kOk) {
    msg->set_detail(absl::StrCat(
        "decode: ",
        emulator::DecodeStatus(emulator::DecodeResult{error, 0, {}}).message()));
    return;
  }
  emulator::InstructionToProto(insn, msg->mutable_instruction());
  std::string what(emulator::Mnemonic(insn));
  if (insn.kind == emulator::InsnKind::kRdmsr || insn.kind == emulator::InsnKind::kWrmsr) {
    const uint32_t msr = static_cast<uint32_t>(trap.regs.gpr[emulator::kRcx]);
    absl::string_view name = x86::MsrName(msr);
    absl::StrAppendFormat(&what, " 0x%x", msr);
    if (!name.empty()) absl::StrAppend(&what, " (", name, ")");
  }
  const bool port_io = insn.kind == emulator::InsnKind::kIn || insn.kind == emulator::InsnKind::kOut;
  if (port_io) absl::StrAppendFormat(&what, " port 0x%x", outcome.msr_or_port);
  switch (outcome.kind) {
    case emulator::OutcomeKind::kCompleted:
      if (outcome.port_denied) {
        msg->set_detail(absl::StrCat(what, ": not in the domain's io_port ranges; ",
                                     insn.kind == emulator::InsnKind::kIn ? "reads all ones"
                                                                          : "write dropped"));
      } else if (port_io) {
        msg->set_detail(absl::StrCat(what, ": completed by the host's device"));
      } else if (outcome.write_dropped) {
        msg->set_detail(absl::StrCat(what, ": completed; write dropped"));
      } else {
        msg->set_detail(absl::StrCat(what, ": completed"));
      }
      break;
    case emulator::OutcomeKind::kDeviceIo:
      msg->set_detail(absl::StrCat(
          what, ": granted by the domain's io_port ranges; handed to the device model"));
      break;
    case emulator::OutcomeKind::kException:
      msg->set_detail(absl::StrCat(
          what, ": #", v1::Vector_Name(static_cast<v1::Vector>(outcome.vector)),
          outcome.has_error_code ? absl::StrCat("(", outcome.error_code, ")") : ""));
      break;
    case emulator::OutcomeKind::kUnhandled:
      msg->set_detail(absl::StrCat(what, ": not emulated by pvemu; the hypervisor handles it"));
      break;
  }
}

}  // namespace pvemu::dispatch
