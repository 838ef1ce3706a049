#include "fleet/status_keeper.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace pvemu::fleet {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(3);
// Three keep-alives per TTL: one lost round does not expire the lease.
constexpr absl::Duration kRound = absl::Seconds(3);

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_sec, t, absl::UTCTimeZone());
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

absl::Status FromJson(absl::string_view json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(std::string(json), message, options);
  if (!status.ok()) return absl::InvalidArgumentError(std::string(status.message()));
  return absl::OkStatus();
}

void StatusKeeper::Start() {
  thread_ = std::thread([this] { Run(); });
}

void StatusKeeper::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (lease_ != 0) (void)etcd_.LeaseRevoke(lease_, absl::Seconds(1));
}

v1::FleetHostStatus StatusKeeper::CurrentStatus() const {
  HostView view = applier_.View();
  v1::FleetHostStatus status;
  status.set_applied_revision(view.applied_revision);
  if (view.last_error.has_value()) *status.mutable_last_error() = *view.last_error;
  if (view.stale_since.has_value()) status.set_stale_since(Rfc3339(*view.stale_since));
  return status;
}

absl::Status StatusKeeper::Round() {
  if (!registered_) {
    // first_seen survives restarts: keep the one already registered.
    ASSIGN_OR_RETURN(RangeResult r,
                     etcd_.Get(applier_.keys().Registration(self_.id()), "", 0, kCallTimeout));
    v1::FleetRegistration old;
    if (!r.kvs.empty() && FromJson(r.kvs[0].value, &old).ok() && !old.first_seen().empty()) {
      self_.set_first_seen(old.first_seen());
    } else {
      self_.set_first_seen(Rfc3339(absl::Now()));
    }
    RETURN_IF_ERROR(
        etcd_.Put(applier_.keys().Registration(self_.id()), ToJson(self_), 0, kCallTimeout)
            .status());
    registered_ = true;
  }
  if (lease_ != 0) {
    absl::StatusOr<int64_t> ttl = etcd_.LeaseKeepAliveOnce(lease_, kCallTimeout);
    if (ttl.ok() && *ttl <= 0) lease_ = 0;  // expired (etcd was away too long): a new one
    if (!ttl.ok()) return ttl.status();
  }
  if (lease_ == 0) {
    ASSIGN_OR_RETURN(lease_, etcd_.LeaseGrant(kStatusLeaseSeconds, kCallTimeout));
    written_.clear();
  }
  v1::FleetHostStatus status = CurrentStatus();
  std::string value = ToJson(status);
  if (value != written_) {
    v1::FleetHostStatus stamped = status;
    stamped.set_updated(Rfc3339(absl::Now()));
    RETURN_IF_ERROR(
        etcd_.Put(applier_.keys().Status(self_.id()), ToJson(stamped), lease_, kCallTimeout)
            .status());
    written_ = std::move(value);
  }
  return absl::OkStatus();
}

void StatusKeeper::Run() {
  uint64_t seen_changes = ~uint64_t{0};
  absl::Time last_round = absl::InfinitePast();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    // A round every kRound, and soon after the applier's view changes, so
    // `fleet status` shows a new revision or error within a fraction of a second.
    const uint64_t changes = applier_.changes();
    if (changes != seen_changes || absl::Now() - last_round >= kRound) {
      absl::Status s = Round();
      last_round = absl::Now();
      if (s.ok()) seen_changes = changes;
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(100));
  }
}

}  // namespace pvemu::fleet
