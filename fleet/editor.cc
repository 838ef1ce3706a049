#include "fleet/editor.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "policy/rule_edit.h"
#include "policy/store.h"
#include "fleet/compose.h"
#include "fleet/status_keeper.h"

namespace pvemu::fleet {
namespace {

// Each etcd call of an edit is bounded so that the whole edit answers
// within pvemuctl's deadline: a read, a Txn, then the wait to apply.
constexpr absl::Duration kReadTimeout = absl::Seconds(4);
constexpr absl::Duration kTxnTimeout = absl::Seconds(4);

// etcd could not take the edit: nothing was written.
absl::Status NotWritten(const absl::Status& why, const std::string& key) {
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot edit ", key, ": ", why.message(),
      "; nothing was written (etcd takes an edit only with a quorum of its members; "
      "check the cluster with `etcdctl endpoint health`). Traps are still answered on "
      "the last good policy"));
}

// etcd refused a request for its size, before it reached the cluster's
// log, so nothing was written: its own check, above --max-request-bytes
// (INVALID_ARGUMENT "etcdserver: request is too large"), or its gRPC
// server's, above --max-request-bytes + 512 KiB (RESOURCE_EXHAUSTED "grpc:
// received message larger than max").
bool TooLargeForEtcd(const absl::Status& status) {
  return (absl::IsInvalidArgument(status) &&
          absl::StrContains(status.message(), "request is too large")) ||
         (absl::IsResourceExhausted(status) &&
          absl::StrContains(status.message(), "larger than max"));
}

v1::Layer* TargetLayer(v1::Policy* policy, const LevelEdit& edit) {
  std::optional<uint32_t> domain = edit.domain;
  if (edit.level.kind == LevelName::kHostDomain) domain = edit.level.domain;
  if (!domain.has_value()) return policy->mutable_default_();
  for (v1::Layer& l : *policy->mutable_domain()) {
    if (l.domain() == *domain) return &l;
  }
  v1::Layer* l = policy->add_domain();
  l->set_domain(*domain);
  return l;
}

}  // namespace

absl::StatusOr<v1::Policy> Editor::NewValue(const LevelEdit& edit, const std::string& key,
                                            const std::optional<KeyValue>& current) const {
  if (edit.op == LevelEdit::kApply) {
    const std::string source = edit.source_name.empty() ? "<request>" : edit.source_name;
    // Errors point into the operator's file; the shape check names the key.
    ASSIGN_OR_RETURN(policy::LoadedPolicy loaded,
                     ParseLevelValue(source, edit.level, edit.textproto));
    return loaded.policy;
  }
  v1::Policy policy;
  if (current.has_value()) {
    absl::StatusOr<policy::LoadedPolicy> loaded = ParseLevelValue(key, edit.level, current->value);
    if (!loaded.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          loaded.status().message(), "\nthe layer in etcd is invalid (written around pvemu's "
          "checks?); replace it whole with `pvemuctl fleet apply -f FILE --layer=",
          edit.level.ToString(), "`"));
    }
    policy = std::move(loaded->policy);
  }
  RETURN_IF_ERROR(policy::EditRuleInLayer(
      TargetLayer(&policy, edit), edit.rule,
      edit.op == LevelEdit::kSetRule ? policy::RuleEditKind::kSet : policy::RuleEditKind::kDelete,
      key));
  RETURN_IF_ERROR(policy::ValidatePolicy(policy, key));
  return policy;
}

