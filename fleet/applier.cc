#include "fleet/applier.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "fleet/state_file.h"

namespace pvemu::fleet {

std::string AuthorOf(absl::string_view value) {
  absl::string_view first = value.substr(0, value.find('\n'));
  if (!absl::ConsumePrefix(&first, "# pvemu: edited by ")) return "";
  return std::string(first);
}

Applier::Applier(policy::Store& store, policy::LoadedPolicy base, FleetKeys keys,
                 std::string state_dir, std::string url)
    : store_(store),
      base_(std::move(base)),
      keys_(std::move(keys)),
      state_dir_(std::move(state_dir)),
      url_(std::move(url)) {}

void Applier::LoadLastGood(std::vector<std::string>* warnings) {
  if (state_dir_.empty()) return;
  std::optional<v1::FleetState> state = ReadFleetState(state_dir_, warnings);
  if (!state.has_value()) return;
  LevelSet layers(state->layers().begin(), state->layers().end());
  absl::Status applied = Apply(state->revision(), std::move(layers));
  if (!applied.ok() && warnings != nullptr) {
    warnings->push_back(absl::StrCat("fleet: the last good state in ", FleetStatePath(state_dir_),
                                     " (revision ", state->revision(),
                                     ") does not apply over this host's base policy: ",
                                     applied.message(), "; serving the base policy until etcd answers"));
  }
}

absl::Status Applier::Refuse(int64_t revision, const absl::Status& why, const LevelSet& layers) {
  v1::FleetError error = ErrorOf(why, layers);
  error.set_revision(revision);
  view_.last_error = error;
  view_.seen_revision = revision;
  ++changes_;
  std::fprintf(stderr,
               "pvemud: fleet: revision %lld not applied (still serving revision %lld): %s\n",
               static_cast<long long>(revision), static_cast<long long>(view_.applied_revision),
               std::string(why.message()).c_str());
  return why;
}

absl::Status Applier::Apply(int64_t revision, LevelSet layers) {
  std::optional<v1::FleetState> to_save;
  absl::Status status;
  const absl::Time started = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    times_ = ApplyTimes{revision, started, started, started};
    status = ApplyLocked(revision, std::move(layers), &to_save);
  }
  // The state file is written after the lock is released, so an edit
  // waiting for this revision (WaitSeen) is acknowledged without waiting for
  // the file's fsyncs: the policy is in force and etcd holds it; the file
  // only serves a restart while etcd is down. Only the watcher thread
  // applies, so the files are written in revision order.
  if (to_save.has_value()) {
    absl::Status saved = WriteFleetState(state_dir_, *to_save);
    if (!saved.ok()) {
      std::fprintf(stderr, "pvemud: fleet: revision %lld applied but not saved: %s\n",
                   static_cast<long long>(to_save->revision()),
                   std::string(saved.message()).c_str());
    }
  }
  return status;
}

