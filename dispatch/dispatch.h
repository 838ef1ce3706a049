// The trap path: Trap → decode → the domain's compiled policy → emulate →
// Outcome, with the host for passthrough, per-vCPU shadow registers, counters
// and audit. Shared by every trap source (gRPC streams, replay, vm_event).
//
// Per trap: one acquire load to find the policy snapshot (SnapshotReader),
// the domain's compiled policy from the session's small cache, one probe of
// the MSR index; no lock, no allocation (except a vCPU's shadow table on its
// first SHADOW access). Audit and capture cost one predictable branch while
// both are off.
#ifndef PVEMU_DISPATCH_DISPATCH_H_
#define PVEMU_DISPATCH_DISPATCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "emulator/trap.h"
#include "emulator/decoder.h"
#include "emulator/host.h"
#include "policy/store.h"
#include "dispatch/audit.h"
#include "dispatch/observer.h"
#include "dispatch/shadow_store.h"
#include "dispatch/trap_counts.h"
#include "pvemu/v1/service.pb.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::dispatch {

struct DispatchOptions {
  // The daemon's half of the host-write guard: a PASSTHROUGH write reaches
  // the host only if the rule says allow_host_write AND this is true.
  bool allow_host_writes = false;
  // Trap counts by (domain, instruction, outcome) and MSR accesses by
  // (domain, MSR, access, action): CountsByKey(), /metrics, `pvemuctl stats
  // --msrs` (pvemud --metrics or --count-msrs). Off, a trap pays one
  // predictable branch for them and a session allocates no tables; Stats()
  // (the by-outcome totals) counts either way.
  bool count_by_domain_and_msr = false;
  // Where lines for the operator go, one sentence each without a program
  // prefix: the first access of a (domain, MSR, access) that a GP rule or the
  // unknown-MSR mode decided, while counting_by_domain_and_msr (the daemon
  // prints them as "pvemud: ..."). Null: not reported. Called off the fast
  // path, at most once per (domain, MSR, access) and process.
  std::function<void(absl::string_view line)> log;
  // How the one line that says the first-access log stopped begins: a
  // trap source that caps its lines must never drop that one.
  static constexpr absl::string_view kFirstAccessLogStopped = "further first accesses not logged";
};

// One access a learning domain made that its policy in ENFORCE would fault
// or deny, relaxed (policy.proto, PolicyMode LEARN): counted per (domain,
// instruction, MSR or port, width), with its first occurrence.
struct LearnedAccess {
  uint32_t domain = 0;
  emulator::InsnKind insn = emulator::InsnKind::kRdmsr;
  uint32_t index = 0;  // the MSR, or the port
  bool write = false;
  uint8_t width = 0;   // ports: bytes (1, 2, 4); MSRs: 0
  uint64_t count = 0;
  // The first one (empty when the first-access record was full).
  std::string rule;       // "FILE:LINE (layer)" of the deciding rule, or "io_port"
  std::string enforcing;  // "#GP(0)" or "FLOAT"
  std::string given;      // "ZERO", "IGNORE", "DEVICE", "HOST"
  uint64_t rip = 0;
};

struct TrapStats {
  uint64_t traps = 0;
  uint64_t completed = 0;
  uint64_t exceptions = 0;
  uint64_t unhandled = 0;
  uint64_t device_io = 0;  // handed to the trap source's device model
  uint64_t decode_errors = 0;
};

// Thread-safety: Dispatcher is thread-safe; each Session is used by one
// thread at a time (one per stream / trap-source thread).
class Dispatcher {
 public:
  // `store`, `host` and `audit` (may be null; added as an observer) must
  // outlive the dispatcher.
  Dispatcher(const policy::Store& store, emulator::Host& host, AuditHub* audit,
             DispatchOptions options);
  ~Dispatcher();

  // The emulator's view of a domain snapshot (dispatch.cc); kCounting: the
  // view that also keeps each lookup's count slot.
  template <bool kCounting>
  class DomainView;

