// Fleet mode's applier: turns this host's layer set at one etcd revision
// into its served policy, or refuses the whole revision.
//
// A revision whose set composes, validates and compiles for this host's
// vendor is published at generation = that revision (Store::
// ApplyPolicyAtGeneration) and written to state_dir/fleet.state; one that
// fails changes nothing (the host keeps serving its last good revision) and
// becomes the host's last error, with the key and line at fault. A host
// never serves a mix of two revisions: it applies a whole set or none.
//
// Thread-safety: every method is safe to call concurrently; Apply is
// called by the watcher thread alone (and at start), the rest by RPCs and
// the status keeper. Nothing here is on a trap path.
#ifndef PVEMU_FLEET_APPLIER_H_
#define PVEMU_FLEET_APPLIER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "policy/compile.h"
#include "policy/loader.h"
#include "policy/store.h"
#include "pvemu/v1/fleet.pb.h"
#include "fleet/compose.h"
#include "fleet/keys.h"

namespace pvemu::fleet {

// What this host knows of its own fleet state.
struct HostView {
  int64_t applied_revision = 0;  // 0: serving the base policy, no revision yet
  int64_t seen_revision = 0;     // the newest revision read (applied or not)
  std::optional<v1::FleetError> last_error;  // the newest revision it refused
  std::optional<absl::Time> stale_since;     // set while etcd is unreachable
  LevelSet layers;                           // the applied revision's layers
};

class Applier {
 public:
  // `base`: the host's base policy (--policy or the shipped default).
  // `state_dir` "" keeps no state on disk.
  Applier(policy::Store& store, policy::LoadedPolicy base, FleetKeys keys, std::string state_dir,
          std::string url);

  // Applies state_dir/fleet.state, the last good state, if there is one.
  // Problems (a damaged file, a state that no longer composes over the
  // base) go to `warnings`; the host then serves its base policy.
  void LoadLastGood(std::vector<std::string>* warnings);

  // This host's layer set at `revision`: every one of its keys that exists
  // then. A revision at or below the one last seen is ignored (OK). Returns
  // the refusal, if the set fails.
  absl::Status Apply(int64_t revision, LevelSet layers);

  // Whether the current layers, with `key` set to `value` (nullopt: the key
  // deleted), compose and compile for this host: an edit's check before it
  // is written. OK for a key that is not this host's. The compiled result
  // is kept for Apply: when the watch brings exactly those layers (the
  // edit's own revision, nothing else changed), it is published without
  // composing and compiling again.
  absl::Status Check(const std::string& key, const std::optional<std::string>& value);

  // Waits until the host has seen (applied or refused) `revision` or later;
  // false after `timeout`.
  bool WaitSeen(int64_t revision, absl::Duration timeout) const;

  // The watcher reached etcd (false) or lost it (true).
  void SetStale(bool stale);

  HostView View() const;
  // When the last Apply began, composed and had the store take the policy
  // (for an edit's phase times, Editor's PVEMU_FLEET_TRACE).
  struct ApplyTimes {
    int64_t revision = 0;
    absl::Time started, composed, committed;
    bool checked = false;  // published an edit's compile from Check
  };
  ApplyTimes LastApplyTimes() const;
  const FleetKeys& keys() const { return keys_; }
  const std::string& url() const { return url_; }
  // Moves whenever the view changes (for the status keeper).
  uint64_t changes() const;

 private:
  // Apply's work under mu_; sets *to_save to the state to write once the
  // lock is released.
  absl::Status ApplyLocked(int64_t revision, LevelSet layers,
                           std::optional<v1::FleetState>* to_save)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Refuse(int64_t revision, const absl::Status& why, const LevelSet& layers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  policy::Store& store_;
  const policy::LoadedPolicy base_;
  const FleetKeys keys_;
  const std::string state_dir_;
  const std::string url_;

  // The last Check's layers, composed and compiled.
  struct Candidate {
    LevelSet layers;
    policy::LoadedPolicy composed;
    policy::UnstampedSnapshot compiled;
  };

  mutable absl::Mutex mu_;
  HostView view_ ABSL_GUARDED_BY(mu_);
  std::optional<Candidate> candidate_ ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  ApplyTimes times_ ABSL_GUARDED_BY(mu_);
};

// The author line of a value an edit wrote ("" if it has none): the
// header comment "# pvemu: edited by WHO at TIME".
std::string AuthorOf(absl::string_view value);

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_APPLIER_H_
