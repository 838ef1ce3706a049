#include "client/domain_policy_view.h"

#include <optional>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "client/flags.h"
#include "client/offline.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "policy/loader.h"
#include "policy/source_map.h"
#include "pvemu/v1/service.grpc.pb.h"

namespace pvemu::client {

std::string ServerFlagConflict(absl::string_view command) {
  const std::string server = absl::GetFlag(FLAGS_server);
  if (server.empty()) return "";
  const std::pair<const absl::Flag<std::string>*, const char*> offline_flags[] = {
      {&FLAGS_policy, "--policy"},
      {&FLAGS_host_vendor, "--host-vendor"},
      {&FLAGS_host_profile, "--host-profile"},
  };
  for (const auto& [flag, name] : offline_flags) {
    if (absl::GetFlag(*flag).empty()) continue;
    return absl::StrCat(command, ": --server=", server,
                        " uses the daemon's policy and host vendor; drop ", name,
                        ", or drop --server to use ", name, " offline");
  }
  return "";
}

int RunDomainPolicyView(const std::vector<std::string>& args, absl::string_view command,
                        absl::FunctionRef<absl::Status()> view) {
  if (!args.empty()) {
    return UsageError(
        absl::StrCat(command, " takes flags only (--domain, --policy or --server)"));
  }
  if (absl::GetFlag(FLAGS_domain).empty()) {
    return UsageError(absl::StrCat(command, " needs --domain=N"));
  }
  if (std::string conflict = ServerFlagConflict(command); !conflict.empty()) {
    return UsageError(conflict);
  }
  absl::Status status = view();
  return status.ok() ? kExitOk : Fail(status);
}

absl::StatusOr<DaemonPolicy> FetchDaemonPolicy() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, Connect());
  v1::GetPolicyResponse policy;
  {
    auto stub = v1::PolicyService::NewStub(channel);
    grpc::ClientContext context;
    SetDeadline(&context);
    RETURN_IF_ERROR(FromGrpc(stub->GetPolicy(&context, v1::GetPolicyRequest(), &policy)));
  }
  // Filters and decisions depend on the vendor the daemon compiles for.
  v1::StatsResponse stats;
  {
    auto stub = v1::EmulatorService::NewStub(channel);
    grpc::ClientContext context;
    SetDeadline(&context);
    RETURN_IF_ERROR(FromGrpc(stub->GetStats(&context, v1::StatsRequest(), &stats)));
  }
  // Positions as in `pvemuctl policy get`'s output (a "# generation G" line,
  // then the text), so that FILE:LINE leads to the rule there.
  const std::string name = absl::StrCat("pvemud generation ", policy.generation());
  const std::string text =
      absl::StrCat("# generation ", policy.generation(), "\n", policy.textproto());
  std::optional<policy::SourceMap> source =
      policy::SourceMap::FromPrinterOutput(name, *v1::Policy::descriptor(), text);
  if (!source.has_value()) {
    // Not shaped like printer output (a daemon of another version): parse it.
    absl::StatusOr<policy::LoadedPolicy> parsed = policy::ParsePolicy(text, name);
    source = parsed.ok() ? std::move(parsed->source) : policy::SourceMap(name);
  }
  DaemonPolicy out;
  out.loaded = policy::LoadedPolicy{policy.policy(), std::move(*source)};
  out.vendor = stats.host_vendor();
  out.generation = policy.generation();
  return out;
}

absl::StatusOr<std::shared_ptr<const policy::Snapshot>> DaemonSnapshot() {
  ASSIGN_OR_RETURN(DaemonPolicy daemon, FetchDaemonPolicy());
  return policy::CompilePolicy(daemon.loaded.policy, daemon.loaded.source, daemon.vendor,
                               daemon.generation);
}

absl::StatusOr<std::shared_ptr<const policy::Snapshot>> SnapshotFromFlags() {
  if (!absl::GetFlag(FLAGS_server).empty()) return DaemonSnapshot();
  ASSIGN_OR_RETURN(v1::Vendor vendor, HostVendorFromFlags());
  ASSIGN_OR_RETURN(std::unique_ptr<policy::Store> store, StoreFromFlags(vendor));
  return store->Current();
}

absl::StatusOr<enforce::MsrFilter> KvmFilterFor(const policy::Snapshot& snapshot, uint32_t domain) {
  absl::StatusOr<enforce::MsrFilter> filter = enforce::CompileMsrFilter(snapshot.ForDomain(domain));
  if (!filter.ok()) {
    return absl::Status(filter.status().code(),
                        absl::StrCat("domain ", domain, "'s policy cannot be a KVM MSR filter: ",
                                     filter.status().message()));
  }
  return filter;
}

}  // namespace pvemu::client