  class Session {
   public:
    ~Session();
    // One trap, one complete outcome. `insn`/`error` (may be null) receive
    // the decoded instruction / the decode error for callers that report it.
    emulator::Outcome Handle(const emulator::Trap& trap, emulator::Instruction* insn = nullptr,
                             emulator::DecodeError* error = nullptr);
    // The next element of the instruction the last Handle() decided (a REP
    // INS/OUTS a trap source splits into elements): decided under the same
    // policy generation, even if an edit landed in between, so that every
    // element of one instruction sees one policy whole.
    emulator::Outcome HandleNextElement(const emulator::Trap& trap);
    // The policy generation the last Handle() used.
    uint64_t generation() const { return reader_.generation(); }
    // For a trap source whose traps may carry no RIP (regs.rip 0: a KVM MSR
    // or I/O exit names only the access): `rip(context)` gives the guest RIP
    // of the trap being handled. Called only when a first access is recorded (a
    // few thousand times a process at most), never per trap, so it may
    // cost a system call (KVM_GET_REGS). Null: the trap's regs.rip.
    void SetRipSource(uint64_t (*rip)(void* context), void* context) {
      rip_source_ = rip;
      rip_context_ = context;
    }

   private:
    friend class Dispatcher;
    friend struct DispatchTesting;  // dispatch/dispatch_testing.h
    struct Counters;
    Session(Dispatcher* owner, Counters* counters, emulator::Host& host);
    // kObservers false: the same path without the observer test, for the
    // benchmark that proves switched-off features cost nothing.
    // kHeld: under the snapshot the last trap used (HandleNextElement).
    template <bool kObservers, bool kHeld = false>
    emulator::Outcome HandleImpl(const emulator::Trap& trap, emulator::Instruction* insn,
                                 emulator::DecodeError* error);
    // The path while an observer is active, out of line: a watcher or a
    // capture costs a call, and the paths without one do not carry it.
    template <bool kHeld>
    ABSL_ATTRIBUTE_NOINLINE emulator::Outcome HandleObserved(const emulator::Trap& trap,
                                                             emulator::Instruction* insn,
                                                             emulator::DecodeError* error);
    // kCounting: count_by_domain_and_msr's copy of the path.
    template <bool kObservers, bool kHeld, bool kCounting>
    emulator::Outcome HandleWith(const emulator::Trap& trap, emulator::Instruction* insn,
                                 emulator::DecodeError* error);

    // A LEARN domain's trap, out of line: marks out->relaxed when the
    // enforcing policy would have faulted or denied it, and counts it.
    ABSL_ATTRIBUTE_NOINLINE void NoteLearning(const policy::Snapshot& snapshot,
                                              const policy::DomainSnapshot& snap,
                                              const emulator::Trap& trap,
                                              const emulator::Instruction& decoded,
                                              uint8_t entry_relaxed, emulator::Outcome* out);

    // 16 bytes, so that the cache stays four lines (24 cost 10% a trap).
    struct CachedDomain {
      uint32_t domain = 0;
      uint16_t block = 0;     // the domain's trap counts (TrapCountTables::BlockFor)
      bool learning = false;  // snap->learning(), beside what the trap reads anyway
      const policy::DomainSnapshot* snap = nullptr;
    };
    static_assert(sizeof(CachedDomain) == 16);
    std::atomic<uint64_t>* LayOutSlots(uint32_t block, const policy::DomainSnapshot& snap);
    // The count_by_domain_and_msr half of a trap: in line, one store for
    // the trap and one at a named MSR's slot; CountMsrDetail out of line for
    // the rest of the MSR accesses. The first access of a (domain, MSR,
    // access) decided by a GP rule or the unknown-MSR mode is logged once
    // per process (LogFirstAccess).
    void Count(const policy::Snapshot& snapshot, const emulator::Trap& trap,
               const emulator::Instruction& decoded, emulator::DecodeError decode_error,
               const emulator::Outcome& out, const CachedDomain& cached);
    ABSL_ATTRIBUTE_NOINLINE void CountMsrDetail(const policy::Snapshot& snapshot,
                                                const emulator::Trap& trap, bool write,
                                                const emulator::Outcome& out,
                                                const CachedDomain& cached);

