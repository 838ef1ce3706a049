#include "server/emulator_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "emulator/trap_convert.h"
#include "fleet/fleet.h"
#include "server/rpc_common.h"
#include "x86/msr_catalog.h"

namespace pvemu::server {

std::unique_ptr<dispatch::Dispatcher::Session> EmulatorServiceImpl::Borrow() {
  {
    absl::MutexLock lock(&pool_mu_);
    if (!pool_.empty()) {
      auto session = std::move(pool_.back());
      pool_.pop_back();
      return session;
    }
  }
  return dispatcher_.NewSession();
}

void EmulatorServiceImpl::Return(std::unique_ptr<dispatch::Dispatcher::Session> session) {
  absl::MutexLock lock(&pool_mu_);
  pool_.push_back(std::move(session));
}

namespace {

// Converts and handles one trap message; InvalidArgument for a malformed one.
absl::Status HandleOne(dispatch::Dispatcher::Session& session, const v1::Trap& request,
                       v1::Outcome* response) {
  absl::StatusOr<emulator::Trap> trap = emulator::TrapFromProto(request);
  if (!trap.ok()) return trap.status();
  emulator::Instruction insn;
  emulator::DecodeError error;
  emulator::Outcome outcome = session.Handle(*trap, &insn, &error);
  dispatch::FillOutcome(*trap, outcome, insn, error, session.generation(), response);
  return absl::OkStatus();
}

}  // namespace

// Emulating changes guest-visible state (shadow registers, host MSRs), so it
// is an editor's right, like a policy edit.
grpc::Status EmulatorServiceImpl::Emulate(grpc::ServerContext* context, const v1::Trap* request,
                                          v1::Outcome* response) {
  REQUIRE_ROLE(Role::kEditor, "emulating");
  HOLD_STREAM(hold, "EmulateStream");
  std::unique_ptr<dispatch::Dispatcher::Session> session = Borrow();
  absl::Status status = HandleOne(*session, *request, response);
  Return(std::move(session));
  return ToGrpc(status);
}

grpc::Status EmulatorServiceImpl::EmulateStream(
    grpc::ServerContext* context, grpc::ServerReaderWriter<v1::Outcome, v1::Trap>* stream) {
  REQUIRE_ROLE(Role::kEditor, "emulating");
  HOLD_STREAM(hold, "EmulateStream");
  std::unique_ptr<dispatch::Dispatcher::Session> session = dispatcher_.NewSession();
  v1::Trap request;
  v1::Outcome response;
  uint64_t index = 0;
  while (stream->Read(&request)) {
    response.Clear();
    absl::Status status = HandleOne(*session, request, &response);
    if (!status.ok()) {
      // One answer per trap, in order: a malformed trap ends the stream with
      // its position rather than leaving the client to guess which it was.
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("trap #", index, " of the stream: ", status.message()));
    }
    if (!stream->Write(response)) break;
    ++index;
  }
  return grpc::Status::OK;
}

namespace {

// The MSR counts (sorted by domain, MSR) as one MsrStats per (domain, MSR).
void FillMsrStats(const std::vector<dispatch::MsrCount>& counts, const v1::StatsRequest& request,
                  v1::StatsResponse* response) {
  v1::MsrStats* line = nullptr;
  for (const dispatch::MsrCount& c : counts) {
    if (request.has_domain() && c.domain != request.domain()) continue;
    const bool same = line != nullptr && line->domain_other() == !c.domain.has_value() &&
                      line->domain() == c.domain.value_or(0) &&
                      line->msr_other() == !c.msr.has_value() && line->msr() == c.msr.value_or(0);
    if (!same) {
      line = response->add_msrs();
      line->set_domain(c.domain.value_or(0));
      line->set_domain_other(!c.domain.has_value());
      line->set_msr(c.msr.value_or(0));
      line->set_msr_other(!c.msr.has_value());
      if (c.msr.has_value()) line->set_name(std::string(x86::MsrName(*c.msr)));
    }
    if (c.write) {
      line->set_writes(line->writes() + c.count);
    } else {
      line->set_reads(line->reads() + c.count);
    }
    v1::MsrStats::ActionCount* action = line->add_actions();
    action->set_access(c.write ? "write" : "read");
    action->set_action(std::string(dispatch::MsrActionName(c.action)));
    action->set_count(c.count);
  }
}

}  // namespace

grpc::Status EmulatorServiceImpl::GetStats(grpc::ServerContext* context,
                                           const v1::StatsRequest* request,
                                           v1::StatsResponse* response) {
  REQUIRE_ROLE(Role::kReader, "reading");
  dispatch::TrapStats s = dispatcher_.Stats();
  response->set_traps(s.traps);
  response->set_completed(s.completed);
  response->set_exceptions(s.exceptions);
  response->set_unhandled(s.unhandled);
  response->set_device_io(s.device_io);
  response->set_decode_errors(s.decode_errors);
  if (kvm_ != nullptr) {
    // Traps the attached KVM data planes decided in their VMMs' processes.
    const KvmAttachments::Counts k = kvm_->counts();
    response->set_traps(response->traps() + k.traps);
    response->set_completed(response->completed() + k.completed);
    response->set_exceptions(response->exceptions() + k.exceptions);
    response->set_device_io(response->device_io() + k.device_io);
  }
  response->set_generation(dispatcher_.store().generation());
  response->set_edits(edits_.load(std::memory_order_relaxed));
  response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
  response->set_host(host_name_);
  response->set_host_vendor(dispatcher_.host().vendor());
  if (fleet_ != nullptr) *response->mutable_fleet() = fleet_->Self();
  if (request->msrs()) {
    if (!dispatcher_.counting_by_domain_and_msr()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this pvemud does not count MSR accesses: start pvemud with "
                          "--count-msrs or --metrics");
    }
    dispatch::Dispatcher::Counts counts = dispatcher_.CountsByKey();
    if (kvm_ != nullptr) kvm_->AddCountsTo(&counts);  // the KVM VMs' accesses too
    FillMsrStats(counts.msrs, *request, response);
  }
  if (request->learned()) {
    std::vector<dispatch::LearnedAccess> learned = dispatcher_.Learned();
    if (kvm_ != nullptr) kvm_->AddLearnedTo(&learned);
    for (const dispatch::LearnedAccess& a : learned) {
      if (request->has_domain() && a.domain != request->domain()) continue;
      dispatch::LearnedToProto(a, response->add_learned());
    }
  }
  return grpc::Status::OK;
}

}  // namespace pvemu::server
