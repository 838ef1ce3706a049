// pvemuctl fleet: the fleet's layers in etcd, through any fleet-mode pvemud
// (status, get, apply, set-rule, delete-rule). Thin translations between
// flags and one FleetService RPC each; the daemon validates and writes.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/rule_flags.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "pvemu/v1/service.grpc.pb.h"

namespace pvemu::client {
namespace {

absl::StatusOr<std::unique_ptr<v1::FleetService::Stub>> FleetStub() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, Connect());
  return v1::FleetService::NewStub(channel);
}

// An edit answers after etcd committed it and this host applied it (up to
// about 13 s when etcd is slow): longer than the usual per-call deadline.
void SetEditDeadline(grpc::ClientContext* context) {
  if (absl::GetFlag(FLAGS_timeout) == "10") {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  } else {
    SetDeadline(context);
  }
}

absl::StatusOr<std::string> RequiredLayer() {
  std::string layer = absl::GetFlag(FLAGS_layer);
  if (layer.empty()) {
    return absl::InvalidArgumentError(
        "--layer is required: default, class:NAME, host:ID or host:ID/domain:N");
  }
  return layer;
}

absl::StatusOr<int64_t> IfRevision() {
  if (!absl::GetFlag(FLAGS_if_generation).empty()) {
    return absl::InvalidArgumentError(
        "fleet edits compare the layer's etcd revision: use --if-revision=R (from `pvemuctl "
        "fleet get`) instead of --if-generation");
  }
  std::string r = absl::GetFlag(FLAGS_if_revision);
  if (r.empty()) return 0;
  ASSIGN_OR_RETURN(uint64_t v, ParseNumber(r, "--if-revision"));
  return static_cast<int64_t>(v);
}

JsonLine ErrorJson(const v1::FleetError& e) {
  return JsonLine().Str("key", e.key()).Num("line", e.line()).Str("message", e.message());
}

absl::Status Status() {
  ASSIGN_OR_RETURN(auto stub, FleetStub());
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::FleetStatusResponse response;
  RETURN_IF_ERROR(FromGrpc(stub->GetStatus(&context, v1::FleetStatusRequest(), &response)));
  if (JsonOutput()) {
    std::vector<std::string> hosts;
    for (const v1::FleetHost& h : response.hosts()) {
      JsonLine line;
      line.Str("id", h.id())
          .StrList("classes", {h.classes().begin(), h.classes().end()})
          .Str("vendor", h.vendor())
          .Bool("alive", h.alive())
          .Num("applied_revision", static_cast<double>(h.applied_revision()));
      if (h.stale_since().empty()) {
        line.Null("stale_since");
      } else {
        line.Str("stale_since", h.stale_since());
      }
      if (h.has_last_error()) {
        line.Obj("last_error", ErrorJson(h.last_error()));
      } else {
        line.Null("last_error");
      }
      hosts.push_back(line.Render());
    }
    JsonLine out;
    out.Num("revision", static_cast<double>(response.revision()))
        .Raw("hosts", absl::StrCat("[", absl::StrJoin(hosts, ","), "]"));
    // Only a stale answer says so: the shape otherwise stays the one above.
    if (response.stale()) out.Bool("stale", true).Str("stale_since", response.stale_since());
    out.Print();
    return absl::OkStatus();
  }
  std::printf("fleet %s at revision %lld\n", response.endpoints().c_str(),
              static_cast<long long>(response.revision()));
  if (response.stale()) {
    std::printf("STALE: etcd unreachable since %s; this is the answering host's last view\n",
                response.stale_since().c_str());
  }
  std::printf("%-16s %-20s %-7s %-6s %-9s %-21s %s\n", "HOST", "CLASSES", "VENDOR", "ALIVE",
              "REVISION", "STALE SINCE", "LAST ERROR");
  for (const v1::FleetHost& h : response.hosts()) {
    std::string error = "-";
    if (h.has_last_error()) {
      const v1::FleetError& e = h.last_error();
      error = absl::StrCat("revision ", e.revision(), ": ", e.key(),
                           e.line() > 0 ? absl::StrCat(":", e.line()) : "", ": ",
                           e.message().substr(0, e.message().find('\n')));
    }
    std::printf("%-16s %-20s %-7s %-6s %-9lld %-21s %s\n", h.id().c_str(),
                h.classes().empty() ? "-" : absl::StrJoin(h.classes(), ",").c_str(),
                h.vendor().empty() ? "-" : h.vendor().c_str(), h.alive() ? "yes" : "NO",
                static_cast<long long>(h.applied_revision()),
                h.stale_since().empty() ? "-" : h.stale_since().c_str(), error.c_str());
  }
  return absl::OkStatus();
}

