#include "fleet/watcher.h"

#include <algorithm>
#include <cstdio>

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
  for (RangeResult& r : read) {
    if (revision <= 0) revision = r.revision;
    for (KeyValue& kv : r.kvs) layers[kv.key] = std::move(kv.value);
  }
  // A refused revision is the applier's to report; the watch goes on.
  (void)applier_.Apply(revision, std::move(layers));
  return revision;
}

absl::Status Watcher::WatchFrom(int64_t start) {
  grpc::ClientContext context;
  EtcdClient::Prepare(&context, absl::InfiniteDuration());
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("stopping");
    active_ = &context;
  }
  auto stream = etcd_.watch().Watch(&context);
  const std::vector<FleetKeys::Watched> keys = applier_.keys().HostKeys();
  bool wrote = true;
  for (const FleetKeys::Watched& w : keys) {
    etcdserverpb::WatchRequest request;
    etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
    create->set_key(w.key);
    if (!w.range_end.empty()) create->set_range_end(w.range_end);
    create->set_start_revision(start);
    wrote = wrote && stream->Write(request);
  }

  // A reader drains the stream and keeps only the newest event's revision;
  // this thread reads the host's keys at that revision and applies them.
  // When revisions come faster than a read and an apply (a writer putting
  // thousands a second), the ones that arrived meanwhile are applied as one,
  // at the newest of them: still a whole revision etcd had, never a backlog
  // of stale ones applied one by one. Without a backlog, each event is
  // applied at its own revision, as before.
  struct Pending {
    absl::Mutex mu;
    int64_t newest ABSL_GUARDED_BY(mu) = 0;  // the newest event's revision
    bool ended ABSL_GUARDED_BY(mu) = false;  // the stream ended ...
    absl::Status why ABSL_GUARDED_BY(mu);    // ... for this reason (OK: it just ended)
  } pending;
  std::thread reader;
  if (wrote) {
    reader = std::thread([&] {
      absl::Status why = absl::OkStatus();
      size_t created = 0;
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
        if (response.created() && ++created == keys.size()) applier_.SetStale(false);
        int64_t newest = 0;
        for (const mvccpb::Event& e : response.events()) {
          newest = std::max(newest, e.kv().mod_revision());
        }
        if (newest > 0) {
          absl::MutexLock lock(&pending.mu);
          pending.newest = std::max(pending.newest, newest);
        }
      }
      absl::MutexLock lock(&pending.mu);
      pending.ended = true;
      pending.why = why;
    });
  }
  absl::Status result = absl::OkStatus();
  int64_t synced = start - 1;  // the host has seen up to here
  while (wrote && !stopping()) {
    int64_t target = 0;
    {
      absl::MutexLock lock(&pending.mu);
      const auto ready = [&pending, &synced]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pending.mu) {
        return pending.newest > synced || pending.ended;
      };
      pending.mu.Await(absl::Condition(&ready));
      if (pending.newest <= synced) {  // ended, and everything it read is applied
        result = pending.why;
        break;
      }
      target = pending.newest;
    }
    if (stopping()) break;
    if (target <= applier_.View().seen_revision) {  // an edit of this host's applied it first
      synced = target;
      continue;
    }
    absl::StatusOr<int64_t> done = Sync(target);
    // Compacted between the event and the read: read the current revision.
    if (absl::IsOutOfRange(done.status())) done = Sync(0);
    if (!done.ok()) {
      result = done.status();
      break;
    }
    synced = std::max(synced, std::max(target, *done));
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
  // With a last good revision (from disk), resume from it; otherwise list.
  bool need_list = applier_.View().seen_revision <= 0;
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
      status = WatchFrom(applier_.View().seen_revision + 1);
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