absl::Status Applier::ApplyLocked(int64_t revision, LevelSet layers,
                                  std::optional<v1::FleetState>* to_save) {
  if (revision <= view_.seen_revision) return absl::OkStatus();
  // Only this host's keys count (the caller read exactly those).
  for (auto it = layers.begin(); it != layers.end();) {
    it = keys_.Classify(it->first).has_value() ? std::next(it) : layers.erase(it);
  }
  // An edit of this host's checked exactly these layers: its compile is
  // published as it is. Any other revision (another key moved meanwhile)
  // is composed and compiled here.
  std::optional<Candidate> checked;
  if (candidate_.has_value() && candidate_->layers == layers) checked = std::move(candidate_);
  candidate_.reset();
  absl::StatusOr<policy::LoadedPolicy> composed =
      checked.has_value() ? std::move(checked->composed)
                          : Compose(base_, keys_, layers, store_.host_vendor());
  times_.composed = absl::Now();
  times_.checked = checked.has_value();
  if (!composed.ok()) return Refuse(revision, composed.status(), layers);

  const uint64_t generation = store_.generation();
  if (static_cast<uint64_t>(revision) < generation) {
    return Refuse(revision,
                  absl::FailedPreconditionError(absl::StrCat(
                      url_, " is at revision ", revision, ", below this host's policy generation ",
                      generation,
                      ": was etcd replaced or restored from an older backup? To follow it, stop "
                      "pvemud, remove ",
                      FleetStatePath(state_dir_), " and start it again")),
                  layers);
  }
  // The keys that changed, and who changed them, for the audit log.
  std::vector<std::string> changed;
  for (const auto& [key, value] : layers) {
    auto old = view_.layers.find(key);
    if (old == view_.layers.end() || old->second != value) {
      std::string author = AuthorOf(value);
      changed.push_back(author.empty() ? absl::StrCat(key, " (written outside pvemu)")
                                       : absl::StrCat(key, " (", author, ")"));
    }
  }
  for (const auto& [key, value] : view_.layers) {
    if (layers.find(key) == layers.end()) changed.push_back(absl::StrCat(key, " (deleted)"));
  }
  if (static_cast<uint64_t>(revision) > generation) {
    policy::EditOptions options;
    options.who = absl::StrCat("fleet revision ", revision, ": ",
                               changed.empty() ? "no layer changed" : absl::StrJoin(changed, "; "));
    absl::StatusOr<policy::EditResult> result =
        store_.ApplyPolicyAtGeneration(composed->policy, composed->source, revision, options,
                                       checked.has_value() ? &checked->compiled : nullptr);
    if (!result.ok()) return Refuse(revision, result.status(), layers);
  }
  times_.committed = absl::Now();
  view_.layers = std::move(layers);
  view_.applied_revision = revision;
  view_.seen_revision = revision;
  view_.last_error.reset();
  ++changes_;
  if (!state_dir_.empty()) {
    v1::FleetState& state = to_save->emplace();
    state.set_revision(revision);
    state.set_endpoints(url_);
    for (const auto& [key, value] : view_.layers) (*state.mutable_layers())[key] = value;
  }
  return absl::OkStatus();
}

Applier::ApplyTimes Applier::LastApplyTimes() const {
  absl::MutexLock lock(&mu_);
  return times_;
}

absl::Status Applier::Check(const std::string& key, const std::optional<std::string>& value) {
  if (!keys_.Classify(key).has_value()) return absl::OkStatus();
  LevelSet layers;
  {
    absl::MutexLock lock(&mu_);
    layers = view_.layers;
  }
  if (value.has_value()) {
    layers[key] = *value;
  } else {
    layers.erase(key);
  }
  absl::StatusOr<policy::LoadedPolicy> composed = Compose(base_, keys_, layers, store_.host_vendor());
  if (!composed.ok()) return composed.status();
  // Compiling for this host's vendor is the one check composition leaves.
  absl::StatusOr<policy::UnstampedSnapshot> compiled = policy::UnstampedSnapshot::Compile(
      composed->policy, composed->source, store_.host_vendor());
  if (!compiled.ok()) return compiled.status();
  absl::MutexLock lock(&mu_);
  candidate_ = Candidate{std::move(layers), *std::move(composed), *std::move(compiled)};
  return absl::OkStatus();
}

bool Applier::WaitSeen(int64_t revision, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto seen = [this, revision]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return view_.seen_revision >= revision;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
}

void Applier::SetStale(bool stale) {
  absl::MutexLock lock(&mu_);
  if (stale == view_.stale_since.has_value()) return;
  if (stale) {
    view_.stale_since = absl::Now();
  } else {
    view_.stale_since.reset();
  }
  ++changes_;
}

HostView Applier::View() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

uint64_t Applier::changes() const {
  absl::MutexLock lock(&mu_);
  return changes_;
}

}  // namespace pvemu::fleet