absl::Status Get() {
  ASSIGN_OR_RETURN(std::string layer, RequiredLayer());
  ASSIGN_OR_RETURN(auto stub, FleetStub());
  v1::GetLayerRequest request;
  request.set_layer(layer);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetLayerResponse response;
  RETURN_IF_ERROR(FromGrpc(stub->GetLayer(&context, request, &response)));
  if (JsonOutput()) {
    JsonLine()
        .Str("layer", layer)
        .Str("key", response.key())
        .Bool("exists", response.exists())
        .Num("mod_revision", static_cast<double>(response.mod_revision()))
        .Num("revision", static_cast<double>(response.revision()))
        .Str("textproto", response.textproto())
        .Print();
    return absl::OkStatus();
  }
  if (!response.exists()) {
    std::printf("# layer %s (%s) does not exist yet: its hosts follow the layers below it. "
                "`pvemuctl fleet apply -f FILE --layer=%s` or `fleet set-rule --layer=%s ...` "
                "creates it\n",
                layer.c_str(), response.key().c_str(), layer.c_str(), layer.c_str());
    return absl::OkStatus();
  }
  std::printf("# layer %s: %s, mod_revision %lld (etcd revision %lld)\n%s", layer.c_str(),
              response.key().c_str(), static_cast<long long>(response.mod_revision()),
              static_cast<long long>(response.revision()), response.textproto().c_str());
  return absl::OkStatus();
}

// Prints an edit's outcome; an edit this host could not apply is an error
// (exit 1) although etcd has it: the operator has a key to fix.
absl::Status PrintEdit(const v1::FleetEditResponse& response) {
  if (JsonOutput()) {
    JsonLine line;
    line.Str("key", response.key())
        .Num("revision", static_cast<double>(response.revision()))
        .Bool("applied", response.applied());
    if (!response.not_applied().empty()) line.Str("not_applied", response.not_applied());
    line.Print();
  } else {
    if (!response.diff().empty()) std::printf("%s", response.diff().c_str());
    std::printf("revision %lld%s\n", static_cast<long long>(response.revision()),
                response.applied()             ? " (applied on this host)"
                : response.affects_this_host() ? ""
                                               : " (committed; not one of this host's layers)");
  }
  if (!response.not_applied().empty()) return absl::FailedPreconditionError(response.not_applied());
  return absl::OkStatus();
}

// Every fleet edit ends the same way: --if-revision, the call under the edit
// deadline, the answer printed.
template <typename Request>
absl::Status SendEdit(Request& request,
                      grpc::Status (v1::FleetService::Stub::*call)(grpc::ClientContext*,
                                                                   const Request&,
                                                                   v1::FleetEditResponse*)) {
  ASSIGN_OR_RETURN(int64_t if_revision, IfRevision());
  request.set_if_revision(if_revision);
  ASSIGN_OR_RETURN(auto stub, FleetStub());
  grpc::ClientContext context;
  SetEditDeadline(&context);
  v1::FleetEditResponse response;
  RETURN_IF_ERROR(FromGrpc(((*stub).*call)(&context, request, &response)));
  return PrintEdit(response);
}

absl::Status Apply() {
  ASSIGN_OR_RETURN(std::string layer, RequiredLayer());
  v1::FleetApplyRequest request;
  request.set_layer(layer);
  const std::string file = absl::GetFlag(FLAGS_f);
  if (file.empty()) {
    return absl::InvalidArgumentError(
        "fleet apply: -f FILE is required: give the policy file whose `default` (and any "
        "`domain` overlays) becomes the layer");
  }
  RETURN_IF_ERROR(ReadFileToString(file, request.mutable_textproto()));
  request.set_source_name(file);
  return SendEdit(request, &v1::FleetService::Stub::ApplyLayer);
}

absl::Status EditRule(bool set) {
  ASSIGN_OR_RETURN(std::string layer, RequiredLayer());
  v1::FleetRuleRequest request;
  request.set_layer(layer);
  RETURN_IF_ERROR(FillRuleTarget(request.mutable_rule()));
  if (set) RETURN_IF_ERROR(FillRuleActions(request.mutable_rule()));
  if (std::string domain = absl::GetFlag(FLAGS_domain); !domain.empty()) {
    // In a fleet layer, --domain picks the value's overlay of that domain.
    if (domain == "default") {
      return absl::InvalidArgumentError(
          "fleet set-rule: --layer picks the layer; --domain=N (optional) its overlay of "
          "domain N; leave --domain out for the layer's default rules");
    }
    ASSIGN_OR_RETURN(uint32_t id, ParseNumber32(domain, "--domain"));
    request.set_domain(id);
  }
  return SendEdit(request, set ? &v1::FleetService::Stub::SetRule
                               : &v1::FleetService::Stub::DeleteRule);
}

}  // namespace

int RunFleet(const Args& args) {
  if (args.size() != 1) {
    return UsageError("fleet needs one of: status, get, apply, set-rule, delete-rule");
  }
  const std::string& sub = args[0];
  absl::Status status;
  if (sub == "status") {
    status = Status();
  } else if (sub == "get") {
    status = Get();
  } else if (sub == "apply") {
    status = Apply();
  } else if (sub == "set-rule") {
    status = EditRule(true);
  } else if (sub == "delete-rule") {
    status = EditRule(false);
  } else {
    return UsageError(absl::StrCat("unknown fleet command '", sub,
                                   "'; use status, get, apply, set-rule or delete-rule"));
  }
  return status.ok() ? kExitOk : Fail(status);
}

}  // namespace pvemu::client