absl::Status Editor::CheckRegisteredTies(const LevelName& layer, const std::string& value) const {
  if (layer.kind != LevelName::kClass) return absl::OkStatus();
  const FleetKeys& keys = applier_.keys();
  ASSIGN_OR_RETURN(RangeResult hosts, etcd_.Get(keys.RegistrationPrefix(),
                                                PrefixEnd(keys.RegistrationPrefix()), 0,
                                                kReadTimeout));
  ASSIGN_OR_RETURN(RangeResult classes, etcd_.Get(keys.ClassPrefix(), PrefixEnd(keys.ClassPrefix()),
                                                  hosts.revision, kReadTimeout));
  LevelSet class_values;
  for (const KeyValue& kv : classes.kvs) class_values[kv.key] = kv.value;
  class_values[keys.Class(layer.name)] = value;
  // Class pairs -> the hosts that have both.
  std::map<std::string, std::vector<std::string>> hosts_of;
  for (const KeyValue& kv : hosts.kvs) {
    v1::FleetRegistration reg;
    if (!FromJson(kv.value, &reg).ok()) continue;
    bool has = false;
    for (const std::string& c : reg.classes()) has = has || c == layer.name;
    if (!has) continue;
    for (const std::string& c : reg.classes()) {
      if (c != layer.name && class_values.count(keys.Class(c)) > 0) hosts_of[c].push_back(reg.id());
    }
  }
  for (const auto& [other, ids] : hosts_of) {
    // The two classes alone, over an empty base: only their tie can fail.
    LevelSet pair{{keys.Class(layer.name), value}, {keys.Class(other), class_values[keys.Class(other)]}};
    FleetKeys both(keys.prefix(), "-", {other, layer.name});
    const policy::LoadedPolicy empty{v1::Policy(), policy::SourceMap("<none>")};
    absl::StatusOr<policy::LoadedPolicy> composed = Compose(empty, both, pair, v1::VENDOR_UNSPECIFIED);
    if (!composed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "refused: host", ids.size() > 1 ? "s " : " ", absl::StrJoin(ids, ", "),
          ids.size() > 1 ? " have" : " has", " both classes ", layer.name, " and ", other,
          ", and with this edit they tie: ", composed.status().message(),
          "; nothing was written"));
    }
  }
  return absl::OkStatus();
}

namespace {

// PVEMU_FLEET_TRACE=1 in pvemud's environment: one line per edit with the
// time of each phase (docs/performance.md, "Fleet mode"), for finding where
// an edit's latency goes on a given etcd and host.
bool TraceEdits() {
  static const bool on = [] {
    const char* v = std::getenv("PVEMU_FLEET_TRACE");
    return v != nullptr && *v != 0 && std::string(v) != "0";
  }();
  return on;
}

double Ms(absl::Time from, absl::Time to) { return absl::ToDoubleMilliseconds(to - from); }

std::atomic<std::chrono::steady_clock::rep> last_txn_issued{0};

}  // namespace

std::chrono::steady_clock::time_point LastEditTxnIssued() {
  return std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(last_txn_issued.load(std::memory_order_relaxed)));
}

