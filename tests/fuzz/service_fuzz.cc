// Fuzzes the gRPC request handlers: the first byte picks an RPC, the rest is
// decoded as that RPC's request message and sent to a real in-process pvemud
// (server/daemon.h) over its Unix socket. Whatever the request, the daemon
// answers with a status and keeps serving: every input ends with a GetPolicy
// that must succeed.
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/create_channel.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "server/daemon.h"

namespace {

struct Target {
  std::unique_ptr<pvemu::server::Daemon> daemon;
  std::unique_ptr<pvemu::v1::PolicyService::Stub> policy;
  std::unique_ptr<pvemu::v1::EmulatorService::Stub> emulator;
};

Target& GetTarget() {
  static Target* target = [] {
    auto* t = new Target;
    static std::string dir = (std::filesystem::temp_directory_path() / "pvemu-fuzz.XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) abort();
    // The daemon serves until the process ends; its socket's directory goes
    // with it (every corpus replay and fuzz run left one behind).
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    });
    pvemu::server::DaemonOptions options;
    options.listen = "unix://" + dir + "/s.sock";
    options.state_dir = "";  // in memory: fuzzing must not wear the disk
    std::vector<std::string> warnings;
    auto daemon = pvemu::server::Daemon::Start(options, &warnings);
    if (!daemon.ok()) {
      std::fprintf(stderr, "%s\n", std::string(daemon.status().message()).c_str());
      abort();
    }
    t->daemon = std::move(*daemon);
    auto channel = grpc::CreateChannel(options.listen, grpc::InsecureChannelCredentials());
    t->policy = pvemu::v1::PolicyService::NewStub(channel);
    t->emulator = pvemu::v1::EmulatorService::NewStub(channel);
    return t;
  }();
  return *target;
}

template <typename Request, typename Response, typename Call>
void Send(const uint8_t* data, size_t size, Call call) {
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  Response response;
  grpc::Status status = call(&context, request, &response);
  // A handler must answer, never hang: DEADLINE_EXCEEDED is a finding.
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Target& t = GetTarget();
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  using namespace pvemu::v1;
  auto* p = t.policy.get();
  auto* e = t.emulator.get();
  switch (data[0] % 8) {
    case 0:
      Send<GetPolicyRequest, GetPolicyResponse>(body, n, [&](auto* c, auto& r, auto* o) { return p->GetPolicy(c, r, o); });
      break;
    case 1:
      Send<ApplyPolicyRequest, EditResponse>(body, n, [&](auto* c, auto& r, auto* o) { return p->ApplyPolicy(c, r, o); });
      break;
    case 2:
      Send<SetRuleRequest, EditResponse>(body, n, [&](auto* c, auto& r, auto* o) { return p->SetRule(c, r, o); });
      break;
    case 3:
      Send<DeleteRuleRequest, EditResponse>(body, n, [&](auto* c, auto& r, auto* o) { return p->DeleteRule(c, r, o); });
      break;
    case 4:
      Send<DiffPolicyRequest, DiffPolicyResponse>(body, n, [&](auto* c, auto& r, auto* o) { return p->DiffPolicy(c, r, o); });
      break;
    case 5:
      Send<ExplainRequest, ExplainResponse>(body, n, [&](auto* c, auto& r, auto* o) { return p->Explain(c, r, o); });
      break;
    case 6:
      Send<Trap, Outcome>(body, n, [&](auto* c, auto& r, auto* o) { return e->Emulate(c, r, o); });
      break;
    default:
      Send<ListDomainsRequest, ListDomainsResponse>(body, n, [&](auto* c, auto& r, auto* o) { return p->ListDomains(c, r, o); });
      break;
  }
  // Still serving.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  GetPolicyResponse policy;
  if (!p->GetPolicy(&context, GetPolicyRequest(), &policy).ok()) abort();
  return 0;
}
