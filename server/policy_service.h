// PolicyService: reading and editing the live policy (GetPolicy,
// ApplyPolicy, SetRule, DeleteRule, SetMode, DiffPolicy, ListDomains,
// Explain), thin
// translations between pvemu.v1 messages and policy::Store; in fleet mode a
// domain overlay's edit goes to etcd through fleet::Fleet.
#ifndef PVEMU_SERVER_POLICY_SERVICE_H_
#define PVEMU_SERVER_POLICY_SERVICE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fleet/editor.h"
#include "policy/explain.h"
#include "policy/store.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/auth.h"
#include "server/kvm_attachments.h"
#include "server/metrics.h"

namespace pvemu::fleet {
class Fleet;  // fleet/fleet.h
}

namespace pvemu::server {

// Live domains as the host reports them (xen); null for hosts that have no
// notion of domains (sim, linux).
using LiveDomainsFn = std::function<absl::StatusOr<std::vector<v1::DomainInfo>>()>;

class PolicyServiceImpl final : public v1::PolicyService::Service {
 public:
  // `metrics` (may be null) counts and times the edits that reach the store.
  // `kvm` (may be null) adds the attached KVM data planes to ListDomains.
  PolicyServiceImpl(policy::Store& store, const Authorizer& auth, LiveDomainsFn live,
                    RpcMetrics* metrics = nullptr, const KvmAttachments* kvm = nullptr)
      : store_(store), auth_(auth), live_(std::move(live)), metrics_(metrics), kvm_(kvm) {}

  grpc::Status GetPolicy(grpc::ServerContext* context, const v1::GetPolicyRequest* request,
                         v1::GetPolicyResponse* response) override;
  grpc::Status ApplyPolicy(grpc::ServerContext* context, const v1::ApplyPolicyRequest* request,
                           v1::EditResponse* response) override;
  grpc::Status SetRule(grpc::ServerContext* context, const v1::SetRuleRequest* request,
                       v1::EditResponse* response) override;
  grpc::Status DeleteRule(grpc::ServerContext* context, const v1::DeleteRuleRequest* request,
                          v1::EditResponse* response) override;
  grpc::Status SetMode(grpc::ServerContext* context, const v1::SetModeRequest* request,
                       v1::EditResponse* response) override;
  grpc::Status DiffPolicy(grpc::ServerContext* context, const v1::DiffPolicyRequest* request,
                          v1::DiffPolicyResponse* response) override;
  grpc::Status ListDomains(grpc::ServerContext* context, const v1::ListDomainsRequest* request,
                           v1::ListDomainsResponse* response) override;
  grpc::Status Explain(grpc::ServerContext* context, const v1::ExplainRequest* request,
                       v1::ExplainResponse* response) override;

  // Fleet mode: edits of a domain overlay go to this host's domain key in
  // etcd; edits of the default layer or the whole policy are refused,
  // pointing at `pvemuctl fleet`. Set before serving.
  void SetFleet(fleet::Fleet* fleet) { fleet_ = fleet; }
  // What the host carries out of an explained decision (ExplainResponse's
  // host_note; the Xen host's XenMsrNote/XenPortNote). Set before serving.
  using HostNoteFn = std::function<std::string(const policy::Explanation&)>;
  void SetHostNote(HostNoteFn note) { host_note_ = std::move(note); }

 private:
  // Fleet mode's edit of this host's overlay of `domain` (kApply with
  // `textproto`, or a rule edit with `rule`).
  grpc::Status FleetDomainEdit(grpc::ServerContext* context, fleet::LevelEdit::Op op, uint32_t domain,
                               const std::string& textproto, const std::string& source_name,
                               const v1::MsrRule* rule, uint64_t if_generation,
                               v1::EditResponse* response);

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
  const KvmAttachments* kvm_;
  fleet::Fleet* fleet_ = nullptr;
  HostNoteFn host_note_;
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_POLICY_SERVICE_H_
