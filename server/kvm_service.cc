#include "server/kvm_service.h"

#include <cstdio>
#include <string>

#include "server/rpc_common.h"

namespace pvemu::server {
namespace {

// Lines of a VM's log one ReportTraps stream may put in pvemud's: a data
// plane stops its first-access log at 4096 lines and says so, so an honest
// one stays well under this.
constexpr uint64_t kMaxLogLinesPerReport = 16384;

}  // namespace

grpc::Status KvmServiceImpl::SubscribePolicy(grpc::ServerContext* context,
                                             const v1::SubscribePolicyRequest* request,
                                             grpc::ServerWriter<v1::PolicyUpdate>* writer) {
  REQUIRE_ROLE(Role::kReader, "reading");
  HOLD_STREAM(hold, "SubscribePolicy");
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
  HOLD_STREAM(hold, "ReportTraps");
  const uint32_t pid = static_cast<uint32_t>(auth_.PeerPid(*context));
  v1::KvmTrapBatch batch;
  uint64_t logged = 0;
  while (reader->Read(&batch)) {
    if (absl::Status reported = attachments_.Report(pid, batch); !reported.ok()) {
      return ToGrpc(reported);
    }
    if (batch.events_dropped() != 0 || batch.unknown_events_dropped() != 0) {
      audit_.CountLost(batch.events_dropped(), batch.unknown_events_dropped());
    }
    for (const v1::TrapEvent& event : batch.events()) {
      audit_.PublishTrap(event, event.reason() == "unknown-msr");
    }
    // The VM's first accesses and learning lines, in pvemud's log with the
    // daemon's own, naming the process that decided them; a data plane caps
    // its own, and pvemud caps what one stream may print whatever it sends.
    for (const std::string& line : batch.log()) {
      if (logged < kMaxLogLinesPerReport) {
        std::fprintf(stderr, "pvemud: kvm pid %u: %s\n", pid, line.c_str());
      } else if (logged == kMaxLogLinesPerReport) {
        std::fprintf(stderr,
                     "pvemud: kvm pid %u: more than %llu log lines on one ReportTraps stream; "
                     "the rest of this stream's lines are not logged (its counts go on)\n",
                     pid, static_cast<unsigned long long>(kMaxLogLinesPerReport));
      }
      ++logged;
    }
  }
  return grpc::Status::OK;
}


}  // namespace pvemu::server
