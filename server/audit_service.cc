#include "server/audit_service.h"

#include <memory>

#include "absl/time/clock.h"
#include "server/rpc_common.h"

namespace pvemu::server {

grpc::Status AuditServiceImpl::Watch(grpc::ServerContext* context,
                                     const v1::WatchRequest* request,
                                     grpc::ServerWriter<v1::AuditEvent>* writer) {
  REQUIRE_ROLE(Role::kReader, "reading");
  HOLD_STREAM(hold, "Watch");
  std::shared_ptr<dispatch::AuditSubscription> sub = hub_.Subscribe(*request);
  // Tell the client the stream is live before the first event, so a watcher
  // started just before an edit does not miss it.
  writer->SendInitialMetadata();
  v1::AuditEvent event;
  grpc::Status status = grpc::Status::OK;
  while (!context->IsCancelled()) {
    if (!sub->Next(&event, absl::Now() + absl::Milliseconds(200))) {
      if (sub->closed()) break;
      continue;
    }
    if (!writer->Write(event)) break;
  }
  hub_.Unsubscribe(sub);
  return status;
}

}  // namespace pvemu::server
