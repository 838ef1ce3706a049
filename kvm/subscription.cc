#include "kvm/subscription.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "kvm/data_plane.h"
#include "pvemu/v1/service.grpc.pb.h"

namespace pvemu::kvm {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
constexpr absl::Duration kReportEvery = absl::Milliseconds(50);
// How long a closing VM waits for its last batch to reach pvemud.
constexpr absl::Duration kLastReportTimeout = absl::Seconds(2);

std::shared_ptr<grpc::Channel> Channel(const std::string& server) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Reconnect quickly once the daemon is back; gRPC's own backoff grows to
  // two minutes, too slow for a VM waiting on a restarted daemon.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kMaxBackoff)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kFirstBackoff)));
  return grpc::CreateCustomChannel(PolicySubscription::Target(server),
                                   grpc::InsecureChannelCredentials(), args);
}

absl::Status FromGrpc(const grpc::Status& status, const std::string& server) {
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::UnavailableError(absl::StrCat("cannot reach pvemud at ", server, ": ",
                                               status.error_message(),
                                               " (is pvemud running and listening there?)"));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("pvemud at ", server, ": ", status.error_message()));
}

// The VMM's stderr is the only place a library can speak without a logger
// of the VMM's; one line per event, never on the exit path.
void Log(const std::string& line) { std::fprintf(stderr, "pvemu-kvm: %s\n", line.c_str()); }

SubscribedPolicy FromUpdate(v1::PolicyUpdate& update, const std::string& server) {
  SubscribedPolicy p;
  p.policy = std::move(*update.mutable_policy());
  p.source = policy::SourceMap(absl::StrCat("pvemud ", server, " generation ", update.generation()));
  p.generation = update.generation();
  return p;
}

}  // namespace

std::string PolicySubscription::Target(const std::string& server) {
  if (absl::StartsWith(server, "unix:")) return server;
  return absl::StrCat("unix:", server);
}

absl::StatusOr<SubscribedPolicy> PolicySubscription::FetchFirst(const std::string& server,
                                                                uint32_t domain,
                                                                absl::Duration timeout) {
  std::shared_ptr<grpc::Channel> channel = Channel(server);
  std::unique_ptr<v1::KvmService::Stub> stub = v1::KvmService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  // Wait for the daemon to come up within the timeout rather than failing at
  // the first refused connection.
  context.set_wait_for_ready(true);
  v1::SubscribePolicyRequest request;
  request.set_domain(domain);
  std::unique_ptr<grpc::ClientReader<v1::PolicyUpdate>> reader =
      stub->SubscribePolicy(&context, request);
  v1::PolicyUpdate update;
  if (reader->Read(&update)) {
    context.TryCancel();
    reader->Finish().IgnoreError();
    return FromUpdate(update, server);
  }
  grpc::Status status = reader->Finish();
  if (status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("pvemud at ", server, " ended the policy stream before sending a policy"));
  }
  return FromGrpc(status, server);
}

struct PolicySubscription::Impl {
  DataPlane* plane;
  std::string server;
  uint32_t domain;
  std::shared_ptr<grpc::Channel> channel;

  absl::Mutex mu;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool following ABSL_GUARDED_BY(mu) = false;  // the policy stream sent its first update
  grpc::ClientContext* policy_call ABSL_GUARDED_BY(mu) = nullptr;
  grpc::ClientContext* report_call ABSL_GUARDED_BY(mu) = nullptr;
  std::thread policy_thread;
  std::thread report_thread;

  bool Stopping() {
    absl::MutexLock lock(&mu);
    return stopping;
  }
  // Sleeps `d` unless stopping; returns whether to go on.
  bool Backoff(absl::Duration d) {
    absl::MutexLock lock(&mu);
    auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return stopping; };
    mu.AwaitWithTimeout(absl::Condition(&stop), d);
    return !stopping;
  }
  // Until the policy stream sent its first update, or `timeout`.
  bool WaitFollowing(absl::Duration timeout) {
    absl::MutexLock lock(&mu);
    auto up = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return following || stopping; };
    mu.AwaitWithTimeout(absl::Condition(&up), timeout);
    return following;
  }
  // Registers the call so the destructor can cancel it; false when stopping.
  bool Begin(grpc::ClientContext** slot, grpc::ClientContext* context) {
    absl::MutexLock lock(&mu);
    if (stopping) return false;
    *slot = context;
    return true;
  }
  void End(grpc::ClientContext** slot) {
    absl::MutexLock lock(&mu);
    *slot = nullptr;
  }

  void FollowPolicy();
  void ReportCounts();
  // The batch to send now (cumulative) and, at close, the last one.
  v1::KvmTrapBatch Batch();
  void ReportLast();
};

