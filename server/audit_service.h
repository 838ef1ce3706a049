// AuditService: the stream of policy edits and trap events (Watch) from
// the daemon's audit hub.
#ifndef PVEMU_SERVER_AUDIT_SERVICE_H_
#define PVEMU_SERVER_AUDIT_SERVICE_H_

#include "dispatch/audit.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/auth.h"

namespace pvemu::server {

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

#endif  // PVEMU_SERVER_AUDIT_SERVICE_H_
