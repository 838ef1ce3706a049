#include "server/kvm_service.h"

#include <cstdio>
#include <string>

#include "server/rpc_common.h"

namespace pvemu::server {

grpc::Status KvmServiceImpl::SubscribePolicy(grpc::ServerContext* context,
                                             const v1::SubscribePolicyRequest* request,
                                             grpc::ServerWriter<v1::PolicyUpdate>* writer) {
  REQUIRE_ROLE(Role::kReader, "reading");
  const uint64_t key =
      attachments_.Attach(request->domain(), static_cast<uint32_t>(auth_.PeerPid(*context)),
                          request->vcpus());
  uint64_t sent = 0;
  while (!context->IsCancelled()) {
    if (store_.generation() != sent) {
      std::shared_ptr<const policy::Snapshot> snap = store_.Current();
      v1::PolicyUpdate update;
      update.set_generation(snap->generation());
      *update.mutable_policy() = snap->policy();
      if (!writer->Write(update)) break;
      sent = snap->generation();
      continue;
    }
    // Woken by the edit listener; the timeout only bounds how late a
    // cancelled stream notices.
    attachments_.WaitForPolicy(sent, absl::Milliseconds(200));
  }
  attachments_.Detach(key);
  return grpc::Status::OK;
}

grpc::Status KvmServiceImpl::ReportTraps(grpc::ServerContext* context,
                                         grpc::ServerReader<v1::KvmTrapBatch>* reader,
                                         v1::KvmReportResponse*) {
  REQUIRE_ROLE(Role::kEditor, "editing");
  const uint32_t pid = static_cast<uint32_t>(auth_.PeerPid(*context));
  v1::KvmTrapBatch batch;
  while (reader->Read(&batch)) {
    attachments_.Report(pid, batch);
    if (batch.events_dropped() != 0 || batch.unknown_events_dropped() != 0) {
      audit_.CountLost(batch.events_dropped(), batch.unknown_events_dropped());
    }
    for (const v1::TrapEvent& event : batch.events()) {
      audit_.PublishTrap(event, event.reason() == "unknown-msr");
    }
    // The VM's first accesses and learning lines, in pvemud's log with the
    // daemon's own, naming the process that decided them.
    for (const std::string& line : batch.log()) {
      std::fprintf(stderr, "pvemud: kvm pid %u: %s\n", pid, line.c_str());
    }
  }
  return grpc::Status::OK;
}


}  // namespace pvemu::server
