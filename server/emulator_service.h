// EmulatorService: traps through the dispatcher (Emulate, EmulateStream)
// and the daemon's statistics (GetStats), the KVM data planes' included.
#ifndef PVEMU_SERVER_EMULATOR_SERVICE_H_
#define PVEMU_SERVER_EMULATOR_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dispatch/dispatch.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/auth.h"
#include "server/kvm_attachments.h"

namespace pvemu::fleet {
class Fleet;  // fleet/fleet.h
}

namespace pvemu::server {

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

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_EMULATOR_SERVICE_H_