absl::StatusOr<v1::FleetEditResponse> Editor::Edit(const LevelEdit& edit) {
  const absl::Time began = absl::Now();
  const FleetKeys& keys = applier_.keys();
  const std::string key = keys.Level(edit.level);
  // The layer as it is. One of this host's keys comes from the watch cache
  // at once, and the edit is made from it while a linearizable read of the
  // key runs beside it: the read is still the edit's check that etcd has a
  // quorum (without one, nothing is sent and the edit fails cleanly, never
  // "outcome unknown"), but it costs no time of its own. When the read
  // finds the cache behind, the edit is made again from what etcd holds.
  // Any other key is read first, as before.
  std::optional<KeyValue> current;
  // The read beside the edit runs on gRPC's threads (EtcdClient::StartGet):
  // no thread to start, and cancelled if the edit ends before it is needed.
  std::unique_ptr<EtcdClient::PendingGet> verify;
  if (std::optional<Watcher::CachedValue> cached =
          watcher_ != nullptr ? watcher_->Cached(key) : std::nullopt;
      cached.has_value()) {
    current = std::move(cached->kv);
    verify = etcd_.StartGet(key, kReadTimeout);
  } else {
    absl::StatusOr<RangeResult> read = etcd_.Get(key, "", 0, kReadTimeout);
    if (!read.ok()) return NotWritten(read.status(), key);
    if (!read->kvs.empty()) current = std::move(read->kvs[0]);
  }
  // Waits for the read beside the edit: true when it found what the edit
  // was made from (or there was none), false when `current` moved on.
  const auto verified = [&]() -> absl::StatusOr<bool> {
    if (verify == nullptr) return true;
    absl::StatusOr<RangeResult> read = verify->Wait();
    verify.reset();
    if (!read.ok()) return NotWritten(read.status(), key);
    const int64_t seen = read->kvs.empty() ? 0 : read->kvs[0].mod_revision;
    if (seen == (current.has_value() ? current->mod_revision : 0)) return true;
    current = read->kvs.empty() ? std::optional<KeyValue>() : std::move(read->kvs[0]);
    return false;
  };
  const absl::Time was_read = absl::Now();
  // The checks' parts, for the trace: the new value made, this host's
  // check (and the ties) done, then the wait for the read beside them.
  absl::Time valued_at, host_checked_at, checked_at, committed_at;
  std::string value;
  int64_t mod_revision = 0;
  absl::StatusOr<etcdserverpb::TxnResponse> done;
  // One Txn that compares the revision the edit was made from; when another
  // editor won meanwhile, its failure branch returns the layer as it is and
  // the edit is made once more from that (Kubernetes' GuaranteedUpdate),
  // unless it asked for one revision (--if-revision). A second loss:
  // ABORTED.
  bool remade = false;
  for (;;) {
    mod_revision = current.has_value() ? current->mod_revision : 0;
    if (edit.if_revision != 0 && edit.if_revision != mod_revision) {
      ASSIGN_OR_RETURN(const bool same, verified());
      if (!same) continue;  // the cache was behind: compare with etcd's
      return absl::AbortedError(absl::StrCat(
          key, " is at revision ", mod_revision, ", not ", edit.if_revision,
          "; re-read it with `pvemuctl fleet get --layer=", edit.level.ToString(), "` and retry"));
    }
    ASSIGN_OR_RETURN(v1::Policy policy, NewValue(edit, key, current));
    value = absl::StrCat("# pvemu: edited by ", edit.who, " on ", host_name_, " at ",
                         absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()),
                         "\n", ToTextProto(policy));
    valued_at = absl::Now();

    // This host's whole layer set with the edit must still apply here.
    if (absl::Status checked = applier_.Check(key, value); !checked.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "refused: with this edit, host ", keys.host_id(), " could not apply its layers: ",
          checked.message(), "; nothing was written"));
    }
    if (absl::Status ties = CheckRegisteredTies(edit.level, value); !ties.ok()) {
      if (absl::IsInvalidArgument(ties)) return ties;
      return NotWritten(ties, key);
    }
    host_checked_at = absl::Now();

    ASSIGN_OR_RETURN(const bool same, verified());
    if (!same) continue;  // the cache was behind: made again from etcd's value
    checked_at = absl::Now();
    etcdserverpb::TxnRequest txn;
    etcdserverpb::Compare* cmp = txn.add_compare();
    cmp->set_key(key);
    cmp->set_target(etcdserverpb::Compare::MOD);
    cmp->set_result(etcdserverpb::Compare::EQUAL);
    cmp->set_mod_revision(mod_revision);  // 0: the key must not exist yet
    etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value(value);
    txn.add_failure()->mutable_request_range()->set_key(key);
    last_txn_issued.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                          std::memory_order_relaxed);
    done = etcd_.Txn(txn, kTxnTimeout);
    committed_at = absl::Now();
    if (!done.ok() || done->succeeded()) break;
    std::optional<KeyValue> now;
    if (done->responses_size() > 0 && done->responses(0).response_range().kvs_size() > 0) {
      now = KeyValue::From(done->responses(0).response_range().kvs(0));
    }
    if (remade || edit.if_revision != 0) {
      return absl::AbortedError(absl::StrCat(
          key, " changed while this edit was made (revision ", mod_revision, " -> ",
          now.has_value() ? now->mod_revision : 0,
          "): another editor won; re-read it with `pvemuctl fleet get --layer=",
          edit.level.ToString(), "` and retry"));
    }
    current = std::move(now);
    remade = true;
  }
  if (!done.ok()) {
    if (TooLargeForEtcd(done.status())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the new value of %s is %d bytes (%.2f MiB), more than etcd takes in one "
          "request (%s): etcd refuses a request larger than its --max-request-bytes, 1.5 MiB "
          "unless its members were started with more; nothing was written. Split the layer "
          "(move rules to class or host layers, or a domain's rules to its overlay, "
          "--layer=host:ID/domain:N), or raise --max-request-bytes on every etcd member",
          key, value.size(), static_cast<double>(value.size()) / (1 << 20),
          done.status().message()));
    }
    // Sent, but not confirmed: etcd may still commit it. The compare makes
    // a retry safe: it cannot apply twice, nor over someone else's edit.
    return absl::UnknownError(absl::StrCat(
        "outcome unknown: ", done.status().message(), ". The edit of ", key,
        " was sent but etcd did not confirm it; check with `pvemuctl fleet get --layer=",
        edit.level.ToString(), "`: if its mod_revision is still ", mod_revision,
        ", it was not made, and retrying with --if-revision=", mod_revision, " is safe"));
  }
  const int64_t revision = done->header().revision();
  v1::FleetEditResponse response;
  response.set_key(key);
  response.set_revision(revision);
  response.set_diff(policy::DiffText(current.has_value() ? current->value : "", value));
  response.set_affects_this_host(keys.Classify(key).has_value());
  if (!response.affects_this_host()) return response;
  applier_.WaitSeen(revision, kApplyWait);
  if (TraceEdits()) {
    const absl::Time seen = absl::Now();
    const Applier::ApplyTimes t = applier_.LastApplyTimes();
    const bool mine = t.revision == revision;
    std::fprintf(stderr,
                 "pvemud: fleet trace: edit of %s at revision %lld: read %.3f ms, new value and "
                 "checks %.3f ms (new value %.3f, this host's check %.3f, the read beside them "
                 "%.3f), txn %.3f ms, watch event %.3f ms, compose %.3f ms, store "
                 "(validate, compile, persist, swap) %.3f ms%s, to the answer %.3f ms; total "
                 "%.3f ms\n",
                 key.c_str(), static_cast<long long>(revision), Ms(began, was_read),
                 Ms(was_read, checked_at), Ms(was_read, valued_at), Ms(valued_at, host_checked_at),
                 Ms(host_checked_at, checked_at), Ms(checked_at, committed_at),
                 mine ? Ms(committed_at, t.started) : -1.0, mine ? Ms(t.started, t.composed) : -1.0,
                 mine ? Ms(t.composed, t.committed) : -1.0,
                 mine && t.checked ? " (the check's compile)" : "",
                 mine ? Ms(t.committed, seen) : -1.0,
                 Ms(began, seen));
  }
  const HostView view = applier_.View();
  if (view.applied_revision >= revision) {
    response.set_applied(true);
  } else if (view.last_error.has_value() && view.last_error->revision() >= revision) {
    const v1::FleetError& e = *view.last_error;
    response.set_not_applied(absl::StrCat(
        "committed at revision ", revision, ", not applied on this host (", keys.host_id(),
        "): ", e.key().empty() ? "" : absl::StrCat("the key at fault is ", e.key(),
                                                     e.line() > 0 ? absl::StrCat(" line ", e.line()) : "",
                                                     ": "),
        e.message(), "; it keeps serving revision ", view.applied_revision));
  } else {
    response.set_not_applied(absl::StrCat(
        "committed at revision ", revision, ", not applied on this host (", keys.host_id(),
        ") within ", absl::FormatDuration(kApplyWait), ": it serves revision ",
        view.applied_revision,
        view.stale_since.has_value() ? " and cannot reach etcd" : "",
        "; see `pvemuctl fleet status`"));
  }
  return response;
}

absl::StatusOr<v1::GetLayerResponse> Editor::Get(const LevelName& layer) const {
  const std::string key = applier_.keys().Level(layer);
  absl::StatusOr<RangeResult> read = etcd_.Get(key, "", 0, kReadTimeout);
  if (!read.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot read ", key, ": ",
                                                      read.status().message()));
  }
  v1::GetLayerResponse response;
  response.set_key(key);
  response.set_revision(read->revision);
  if (read->kvs.empty()) return response;
  const KeyValue& kv = read->kvs[0];
  response.set_exists(true);
  response.set_textproto(kv.value);
  response.set_mod_revision(kv.mod_revision);
  absl::StatusOr<policy::LoadedPolicy> loaded = ParseLevelValue(key, layer, kv.value);
  if (loaded.ok()) *response.mutable_policy() = loaded->policy;
  return response;
}

}  // namespace pvemu::fleet