    static_assert(TrapCountTables::kMaxDomains < 0xffff, "a block fits CachedDomain::block");
    // The domain's compiled policy in the current snapshot, from a small
    // direct-mapped cache (a trap source sees few domains), so a trap skips
    // the snapshot's domain hash probe. Emptied when the generation moves.
    const CachedDomain& ForDomain(const policy::Snapshot& snapshot, uint32_t domain);

    Dispatcher* owner_;
    emulator::Host& host_;  // the dispatcher's, unless NewSession(host)
    policy::SnapshotReader reader_;
    Counters* counters_;  // owned by the dispatcher until the session ends
    TrapCountTables* tables_;  // counters_'s; null unless count_by_domain_and_msr
    const bool count_detail_;  // options_.count_by_domain_and_msr, read once
    static constexpr uint32_t kDomainCacheSize = 16;  // a power of two
    CachedDomain domain_cache_[kDomainCacheSize];
    // Counting, beside domain_cache_ entry for entry: the domain's MSR
    // count slots this generation, two per DomainSnapshot::count_slots()
    // (TrapCountTables::SlotsFor); null when the session's arena is full.
    std::atomic<uint64_t>* domain_slots_[kDomainCacheSize] = {};
    uint64_t domain_cache_generation_ = 0;
    std::unique_ptr<emulator::Domain> view_;  // a DomainView<count_detail_>
    bool first_access_log_stopped_ = false;  // this session said its table is full
    uint64_t (*rip_source_)(void*) = nullptr;
    void* rip_context_ = nullptr;
    // The trap's RIP for a first-access record: its own, else the source's
    // (SetRipSource).
    uint64_t FirstAccessRip(const emulator::Trap& trap) const {
      if (trap.regs.rip != 0 || rip_source_ == nullptr) return trap.regs.rip;
      return rip_source_(rip_context_);
    }
  };

  std::unique_ptr<Session> NewSession();
  // A session whose host is `host` instead of the dispatcher's (it must
  // outlive the session): for a trap source that knows better than the
  // physical host what some host reads give, as Xen's vm_event knows the
  // CPUID answer Xen computed for the guest (server/xen/xen_monitor.h).
  std::unique_ptr<Session> NewSession(emulator::Host& host);

  // Reports every handled trap to `observer` while it is active (a
  // capture, the audit hub, ...). It must outlive the dispatcher or be
  // removed; traps in flight may still reach an observer just removed.
  absl::Status AddObserver(TrapObserver* observer) { return observers_.Add(observer); }
  void RemoveObserver(TrapObserver* observer) { observers_.Remove(observer); }

  // Sums every session's counters (past and present).
  TrapStats Stats() const;

  // What learning domains did that ENFORCE would fault, summed over every
  // session (past and present), sorted by domain, instruction, index, width.
  // Off the trap path: locks, allocates. At most kMaxLearnedFirsts accesses
  // keep their first occurrence; each session keeps 256 keys apart
  // (more count only in Stats()).
  std::vector<LearnedAccess> Learned() const;
  static constexpr size_t kMaxLearnedFirsts = 4096;

