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
#include <memory>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "emulator/trap.h"
#include "emulator/decoder.h"
#include "emulator/host.h"
#include "policy/store.h"
#include "dispatch/audit.h"
#include "dispatch/observer.h"
#include "dispatch/shadow_store.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::dispatch {

struct DispatchOptions {
  // The daemon's half of the host-write guard: a PASSTHROUGH write reaches
  // the host only if the rule says allow_host_write AND this is true.
  bool allow_host_writes = false;
};

// Records every handled trap with its outcome as an expectation, to a trap
// log (pvemud --capture=FILE): an observer, active from Open to Close.
// Thread-safe: appends serialise on a mutex, which is why capture is off
// unless asked for.
class TrapCapture final : public TrapObserver {
 public:
  // Opens `path` (.traps or .textproto, see traplog/encoding.h).
  static absl::StatusOr<std::unique_ptr<TrapCapture>> Open(const std::string& path);
  ~TrapCapture() override;
  void OnTrap(const emulator::Trap& trap, const emulator::Outcome& outcome,
              const emulator::Instruction& insn, emulator::DecodeError error) override;
  // Makes the log durable and complete; later Record calls are dropped.
  absl::Status Close();
  uint64_t records() const;

 private:
  struct Impl;
  explicit TrapCapture(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
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

  class DomainView;  // the emulator's view of a domain snapshot (dispatch.cc)

  class Session {
   public:
    ~Session();
    // One trap, one complete outcome. `insn`/`error` (may be null) receive
    // the decoded instruction / the decode error for callers that report it.
    emulator::Outcome Handle(const emulator::Trap& trap, emulator::Instruction* insn = nullptr,
                             emulator::DecodeError* error = nullptr);
    // The policy generation the last Handle() used.
    uint64_t generation() const { return reader_.generation(); }

   private:
    friend class Dispatcher;
    friend struct DispatchTesting;  // dispatch/dispatch_testing.h
    struct Counters;
    Session(Dispatcher* owner, Counters* counters);
    // kObservers false: the same path without the observer test, for the
    // benchmark that proves switched-off features cost nothing.
    template <bool kObservers>
    emulator::Outcome HandleImpl(const emulator::Trap& trap, emulator::Instruction* insn,
                                 emulator::DecodeError* error);

    // The domain's compiled policy in the current snapshot, from a small
    // direct-mapped cache (a trap source sees few domains), so a trap skips
    // the snapshot's domain hash probe. Emptied when the generation moves.
    const policy::DomainSnapshot& ForDomain(const policy::Snapshot& snapshot, uint32_t domain);

    Dispatcher* owner_;
    policy::SnapshotReader reader_;
    Counters* counters_;  // owned by the dispatcher, outlives the session
    struct CachedDomain {
      uint32_t domain = 0;
      const policy::DomainSnapshot* snap = nullptr;
    };
    static constexpr uint32_t kDomainCacheSize = 16;  // a power of two
    CachedDomain domain_cache_[kDomainCacheSize];
    uint64_t domain_cache_generation_ = 0;
    std::unique_ptr<DomainView> view_;
  };

  std::unique_ptr<Session> NewSession();

  // Reports every handled trap to `observer` while it is active (a
  // capture, the audit hub, ...). It must outlive the dispatcher or be
  // removed; traps in flight may still reach an observer just removed.
  absl::Status AddObserver(TrapObserver* observer) { return observers_.Add(observer); }
  void RemoveObserver(TrapObserver* observer) { observers_.Remove(observer); }

  // Sums every session's counters (past and present).
  TrapStats Stats() const;

  emulator::Host& host() const { return host_; }
  const policy::Store& store() const { return store_; }

 private:
  const policy::Store& store_;
  emulator::Host& host_;
  ObserverSet observers_;
  const DispatchOptions options_;
  ShadowStore shadow_;

  mutable absl::Mutex mu_;
  // Counter blocks live as long as the dispatcher so that Stats() still
  // counts the traps of sessions that ended.
  std::vector<std::unique_ptr<Session::Counters>> counters_ ABSL_GUARDED_BY(mu_);
};

// The Outcome message for one handled trap: kind, registers, exception, the
// decoded instruction, the generation, and a sentence for people ("rdmsr
// 0x1b0 (IA32_ENERGY_PERF_BIAS): #GP(0)"). Off the trap path (it allocates).
void FillOutcome(const emulator::Trap& trap, const emulator::Outcome& outcome,
                 const emulator::Instruction& insn, emulator::DecodeError error,
                 uint64_t generation, v1::Outcome* msg);

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_DISPATCH_H_
