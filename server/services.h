// The gRPC services of pvemud: thin translations between pvemu.v1 messages
// and the policy store, the dispatcher and the audit hub. No business logic
// lives here; absl::Status becomes grpc::Status only in this file.
#ifndef PVEMU_SERVER_SERVICES_H_
#define PVEMU_SERVER_SERVICES_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "policy/store.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "dispatch/audit.h"
#include "server/auth.h"
#include "dispatch/dispatch.h"
#include "server/metrics.h"

namespace pvemu::server {

// Live domains as the host reports them (xen); null for hosts that have no
// notion of domains (sim, linux).
using LiveDomainsFn = std::function<absl::StatusOr<std::vector<v1::DomainInfo>>()>;

grpc::Status ToGrpc(const absl::Status& status);

class PolicyServiceImpl final : public v1::PolicyService::Service {
 public:
  // `metrics` (may be null) counts and times the edits that reach the store.
  PolicyServiceImpl(policy::Store& store, const Authorizer& auth, LiveDomainsFn live,
                    RpcMetrics* metrics = nullptr)
      : store_(store), auth_(auth), live_(std::move(live)), metrics_(metrics) {}

  grpc::Status GetPolicy(grpc::ServerContext* context, const v1::GetPolicyRequest* request,
                         v1::GetPolicyResponse* response) override;
  grpc::Status ApplyPolicy(grpc::ServerContext* context, const v1::ApplyPolicyRequest* request,
                           v1::EditResponse* response) override;
  grpc::Status SetRule(grpc::ServerContext* context, const v1::SetRuleRequest* request,
                       v1::EditResponse* response) override;
  grpc::Status DeleteRule(grpc::ServerContext* context, const v1::DeleteRuleRequest* request,
                          v1::EditResponse* response) override;
  grpc::Status DiffPolicy(grpc::ServerContext* context, const v1::DiffPolicyRequest* request,
                          v1::DiffPolicyResponse* response) override;
  grpc::Status ListDomains(grpc::ServerContext* context, const v1::ListDomainsRequest* request,
                           v1::ListDomainsResponse* response) override;
  grpc::Status Explain(grpc::ServerContext* context, const v1::ExplainRequest* request,
                       v1::ExplainResponse* response) override;

 private:
  // Store::SetRule or Store::DeleteRule.
  using RuleEdit = absl::StatusOr<policy::EditResult> (policy::Store::*)(
      policy::LayerRef, const v1::MsrRule&, const policy::EditOptions&);
  // SetRule and DeleteRule: `edit` on the request's rule in its layer, for
  // editors only.
  template <typename Request>
  grpc::Status EditRule(grpc::ServerContext* context, const Request& request, RuleEdit edit,
                        v1::EditResponse* response);
  // Runs one edit against the store, counted and timed for /metrics.
  template <typename Edit>
  absl::StatusOr<policy::EditResult> Timed(Edit edit);

  policy::Store& store_;
  const Authorizer& auth_;
  LiveDomainsFn live_;
  RpcMetrics* metrics_;
};

class EmulatorServiceImpl final : public v1::EmulatorService::Service {
 public:
  EmulatorServiceImpl(dispatch::Dispatcher& dispatcher, const Authorizer& auth, std::string host_name)
      : dispatcher_(dispatcher), auth_(auth), host_name_(std::move(host_name)),
        started_(absl::Now()) {}

  grpc::Status Emulate(grpc::ServerContext* context, const v1::Trap* request,
                       v1::Outcome* response) override;
  grpc::Status EmulateStream(grpc::ServerContext* context,
                             grpc::ServerReaderWriter<v1::Outcome, v1::Trap>* stream) override;
  grpc::Status GetStats(grpc::ServerContext* context, const v1::StatsRequest* request,
                        v1::StatsResponse* response) override;

  // Edits accepted since start (the daemon's edit listener counts them).
  void CountEdit() { edits_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // Unary calls borrow a session from a pool instead of creating one per call.
  std::unique_ptr<dispatch::Dispatcher::Session> Borrow();
  void Return(std::unique_ptr<dispatch::Dispatcher::Session> session);

  dispatch::Dispatcher& dispatcher_;
  const Authorizer& auth_;
  const std::string host_name_;
  const absl::Time started_;
  std::atomic<uint64_t> edits_{0};
  absl::Mutex pool_mu_;
  std::vector<std::unique_ptr<dispatch::Dispatcher::Session>> pool_ ABSL_GUARDED_BY(pool_mu_);
};

class AuditServiceImpl final : public v1::AuditService::Service {
 public:
  AuditServiceImpl(dispatch::AuditHub& hub, const Authorizer& auth) : hub_(hub), auth_(auth) {}

  grpc::Status Watch(grpc::ServerContext* context, const v1::WatchRequest* request,
                     grpc::ServerWriter<v1::AuditEvent>* writer) override;

 private:
  dispatch::AuditHub& hub_;
  const Authorizer& auth_;
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_SERVICES_H_