void PolicySubscription::Impl::FollowPolicy() {
  std::unique_ptr<v1::KvmService::Stub> stub = v1::KvmService::NewStub(channel);
  absl::Duration backoff = kFirstBackoff;
  while (!Stopping()) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    if (!Begin(&policy_call, &context)) break;
    v1::SubscribePolicyRequest request;
    request.set_domain(domain);
    std::unique_ptr<grpc::ClientReader<v1::PolicyUpdate>> reader =
        stub->SubscribePolicy(&context, request);
    v1::PolicyUpdate update;
    while (reader->Read(&update)) {
      backoff = kFirstBackoff;  // connected: the next outage starts afresh
      {
        absl::MutexLock lock(&mu);
        following = true;
      }
      if (update.generation() == plane->generation()) continue;
      SubscribedPolicy p = FromUpdate(update, server);
      absl::Status applied = plane->Apply(p.policy, p.source, p.generation);
      if (!applied.ok()) {
        // Keep serving the last good policy; the daemon's validation runs on
        // the daemon's host and cannot see that KVM refuses this one.
        Log(absl::StrCat("domain ", domain, ": generation ", p.generation,
                         " not applied, keeping generation ", plane->generation(), ": ",
                         applied.message()));
      }
    }
    grpc::Status status = reader->Finish();
    End(&policy_call);
    if (Stopping()) break;
    Log(absl::StrCat("domain ", domain, ": policy stream from ", server, " ended (",
                     status.error_message(), "); running on generation ", plane->generation(),
                     ", reconnecting in ", absl::FormatDuration(backoff)));
    if (!Backoff(backoff)) break;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void PolicySubscription::Impl::ReportCounts() {
  std::unique_ptr<v1::KvmService::Stub> stub = v1::KvmService::NewStub(channel);
  absl::Duration backoff = kFirstBackoff;
  while (!Stopping()) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    if (!Begin(&report_call, &context)) break;
    v1::KvmReportResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::KvmTrapBatch>> writer =
        stub->ReportTraps(&context, &response);
    bool ok = true;
    while (ok && Backoff(kReportEvery)) {
      v1::KvmTrapBatch batch = Batch();
      ok = writer->Write(batch);
      if (ok) backoff = kFirstBackoff;
    }
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    End(&report_call);
    if (Stopping()) break;
    (void)status;  // the policy stream logs the outage once
    if (!Backoff(backoff)) break;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

v1::KvmTrapBatch PolicySubscription::Impl::Batch() {
  // Everything since the plane opened: a batch replaces the previous one at
  // pvemud, so none is lost or counted twice across reconnects.
  const DataPlane::Totals now = plane->totals();
  v1::KvmTrapBatch batch;
  batch.set_domain(domain);
  batch.set_vcpus(now.vcpus);
  batch.set_generation(plane->generation());
  batch.set_traps(now.stats.rdmsr + now.stats.wrmsr + now.stats.io);
  batch.set_completed(now.stats.completed);
  batch.set_exceptions(now.stats.exceptions);
  batch.set_device_io(now.stats.device);
  plane->DrainAudit(&batch);
  plane->FillReport(&batch);
  return batch;
}

void PolicySubscription::Impl::ReportLast() {
  // The VM is closing (its vCPUs are): one last batch on a call of its own,
  // bounded, so that a daemon that is away delays the VMM's close by at
  // most kLastReportTimeout.
  std::unique_ptr<v1::KvmService::Stub> stub = v1::KvmService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kLastReportTimeout));
  v1::KvmReportResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::KvmTrapBatch>> writer =
      stub->ReportTraps(&context, &response);
  v1::KvmTrapBatch batch = Batch();
  batch.set_last(true);
  const bool sent = writer->Write(batch);
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!sent || !status.ok()) {
    Log(absl::StrCat("domain ", domain, ": the last counts did not reach pvemud at ", server,
                     " within ", absl::FormatDuration(kLastReportTimeout), " (",
                     status.error_message(), ")"));
  }
}

PolicySubscription::PolicySubscription(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<PolicySubscription> PolicySubscription::Start(DataPlane* plane,
                                                              const std::string& server,
                                                              uint32_t domain) {
  auto impl = std::make_unique<Impl>();
  impl->plane = plane;
  impl->server = server;
  impl->domain = domain;
  impl->channel = Channel(server);
  Impl* raw = impl.get();
  impl->policy_thread = std::thread([raw] { raw->FollowPolicy(); });
  impl->report_thread = std::thread([raw] { raw->ReportCounts(); });
  return std::unique_ptr<PolicySubscription>(new PolicySubscription(std::move(impl)));
}

bool PolicySubscription::WaitFollowing(absl::Duration timeout) {
  return impl_->WaitFollowing(timeout);
}

PolicySubscription::~PolicySubscription() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
    if (impl_->policy_call != nullptr) impl_->policy_call->TryCancel();
    if (impl_->report_call != nullptr) impl_->report_call->TryCancel();
  }
  impl_->policy_thread.join();
  impl_->report_thread.join();
  impl_->ReportLast();
}

}  // namespace pvemu::kvm
