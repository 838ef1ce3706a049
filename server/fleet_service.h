// pvemud's FleetService (fleet mode only): thin translations between the
// pvemu.v1 fleet messages and fleet/fleet.h, with the same roles
// (SO_PEERCRED, --readers/--editors) as every other service.
#ifndef PVEMU_SERVER_FLEET_SERVICE_H_
#define PVEMU_SERVER_FLEET_SERVICE_H_

#include "pvemu/v1/service.grpc.pb.h"
#include "server/auth.h"
#include "fleet/fleet.h"

namespace pvemu::server {

class FleetServiceImpl final : public v1::FleetService::Service {
 public:
  FleetServiceImpl(fleet::Fleet& fleet, const Authorizer& auth) : fleet_(fleet), auth_(auth) {}

  grpc::Status GetStatus(grpc::ServerContext* context, const v1::FleetStatusRequest* request,
                         v1::FleetStatusResponse* response) override;
  grpc::Status GetLayer(grpc::ServerContext* context, const v1::GetLayerRequest* request,
                        v1::GetLayerResponse* response) override;
  grpc::Status ApplyLayer(grpc::ServerContext* context, const v1::FleetApplyRequest* request,
                          v1::FleetEditResponse* response) override;
  grpc::Status SetRule(grpc::ServerContext* context, const v1::FleetRuleRequest* request,
                       v1::FleetEditResponse* response) override;
  grpc::Status DeleteRule(grpc::ServerContext* context, const v1::FleetRuleRequest* request,
                          v1::FleetEditResponse* response) override;

 private:
  grpc::Status RuleEdit(grpc::ServerContext* context, const v1::FleetRuleRequest& request,
                        fleet::LevelEdit::Op op, v1::FleetEditResponse* response);

  fleet::Fleet& fleet_;
  const Authorizer& auth_;
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_FLEET_SERVICE_H_
