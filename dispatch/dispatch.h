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
#include "dispatch/shadow_store.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::dispatch {

struct DispatchOptions {
  // The daemon's half of the host-write guard: a PASSTHROUGH write reaches
  // the host only if the rule says allow_host_write AND this is true.
  bool allow_host_writes = false;
};

// Records every handled trap with its outcome as an expectation, to a trap
// log (pvemud --capture=FILE). Thread-safe: appends serialise on a mutex,
// which is why capture is off unless asked for (one pointer test per trap).
class TrapCapture {
 public:
  // Opens `path` (.traps or .textproto, see traplog/encoding.h).
  static absl::StatusOr<std::unique_ptr<TrapCapture>> Open(const std::string& path);
  ~TrapCapture();
  void Record(const emulator::Trap& trap, const emulator::Outcome& outcome,
              const emulator::Instruction& insn, emulator::DecodeError error);
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
  uint64_t decode_errors = 0;
};

// Thread-safety: Dispatcher is thread-safe; each Session is used by one
// thread at a time (one per stream / trap-source thread).
class Dispatcher {
 public:
  // `store`, `host` and `audit` (may be null) must outlive the dispatcher.
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
    // The same path compiled without the switchable features (audit and
    // capture; the trap counters are GetStats and always on), for the
    // benchmark that proves switched-off features cost nothing
    // (BM_DispatchHooksOff vs BM_DispatchHooksBare). Not for production use.
    emulator::Outcome HandleBare(const emulator::Trap& trap);
    // The policy generation the last Handle() used.
    uint64_t generation() const { return reader_.generation(); }

   private:
    friend class Dispatcher;
    struct Counters;
    Session(Dispatcher* owner, Counters* counters);
    template <bool kHooks>
    emulator::Outcome HandleImpl(const emulator::Trap& trap, emulator::Instruction* insn,
                                 emulator::DecodeError* error);
    // Audit and capture for one trap, out of line: only when one is on.
    ABSL_ATTRIBUTE_NOINLINE void RunHooks(const emulator::Trap& trap, const emulator::Outcome& out,
                                          const emulator::Instruction& decoded,
                                          emulator::DecodeError decode_error, bool audit_on,
                                          TrapCapture* capture);

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

  // Starts (non-null) or stops (null) capturing; the capture must outlive
  // its use. Traps in flight may still go to the previous one.
  void SetCapture(TrapCapture* capture) { capture_.store(capture, std::memory_order_release); }

  // Sums every session's counters (past and present).
  TrapStats Stats() const;

  emulator::Host& host() const { return host_; }
  const policy::Store& store() const { return store_; }

 private:
  const policy::Store& store_;
  emulator::Host& host_;
  AuditHub no_audit_;  // stands in when no hub is given: nobody ever listens
  AuditHub* audit_;    // never null
  std::atomic<TrapCapture*> capture_{nullptr};
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
