// The live policy of a host: the current v1::Policy, its generation, and its
// compiled Snapshot; edits that are validated, compiled and persisted before
// they are published; and cheap readers for the trap path.
//
// On disk (state_dir): policy.textproto is the current policy with a header
// line "# pvemu state: generation=G length=N fnv1a=H" that lets Open detect a
// truncated or foreign file; policy.textproto.prev is the policy it replaced.
// A bad state file is renamed to policy.textproto.corrupt and never replaces
// the last good policy.
#ifndef PVEMU_POLICY_STORE_H_
#define PVEMU_POLICY_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "policy/compile.h"
#include "policy/explain.h"
#include "policy/rule_edit.h"
#include "policy/source_map.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::policy {


// Which layer an edit is about.
struct LayerRef {
  bool is_default = true;
  uint32_t domain = 0;  // when !is_default
  static LayerRef Default() { return LayerRef{true, 0}; }
  static LayerRef Domain(uint32_t d) { return LayerRef{false, d}; }
  std::string ToString() const;  // "default" | "domain 3"
};

struct EditOptions {
  // Refuse with ABORTED unless the policy is at this generation. 0: no check.
  uint64_t if_generation = 0;
  // Who asks ("uid=0 gid=0 pid=1"); passed to the edit listener.
  std::string who;
};

struct EditResult {
  uint64_t generation = 0;  // the new generation
  std::string diff;         // what changed ("" if nothing)
};

// What the edit listener hears after each accepted edit.
struct EditEvent {
  std::string who;
  std::string method;  // "ApplyPolicy", "ApplyLayer", "SetRule", "DeleteRule", "SetMode", "FleetApply"
  std::string layer;   // "all", "default", "domain 3"
  uint64_t generation = 0;
  std::string diff;
};
using EditListener = std::function<void(const EditEvent&)>;