  // Per domain, MSRs that a rule names on its own are counted apart; of the
  // others, the first kMaxOtherMsrs seen (in MSR order within one call), and
  // the rest as msr "other".
  static constexpr size_t kMaxOtherMsrs = 64;
  // Domains the counts of ended sessions keep apart; more count as "other".
  static constexpr size_t kMaxRetiredDomains = 1024;
  struct Counts {
    std::vector<KindCount> kinds;  // sorted by domain ("other" last), insn, outcome
    std::vector<MsrCount> msrs;    // sorted by domain, msr ("other" last), access, action
  };
  // Every session's trap and MSR-access counts (past and present), summed
  // and bounded as above. Off the trap path: locks, allocates. Empty unless
  // counting_by_domain_and_msr().
  Counts CountsByKey() const;
  bool counting_by_domain_and_msr() const { return options_.count_by_domain_and_msr; }

  emulator::Host& host() const { return host_; }
  const policy::Store& store() const { return store_; }

 private:
  const policy::Store& store_;
  emulator::Host& host_;
  ObserverSet observers_;
  const DispatchOptions options_;
  ShadowStore shadow_;

  // Folds an ending session's tables into the retired sums and frees them.
  void Retire(Session::Counters* counters);
  // A session counted a learned key for the first time: keeps its first
  // occurrence (once per dispatcher) and logs it (DispatchOptions::log).
  void NoteFirstLearned(uint64_t key, LearnedAccess first);

  // Keys of the summed counts: domain (kOtherDomain for overflow), then
  // instruction and outcome, or msr (kOtherMsr beyond the bound), write,
  // MsrAction.
  static constexpr uint64_t kOtherDomain = TrapCountTables::kOtherDomain;
  static constexpr uint64_t kOtherMsr = uint64_t{1} << 32;
  using KindKey = std::tuple<uint64_t, int, emulator::OutcomeKind>;
  using MsrKey = std::tuple<uint64_t, uint64_t, bool, MsrAction>;
  using KindSums = absl::flat_hash_map<KindKey, uint64_t>;
  using MsrSums = absl::flat_hash_map<MsrKey, uint64_t>;
  // Adds one session's tables to the sums, bounding MSRs per domain.
  // `domains` (null: no bound) keeps at most kMaxRetiredDomains apart.
  void AddTables(const TrapCountTables& tables, const policy::Snapshot& snapshot,
                 absl::flat_hash_set<uint32_t>* domains, KindSums* kinds, MsrSums* msrs) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // The live sessions' counters.
  std::vector<std::unique_ptr<Session::Counters>> counters_ ABSL_GUARDED_BY(mu_);
  // Ended sessions' counts, summed (Stats() and CountsByKey() still count
  // their traps): the by-outcome totals, and the tables when counting.
  TrapStats retired_stats_ ABSL_GUARDED_BY(mu_);
  KindSums retired_kinds_ ABSL_GUARDED_BY(mu_);
  MsrSums retired_msrs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint32_t> retired_domains_ ABSL_GUARDED_BY(mu_);
  // Learned accesses: ended sessions' counts by key, and each key's first.
  absl::flat_hash_map<uint64_t, uint64_t> retired_learned_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, LearnedAccess> learned_firsts_ ABSL_GUARDED_BY(mu_);
  // Per domain, the unnamed MSRs counted apart (at most kMaxOtherMsrs):
  // once admitted, always apart, so a series never moves into "other".
  mutable absl::flat_hash_map<uint32_t, absl::flat_hash_set<uint32_t>> admitted_
      ABSL_GUARDED_BY(mu_);
};

// The Outcome message for one handled trap: kind, registers, exception, the
// decoded instruction, the generation, and a sentence for people ("rdmsr
// 0x1b0 (IA32_ENERGY_PERF_BIAS): #GP(0)"). Off the trap path (it allocates).
void FillOutcome(const emulator::Trap& trap, const emulator::Outcome& outcome,
                 const emulator::Instruction& insn, emulator::DecodeError error,
                 uint64_t generation, v1::Outcome* msg);

// One learned access as the API carries it (GetStats, a KVM data plane's
// report): the instruction by its label, the access as "read"|"write".
void LearnedToProto(const LearnedAccess& a, v1::LearnedAccess* msg);

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_DISPATCH_H_
