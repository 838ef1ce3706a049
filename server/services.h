// The gRPC services of pvemud: thin translations between pvemu.v1 messages
// and the policy store, the dispatcher and the audit hub. No business logic
// lives here; absl::Status becomes grpc::Status only in this file.
#ifndef PVEMU_SERVER_SERVICES_H_
#define PVEMU_SERVER_SERVICES_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "policy/explain.h"
#include "policy/store.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "dispatch/audit.h"
#include "server/auth.h"
#include "dispatch/dispatch.h"
#include "server/metrics.h"

namespace pvemu::server {

namespace fleet {
class Fleet;  // server/fleet/fleet.h
}

// Live domains as the host reports them (xen); null for hosts that have no
// notion of domains (sim, linux).
using LiveDomainsFn = std::function<absl::StatusOr<std::vector<v1::DomainInfo>>()>;

grpc::Status ToGrpc(const absl::Status& status);

// The refusal every service gives a peer without the role: `what` is
// "reading" or "editing", and the message names the peer and the flag that
// grants the role.
grpc::Status Denied(absl::string_view what, const Authorizer& auth,
                    const grpc::ServerContext& context);
// Whether the peer may read (edit false) or edit (edit true): editors may
// also read.
bool Allowed(const Authorizer& auth, const grpc::ServerContext& context, bool edit);

// The KVM data planes (libpvemu-kvm) following this daemon: which domain
// each serves in which process, and the traps they report. Thread-safe; off
// every trap path (a data plane reports in batches).
class KvmAttachments {
 public:
  struct Attachment {
    uint32_t domain = 0;
    uint32_t pid = 0;
    uint32_t vcpus = 0;
    uint64_t generation = 0;  // the generation the data plane applies
  };
  struct Counts {
    uint64_t traps = 0, completed = 0, exceptions = 0, device_io = 0;
  };
  // A policy subscription began; returns its key for Detach.
  uint64_t Attach(uint32_t domain, uint32_t pid, uint32_t vcpus);
  void Detach(uint64_t key);
  // A batch from the data plane of `domain` in process `pid`.
  void Report(uint32_t pid, const v1::KvmTrapBatch& batch);
  std::vector<Attachment> List() const;  // by domain, then pid
  Counts counts() const;

  // The policy moved to `generation` (the daemon's edit listener calls this).
  void PolicyChanged(uint64_t generation);
  // Waits until a generation other than `sent` was announced, or `timeout`
  // passed; returns whether one was. Policy streams wait here instead of
  // polling the store.
  bool WaitForPolicy(uint64_t sent, absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Attachment> by_key_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
  uint64_t announced_generation_ ABSL_GUARDED_BY(mu_) = 0;
};

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
  grpc::Status FleetDomainEdit(grpc::ServerContext* context, int op, uint32_t domain,
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

class EmulatorServiceImpl final : public v1::EmulatorService::Service {
 public:
  // `kvm` (may be null): the attached KVM data planes' traps join GetStats.
  EmulatorServiceImpl(dispatch::Dispatcher& dispatcher, const Authorizer& auth,
                      std::string host_name, const KvmAttachments* kvm = nullptr)
      : dispatcher_(dispatcher), auth_(auth), host_name_(std::move(host_name)),
        started_(absl::Now()), kvm_(kvm) {}

  grpc::Status Emulate(grpc::ServerContext* context, const v1::Trap* request,
                       v1::Outcome* response) override;
  grpc::Status EmulateStream(grpc::ServerContext* context,
                             grpc::ServerReaderWriter<v1::Outcome, v1::Trap>* stream) override;
  grpc::Status GetStats(grpc::ServerContext* context, const v1::StatsRequest* request,
                        v1::StatsResponse* response) override;

  // Edits accepted since start (the daemon's edit listener counts them).
  void CountEdit() { edits_.fetch_add(1, std::memory_order_relaxed); }
  // Fleet mode: GetStats reports where the policy came from. Set before serving.
  void SetFleet(const fleet::Fleet* fleet) { fleet_ = fleet; }

 private:
  // Unary calls borrow a session from a pool instead of creating one per call.
  std::unique_ptr<dispatch::Dispatcher::Session> Borrow();
  void Return(std::unique_ptr<dispatch::Dispatcher::Session> session);

  dispatch::Dispatcher& dispatcher_;
  const Authorizer& auth_;
  const std::string host_name_;
  const absl::Time started_;
  const KvmAttachments* kvm_;
  const fleet::Fleet* fleet_ = nullptr;
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

// The KVM data plane's control link: the policy stream (reader role) and
// the trap reports (editor role).
class KvmServiceImpl final : public v1::KvmService::Service {
 public:
  // `audit` receives the reported audit events as trap events.
  KvmServiceImpl(const policy::Store& store, const Authorizer& auth, KvmAttachments& attachments,
                 dispatch::AuditHub& audit)
      : store_(store), auth_(auth), attachments_(attachments), audit_(audit) {}

  grpc::Status SubscribePolicy(grpc::ServerContext* context,
                               const v1::SubscribePolicyRequest* request,
                               grpc::ServerWriter<v1::PolicyUpdate>* writer) override;
  grpc::Status ReportTraps(grpc::ServerContext* context,
                           grpc::ServerReader<v1::KvmTrapBatch>* reader,
                           v1::KvmReportResponse* response) override;

 private:
  const policy::Store& store_;
  const Authorizer& auth_;
  KvmAttachments& attachments_;
  dispatch::AuditHub& audit_;
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_SERVICES_H_
