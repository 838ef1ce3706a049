// KvmService: the KVM data plane's control link to pvemud: the policy
// stream (reader role) and the trap reports (editor role).
#ifndef PVEMU_SERVER_KVM_SERVICE_H_
#define PVEMU_SERVER_KVM_SERVICE_H_

#include "dispatch/audit.h"
#include "policy/store.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/auth.h"
#include "server/kvm_attachments.h"

namespace pvemu::server {

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

#endif  // PVEMU_SERVER_KVM_SERVICE_H_