// Thread-safety: every method is safe to call concurrently. Edits serialise
// on an internal mutex; readers (Current, SnapshotReader) never wait for an
// edit in progress (validation, compilation and fsync happen before the
// short publish step).
class Store {
 public:
  // Loads state_dir/policy.textproto if present and good, else
  // policy.textproto.prev, else `initial_policy_path` (if not empty: a file or
  // a policy's name, LoadPolicyByNameOrFile in policy/shipped.h), else the
  // shipped default. Problems with state files are appended to `warnings`
  // (may be null) for the daemon to log; an invalid initial policy is an
  // error. A missing `state_dir` is created (one level, mode 0750); an empty
  // `state_dir` keeps the policy in memory only.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& state_dir,
                                                     const std::string& initial_policy_path,
                                                     pvemu::v1::Vendor host_vendor,
                                                     std::vector<std::string>* warnings);

  // A store of `policy` (validated, in memory only, generation 1).
  static absl::StatusOr<std::unique_ptr<Store>> FromPolicy(const pvemu::v1::Policy& policy,
                                                           const SourceMap& source,
                                                           pvemu::v1::Vendor host_vendor);

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Edits. Each checks if_generation (ABORTED naming the current generation),
  // validates the whole resulting policy (INVALID_ARGUMENT, nothing changes),
  // compiles it, persists it (RESOURCE_EXHAUSTED for a full disk,
  // FAILED_PRECONDITION for a read-only or missing state dir, naming the path
  // and errno text; the previous policy stays in force and on disk), then
  // publishes the new snapshot and returns the new generation.

  // Replaces the whole policy. `source` gives positions for errors.
  absl::StatusOr<EditResult> ApplyPolicy(const pvemu::v1::Policy& policy,
                                         const SourceMap& source, const EditOptions& options);
  // Replaces one layer. `layer_policy` holds it as its `default` (for
  // LayerRef::Default()) or its one `domain` entry, as a file would.
  absl::StatusOr<EditResult> ApplyLayer(LayerRef layer, const pvemu::v1::Policy& layer_policy,
                                        const SourceMap& source, const EditOptions& options);
  // Replaces the rule with the same target and conditions, or adds it (a
  // domain layer is created if needed).
  absl::StatusOr<EditResult> SetRule(LayerRef layer, const pvemu::v1::MsrRule& rule,
                                     const EditOptions& options);
  // Deletes the rule with the same target and conditions (actions ignored);
  // NOT_FOUND if there is none.
  absl::StatusOr<EditResult> DeleteRule(LayerRef layer, const pvemu::v1::MsrRule& rule,
                                        const EditOptions& options);
  // Sets the layer's `mode` (ENFORCE or LEARN). A domain without a layer
  // gets one holding only the mode, so a domain can start learning before
  // any rule is written for it; its other decisions stay the default
  // layer's.
  absl::StatusOr<EditResult> SetMode(LayerRef layer, pvemu::v1::PolicyMode mode,
                                     const EditOptions& options);

  // Replaces the whole policy and publishes it at `generation` rather than
  // the next one: fleet mode, where the generation is the etcd revision the
  // policy was composed at. Validated, compiled (and persisted, for a store
  // with a state dir) like ApplyPolicy; FAILED_PRECONDITION unless
  // `generation` is above the current one, so readers always see the
  // generation move forward. options.if_generation is checked as usual.
  // `compiled`, when given and not empty, is `policy` already validated and
  // compiled from `source` for this store's vendor (UnstampedSnapshot): it
  // is published as it is, stamped with `generation`, instead of compiling
  // `policy` again.
  absl::StatusOr<EditResult> ApplyPolicyAtGeneration(const pvemu::v1::Policy& policy,
                                                     const SourceMap& source,
                                                     uint64_t generation,
                                                     const EditOptions& options,
                                                     UnstampedSnapshot* compiled = nullptr);

  // What ApplyPolicy / ApplyLayer would change (text, "" for nothing);
  // INVALID_ARGUMENT if the candidate is invalid.
  absl::StatusOr<std::string> Diff(const pvemu::v1::Policy& policy,
                                   const SourceMap& source) const;
  absl::StatusOr<std::string> DiffLayer(LayerRef layer, const pvemu::v1::Policy& layer_policy,
                                        const SourceMap& source) const;

  // Explains an access against the current snapshot.
  Explanation Explain(uint32_t domain, uint32_t msr,
                      std::optional<uint64_t> write_value = std::nullopt) const;

  // The current compiled snapshot (one atomic shared_ptr copy under a short
  // lock: fine for RPCs; trap paths use SnapshotReader).
  std::shared_ptr<const Snapshot> Current() const;
  uint64_t generation() const { return generation_.value.load(std::memory_order_acquire); }
  // A copy of the current policy.
  pvemu::v1::Policy policy() const;
  pvemu::v1::Vendor host_vendor() const { return host_vendor_; }
  // The state file ("" for an in-memory store).
  std::string state_path() const;

  // Called after every accepted edit, in generation order, on the editing
  // thread. Unset (the default): no event is built at all.
  void SetEditListener(EditListener listener);

  // A check every edit's compiled candidate must also pass, after
  // validation: a refusal (its status, normally INVALID_ARGUMENT) changes
  // nothing, on disk or in force. pvemud refuses through it an edit that
  // an attached KVM data plane could not apply (an MSR filter KVM cannot
  // express). Called on the editing thread, under the edit lock.
  using CandidateCheck = std::function<absl::Status(const Snapshot& candidate)>;
  void SetCandidateCheck(CandidateCheck check);

  // Test hook: the next edit fails to compile after it validated (an
  // internal error no policy can cause), so tests can prove such an edit
  // changes nothing, on disk or in force.
  void FailNextCompileForTesting() { fail_next_compile_.store(true); }

 private:
  friend class SnapshotReader;
  Store(std::string state_dir, pvemu::v1::Vendor host_vendor);

  // Validates, compiles, persists and publishes `candidate`. REQUIRES: mu_.
  // `next`: the generation to publish at (0: the current one plus one).
  // `compiled`: candidate's compile, when the caller has it (an in-memory
  // store only; one with a state dir compiles with the stored positions).
  absl::StatusOr<EditResult> Commit(pvemu::v1::Policy candidate, const SourceMap& source,
                                    const EditOptions& options, const char* method,
                                    std::string layer, uint64_t next = 0,
                                    UnstampedSnapshot* compiled = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckGeneration(const EditOptions& options) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SetRule and DeleteRule: under mu_, checks the generation, edits the
  // rule in a copy of the policy (EditRuleInLayer; SetRule creates the layer
  // if it is absent) and commits the copy unless the edit fails.
  absl::StatusOr<EditResult> EditRule(LayerRef layer, const pvemu::v1::MsrRule& rule,
                                      const EditOptions& options, RuleEditKind kind)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Publish(std::shared_ptr<const Snapshot> snapshot);

  const std::string state_dir_;
  const pvemu::v1::Vendor host_vendor_;

  // The thread that runs an edit's durable write while the editing thread
  // compiles (store.cc): one for the store's life, started by the first
  // edit with a state dir, not one per edit.
  class DurableWriter;

  mutable absl::Mutex mu_;  // serialises edits
  std::unique_ptr<DurableWriter> writer_ ABSL_GUARDED_BY(mu_);
  pvemu::v1::Policy policy_ ABSL_GUARDED_BY(mu_);
  // policy_ in text format, kept from the last edit for the next diff
  // (unset: render it when needed).
  std::optional<std::string> policy_text_ ABSL_GUARDED_BY(mu_);
  EditListener listener_ ABSL_GUARDED_BY(mu_);
  CandidateCheck candidate_check_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex snap_mu_;  // held only to swap/copy the pointer
  std::shared_ptr<const Snapshot> current_ ABSL_GUARDED_BY(snap_mu_);
  // Moves (release) after current_ is replaced; readers poll it (acquire).
  // On its own cache line so edits (mutex traffic) do not evict it from the
  // readers' caches.
  struct alignas(64) PaddedGeneration {
    std::atomic<uint64_t> value{0};
  };
  PaddedGeneration generation_;
  std::atomic<bool> fail_next_compile_{false};
};

// A per-thread (per trap source, per stream) view of a Store's snapshot. Get()
// costs one acquire load while the generation is unchanged; only when it has
// moved does it copy the new shared_ptr (under the store's short pointer
// lock). No shared reference count is touched per trap.
//
// Thread-safety: not thread-safe; use one per thread. The Store must outlive
// it. A reference returned by Get() stays valid until the next Get() or the
// reader's destruction, and always shows one whole generation.
class SnapshotReader {
 public:
  explicit SnapshotReader(const Store& store);
  const Snapshot& Get() {
    uint64_t g = store_.generation_.value.load(std::memory_order_acquire);
    if (g != cached_generation_) Refresh();
    return *cached_;
  }
  // The snapshot the last Get() returned, even if a newer one was published
  // since (for the rest of one instruction: every element of a string I/O
  // sees one policy). Requires a Get() before.
  const Snapshot& Held() const { return *cached_; }
  uint64_t generation() const { return cached_generation_; }

 private:
  void Refresh();
  const Store& store_;
  std::shared_ptr<const Snapshot> cached_;
  uint64_t cached_generation_ = 0;
};

// A line diff of two texts ("-old" / "+new" lines with a little context).
std::string DiffText(const std::string& before, const std::string& after);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_STORE_H_
