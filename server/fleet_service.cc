#include "server/fleet_service.h"

#include "absl/strings/str_cat.h"
#include "server/rpc_common.h"

namespace pvemu::server {

grpc::Status FleetServiceImpl::GetStatus(grpc::ServerContext* context,
                                         const v1::FleetStatusRequest*,
                                         v1::FleetStatusResponse* response) {
  if (!Allowed(auth_, *context, false)) return Denied("reading", auth_, *context);
  *response = fleet_.Status();
  return grpc::Status::OK;
}

grpc::Status FleetServiceImpl::GetLayer(grpc::ServerContext* context,
                                        const v1::GetLayerRequest* request,
                                        v1::GetLayerResponse* response) {
  if (!Allowed(auth_, *context, false)) return Denied("reading", auth_, *context);
  absl::StatusOr<fleet::LevelName> layer = fleet::ParseLevelName(request->layer());
  if (!layer.ok()) return ToGrpc(layer.status());
  absl::StatusOr<v1::GetLayerResponse> got = fleet_.GetLayer(*layer);
  if (!got.ok()) return ToGrpc(got.status());
  *response = *std::move(got);
  return grpc::Status::OK;
}

grpc::Status FleetServiceImpl::ApplyLayer(grpc::ServerContext* context,
                                          const v1::FleetApplyRequest* request,
                                          v1::FleetEditResponse* response) {
  if (!Allowed(auth_, *context, true)) return Denied("editing", auth_, *context);
  absl::StatusOr<fleet::LevelName> layer = fleet::ParseLevelName(request->layer());
  if (!layer.ok()) return ToGrpc(layer.status());
  fleet::LevelEdit edit;
  edit.op = fleet::LevelEdit::kApply;
  edit.level = *layer;
  edit.who = auth_.Describe(*context);
  edit.if_revision = request->if_revision();
  edit.textproto = request->textproto();
  edit.source_name = request->source_name();
  absl::StatusOr<v1::FleetEditResponse> done = fleet_.Edit(edit);
  if (!done.ok()) return ToGrpc(done.status());
  *response = *std::move(done);
  return grpc::Status::OK;
}

grpc::Status FleetServiceImpl::RuleEdit(grpc::ServerContext* context,
                                        const v1::FleetRuleRequest& request,
                                        fleet::LevelEdit::Op op,
                                        v1::FleetEditResponse* response) {
  if (!Allowed(auth_, *context, true)) return Denied("editing", auth_, *context);
  absl::StatusOr<fleet::LevelName> layer = fleet::ParseLevelName(request.layer());
  if (!layer.ok()) return ToGrpc(layer.status());
  fleet::LevelEdit edit;
  edit.op = op;
  edit.level = *layer;
  edit.who = auth_.Describe(*context);
  edit.if_revision = request.if_revision();
  edit.rule = request.rule();
  if (request.has_domain()) edit.domain = request.domain();
  absl::StatusOr<v1::FleetEditResponse> done = fleet_.Edit(edit);
  if (!done.ok()) return ToGrpc(done.status());
  *response = *std::move(done);
  return grpc::Status::OK;
}

grpc::Status FleetServiceImpl::SetRule(grpc::ServerContext* context,
                                       const v1::FleetRuleRequest* request,
                                       v1::FleetEditResponse* response) {
  return RuleEdit(context, *request, fleet::LevelEdit::kSetRule, response);
}

grpc::Status FleetServiceImpl::DeleteRule(grpc::ServerContext* context,
                                          const v1::FleetRuleRequest* request,
                                          v1::FleetEditResponse* response) {
  return RuleEdit(context, *request, fleet::LevelEdit::kDeleteRule, response);
}

}  // namespace pvemu::server
