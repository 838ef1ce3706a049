#include "fleet/watcher.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace pvemu::fleet {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(5);
// The pause between two attempts after a failure grows to this cap, like
// the channel's own reconnect backoff (etcd_client.cc).
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);

}  // namespace

void Watcher::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Watcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (active_ != nullptr) active_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

bool Watcher::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void Watcher::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
}

absl::StatusOr<int64_t> Watcher::Sync(int64_t revision) {
  // Every key range of this host in one round trip, all at one revision
  // (one per range, in turn, took most of an edit's time to all hosts).
  std::vector<EtcdClient::KeyRange> ranges;
  for (const FleetKeys::Watched& w : applier_.keys().HostKeys()) {
    ranges.push_back(EtcdClient::KeyRange{w.key, w.range_end});
  }
  ASSIGN_OR_RETURN(std::vector<RangeResult> read, etcd_.GetAll(ranges, revision, kCallTimeout));
  LevelSet layers;
  std::map<std::string, KeyValue> kvs;
  for (RangeResult& r : read) {
    if (revision <= 0) revision = r.revision;
    for (KeyValue& kv : r.kvs) {
      layers[kv.key] = kv.value;
      kvs[kv.key] = std::move(kv);
    }
  }
  {
    absl::MutexLock lock(&cache_mu_);
    cache_ = std::move(kvs);
    cache_revision_ = revision;
    changed_ = revision;
  }
  // A refused revision is the applier's to report; the watch goes on.
  (void)applier_.Apply(revision, std::move(layers));
  return revision;
}

std::optional<Watcher::CachedValue> Watcher::Cached(const std::string& key) const {
  if (!applier_.keys().Classify(key).has_value()) return std::nullopt;
  absl::MutexLock lock(&cache_mu_);
  if (!live_) return std::nullopt;
  CachedValue out;
  if (auto it = cache_.find(key); it != cache_.end()) out.kv = it->second;
  return out;
}

void Watcher::TakeEvents(const etcdserverpb::WatchResponse& response) {
  const FleetKeys& keys = applier_.keys();
  absl::MutexLock lock(&cache_mu_);
  if (response.created()) live_ = true;
  for (const mvccpb::Event& e : response.events()) {
    const mvccpb::KeyValue& kv = e.kv();
    cache_revision_ = std::max(cache_revision_, kv.mod_revision());
    if (!keys.Classify(kv.key()).has_value()) continue;  // another host's or class's
    changed_ = std::max(changed_, kv.mod_revision());
    if (e.type() == mvccpb::Event::DELETE) {
      cache_.erase(kv.key());
    } else {
      cache_[kv.key()] = KeyValue::From(kv);
    }
  }
}

absl::Status Watcher::WatchFrom(int64_t start) {
  grpc::ClientContext context;
  EtcdClient::Prepare(&context, absl::InfiniteDuration());
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("stopping");
    active_ = &context;
  }
  {
    absl::MutexLock lock(&cache_mu_);
    ended_ = false;
    why_ = absl::OkStatus();
  }
  auto stream = etcd_.watch().Watch(&context);
  const FleetKeys& keys = applier_.keys();
  etcdserverpb::WatchRequest request;
  etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(keys.PolicyPrefix());
  create->set_range_end(PrefixEnd(keys.PolicyPrefix()));
  create->set_start_revision(start);
  const bool wrote = stream->Write(request);

  // A reader drains the stream into the cache; this thread applies the
  // cache. When revisions come faster than an apply (a writer putting
  // thousands a second), the ones that arrived meanwhile are applied as one,
  // at the newest of them: still a whole revision etcd had, never a backlog
  // of stale ones applied one by one. Without a backlog, each event is
  // applied at its own revision.
  std::thread reader;
  if (wrote) {
    reader = std::thread([&] {
      absl::Status why = absl::OkStatus();
      etcdserverpb::WatchResponse response;
      while (stream->Read(&response)) {
        if (response.compact_revision() > 0) {
          why = absl::OutOfRangeError(absl::StrCat(
              etcd_.name(), " compacted past revision ", start, " (oldest kept: ",
              response.compact_revision(), ")"));
          break;
        }
        if (response.canceled()) {
          why = absl::UnavailableError(absl::StrCat(etcd_.name(), ": watch cancelled: ",
                                                    response.cancel_reason()));
          break;
        }
        if (response.created()) applier_.SetStale(false);
        TakeEvents(response);
      }
      absl::MutexLock lock(&cache_mu_);
      live_ = false;
      ended_ = true;
      why_ = why;
    });
  }
  absl::Status result = absl::OkStatus();
  int64_t synced = start - 1;  // the host has applied up to here
  while (wrote && !stopping()) {
    int64_t target = 0;
    LevelSet layers;
    {
      absl::MutexLock lock(&cache_mu_);
      const auto ready = [this, &synced]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cache_mu_) {
        return changed_ > synced || ended_;
      };
      cache_mu_.Await(absl::Condition(&ready));
      if (changed_ <= synced) {  // ended, and everything it read is applied
        result = why_;
        break;
      }
      target = changed_;
      for (const auto& [key, kv] : cache_) layers[key] = kv.value;
    }
    if (stopping()) break;
    synced = target;
    // A refused revision is the applier's to report; the watch goes on.
    (void)applier_.Apply(target, std::move(layers));
  }
  {
    absl::MutexLock lock(&mu_);
    active_ = nullptr;
  }
  context.TryCancel();
  if (reader.joinable()) reader.join();
  grpc::Status finished = stream->Finish();
  if (result.ok()) {
    result = finished.ok() ? absl::UnavailableError(absl::StrCat(etcd_.name(), ": watch ended"))
                           : etcd_.Error(finished, "watching the fleet's keys");
  }
  return result;
}

void Watcher::Run() {
  absl::Duration backoff = absl::Milliseconds(250);
  // Always list first, even with a last good revision from disk: the
  // cache needs every key's value and mod_revision, which the state file
  // does not keep. A listed revision at or below the one from disk is not
  // applied again (Applier::Apply).
  bool need_list = true;
  absl::Status last_logged = absl::OkStatus();
  while (!stopping()) {
    absl::Status status = absl::OkStatus();
    if (need_list) {
      absl::StatusOr<int64_t> synced = Sync(0);
      status = synced.status();
      if (status.ok()) need_list = false;
    }
    if (status.ok()) {
      const absl::Time began = absl::Now();
      int64_t from = 0;
      {
        absl::MutexLock lock(&cache_mu_);
        from = cache_revision_ + 1;
      }
      status = WatchFrom(from);
      // A watch that ran a while was a working connection: retry soon.
      if (absl::Now() - began > kMaxBackoff) backoff = absl::Milliseconds(250);
      if (absl::IsOutOfRange(status)) {
        // Compacted: what happened since is gone; the state now is not.
        std::fprintf(stderr, "pvemud: fleet: %s; reading every key anew\n",
                     std::string(status.message()).c_str());
        need_list = true;
        backoff = absl::Milliseconds(250);
        continue;
      }
    }
    if (stopping()) break;
    applier_.SetStale(true);
    if (status.message() != last_logged.message()) {
      std::fprintf(stderr, "pvemud: fleet: %s; serving revision %lld, retrying\n",
                   std::string(status.message()).c_str(),
                   static_cast<long long>(applier_.View().applied_revision));
      last_logged = status;
    }
    Pause(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

}  // namespace pvemu::fleet
