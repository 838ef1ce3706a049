// The commands that talk to pvemud: policy get/apply/set-rule/delete-rule/diff,
// domains, stats, watch. Each is a thin translation between flags and one RPC.
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/learn.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/rule_flags.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "policy/vendor_proto.h"
#include "x86/vendor.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "pvemu/v1/service.grpc.pb.h"

namespace pvemu::client {
namespace {

absl::StatusOr<std::unique_ptr<v1::PolicyService::Stub>> PolicyStub() {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, Connect());
  return v1::PolicyService::NewStub(channel);
}

// --domain=N|default into a LayerRef; unset → *has_layer false.
absl::Status ParseLayer(bool required, v1::LayerRef* layer, bool* has_layer) {
  std::string domain = absl::GetFlag(FLAGS_domain);
  *has_layer = !domain.empty();
  if (domain.empty()) {
    if (required) {
      return absl::InvalidArgumentError("--domain is required: a domain id or 'default'");
    }
    return absl::OkStatus();
  }
  if (absl::AsciiStrToLower(domain) == "default") {
    layer->set_default_(true);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(uint32_t id, ParseNumber32(domain, "--domain"));
  layer->set_domain(id);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> IfGeneration() {
  std::string g = absl::GetFlag(FLAGS_if_generation);
  if (g.empty()) return 0;
  return ParseNumber(g, "--if-generation");
}

void PrintGeneration(const v1::EditResponse& response) {
  if (JsonOutput()) {
    JsonLine().Num("generation", response.generation()).Print();
  } else {
    if (!response.diff().empty()) std::printf("%s", response.diff().c_str());
    std::printf("generation %llu\n",
                static_cast<unsigned long long>(response.generation()));
  }
}

void PrintMessageJson(const google::protobuf::Message& msg, JsonLine* extra) {
  // The message's fields in field-number order, then the extra keys.
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(msg, &json, options);
  if (!extra->empty() && !json.empty() && json.back() == '}') {
    json.pop_back();
    if (json != "{") json.push_back(',');
    json += extra->RenderMembers() + "}";
  }
  std::printf("%s\n", json.c_str());
}

// Reads -f FILE as text for apply/diff.
absl::Status ReadPolicyFlag(std::string* text, std::string* name) {
  *name = absl::GetFlag(FLAGS_f);
  if (name->empty()) return absl::InvalidArgumentError("-f FILE is required");
  return ReadFileToString(*name, text);
}

}  // namespace

absl::Status FillRuleTarget(v1::MsrRule* rule) {
  std::string msr = absl::GetFlag(FLAGS_msr);
  std::string range = absl::GetFlag(FLAGS_range);
  if (msr.empty() == range.empty()) {
    return absl::InvalidArgumentError("give exactly one of --msr=MSR or --range=FIRST-LAST");
  }
  if (!msr.empty()) {
    ASSIGN_OR_RETURN(uint32_t index, ParseMsrArg(msr, "--msr"));
    (void)index;  // validated here; the rule keeps the operator's spelling
    rule->set_msr(msr);
  } else {
    std::vector<std::string> ends = absl::StrSplit(range, absl::MaxSplits('-', 1));
    if (ends.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--range=", range, ": write FIRST-LAST, e.g. --range=0xc0010000-0xc0010007"));
    }
    ASSIGN_OR_RETURN(uint32_t first, ParseMsrArg(ends[0], "--range first"));
    ASSIGN_OR_RETURN(uint32_t last, ParseMsrArg(ends[1], "--range last"));
    if (first > last) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--range=", range, ": the first MSR is above the last"));
    }
    rule->mutable_range()->set_first(ends[0]);
    rule->mutable_range()->set_last(ends[1]);
  }
  std::string vendor = absl::GetFlag(FLAGS_host_vendor);
  if (!vendor.empty()) {
    ASSIGN_OR_RETURN(x86::Vendor v, x86::ParseVendor(vendor));
    rule->set_host_vendor(policy::ToProto(v));
  }
  return absl::OkStatus();
}

absl::Status FillRuleActions(v1::MsrRule* rule) {
  std::string read = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_read));
  std::string write = absl::AsciiStrToUpper(absl::GetFlag(FLAGS_write));
  if (read.empty() && write.empty()) {
    return absl::InvalidArgumentError("give --read=ACTION and/or --write=ACTION");
  }
  if (!read.empty()) {
    v1::ReadAction::Action action;
    if (!v1::ReadAction::Action_Parse(read, &action) ||
        action == v1::ReadAction::ACTION_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--read=", read, ": use PASSTHROUGH, CONST, SHADOW, ZERO or GP"));
    }
    rule->set_read(action);
  }
  if (!write.empty()) {
    v1::WriteAction::Action action;
    if (!v1::WriteAction::Action_Parse(write, &action) ||
        action == v1::WriteAction::ACTION_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--write=", write, ": use PASSTHROUGH, SHADOW, IGNORE or GP"));
    }
    rule->set_write(action);
    if (action == v1::WriteAction::PASSTHROUGH) rule->set_allow_host_write(true);
  }
  if (std::string v = absl::GetFlag(FLAGS_value); !v.empty()) {
    ASSIGN_OR_RETURN(uint64_t value, ParseNumber(v, "--value"));
    rule->set_value(value);
  }
  if (std::string m = absl::GetFlag(FLAGS_writable_mask); !m.empty()) {
    ASSIGN_OR_RETURN(uint64_t mask, ParseNumber(m, "--writable-mask"));
    rule->set_writable_mask(mask);
  }
  return absl::OkStatus();
}

namespace {

absl::Status PolicyGet() {
  v1::GetPolicyRequest request;
  bool has_layer = false;
  RETURN_IF_ERROR(ParseLayer(false, request.mutable_layer(), &has_layer));
  if (!has_layer) request.clear_layer();
  ASSIGN_OR_RETURN(auto stub, PolicyStub());
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetPolicyResponse response;
  RETURN_IF_ERROR(FromGrpc(stub->GetPolicy(&context, request, &response)));
  if (JsonOutput()) {
    JsonLine extra;
    extra.Num("generation", response.generation());
    PrintMessageJson(response.policy(), &extra);
  } else {
    std::printf("# generation %llu\n%s",
                static_cast<unsigned long long>(response.generation()),
                response.textproto().c_str());
  }
  return absl::OkStatus();
}

// The layer (--domain, optional) and the policy text (-f FILE) of an apply
// or diff request, which share those fields.
template <typename Request>
absl::Status FillFromPolicyFile(Request* request) {
  bool has_layer = false;
  RETURN_IF_ERROR(ParseLayer(false, request->mutable_layer(), &has_layer));
  if (!has_layer) request->clear_layer();
  std::string name;
  RETURN_IF_ERROR(ReadPolicyFlag(request->mutable_textproto(), &name));
  request->set_source_name(name);
  return absl::OkStatus();
}

// Sends one policy edit with --if-generation and prints the new generation
// (and the diff): every `policy` command that changes the policy.
template <typename Request>
absl::Status SendPolicyEdit(Request& request,
                            grpc::Status (v1::PolicyService::Stub::*rpc)(
                                grpc::ClientContext*, const Request&, v1::EditResponse*)) {
  ASSIGN_OR_RETURN(uint64_t if_generation, IfGeneration());
  request.set_if_generation(if_generation);
  ASSIGN_OR_RETURN(auto stub, PolicyStub());
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::EditResponse response;
  RETURN_IF_ERROR(FromGrpc(((*stub).*rpc)(&context, request, &response)));
  PrintGeneration(response);
  return absl::OkStatus();
}

absl::Status PolicyApply() {
  v1::ApplyPolicyRequest request;
  RETURN_IF_ERROR(FillFromPolicyFile(&request));
  return SendPolicyEdit(request, &v1::PolicyService::Stub::ApplyPolicy);
}

absl::Status PolicyDiff() {
  v1::DiffPolicyRequest request;
  RETURN_IF_ERROR(FillFromPolicyFile(&request));
  ASSIGN_OR_RETURN(auto stub, PolicyStub());
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::DiffPolicyResponse response;
  RETURN_IF_ERROR(FromGrpc(stub->DiffPolicy(&context, request, &response)));
  if (JsonOutput()) {
    JsonLine()
        .Str("diff", response.diff())
        .Bool("changed", !response.diff().empty())
        .Num("generation", response.generation())
        .Print();
  } else {
    std::printf("%s", response.diff().empty() ? "no change\n" : response.diff().c_str());
  }
  return absl::OkStatus();
}

absl::Status PolicyEditRule(bool set) {
  v1::MsrRule rule;
  bool has_layer = false;
  v1::LayerRef layer;
  RETURN_IF_ERROR(ParseLayer(true, &layer, &has_layer));
  RETURN_IF_ERROR(FillRuleTarget(&rule));
  if (set) RETURN_IF_ERROR(FillRuleActions(&rule));
  if (set) {
    v1::SetRuleRequest request;
    *request.mutable_layer() = layer;
    *request.mutable_rule() = rule;
    return SendPolicyEdit(request, &v1::PolicyService::Stub::SetRule);
  }
  v1::DeleteRuleRequest request;
  *request.mutable_layer() = layer;
  *request.mutable_rule() = rule;
  return SendPolicyEdit(request, &v1::PolicyService::Stub::DeleteRule);
}

// policy set-mode --domain=N|default learn|enforce.
absl::Status PolicySetMode(const std::string& word) {
  v1::PolicyMode mode;
  if (!v1::PolicyMode_Parse(absl::AsciiStrToUpper(word), &mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown mode '", word, "'; use learn or enforce"));
  }
  v1::SetModeRequest request;
  bool has_layer = false;
  RETURN_IF_ERROR(ParseLayer(true, request.mutable_layer(), &has_layer));
  request.set_mode(mode);
  return SendPolicyEdit(request, &v1::PolicyService::Stub::SetMode);
}

}  // namespace

int RunPolicy(const Args& args) {
  if (args.size() == 2 && args[0] == "set-mode") {
    absl::Status status = PolicySetMode(args[1]);
    if (!status.ok() && status.code() == absl::StatusCode::kInvalidArgument &&
        absl::StartsWith(status.message(), "unknown mode")) {
      return UsageError(std::string(status.message()));
    }
    return status.ok() ? kExitOk : Fail(status);
  }
  if (!args.empty() && args[0] == "set-mode") {
    return UsageError("policy set-mode needs one word: learn or enforce (and --domain=N|default)");
  }
  if (args.size() != 1) {
    return UsageError("policy needs one of: get, apply, set-rule, delete-rule, set-mode, diff");
  }
  const std::string& sub = args[0];
  absl::Status status;
  if (sub == "get") {
    status = PolicyGet();
  } else if (sub == "apply" && absl::GetFlag(FLAGS_dry_run)) {
    // The report is the answer: its exit code (0, 2 changes, 1 an error).
    v1::ApplyPolicyRequest request;
    if (absl::Status read = FillFromPolicyFile(&request); !read.ok()) {
      std::fprintf(stderr, "pvemuctl: %s\n", std::string(read.message()).c_str());
      return kExitInvalid;
    }
    return RunApplyDryRun(request.textproto(), request.source_name(),
                          request.has_layer() ? &request.layer() : nullptr);
  } else if (sub == "apply") {
    status = PolicyApply();
  } else if (sub == "diff") {
    status = PolicyDiff();
  } else if (sub == "set-rule") {
    status = PolicyEditRule(true);
  } else if (sub == "delete-rule") {
    status = PolicyEditRule(false);
  } else {
    return UsageError(absl::StrCat("unknown policy command '", sub,
                                   "'; use get, apply, set-rule, delete-rule, set-mode or diff"));
  }
  return status.ok() ? kExitOk : Fail(status);
}

int RunDomains(const Args& args) {
  if (!args.empty()) return UsageError("domains takes no arguments");
  auto stub = PolicyStub();
  if (!stub.ok()) return Fail(stub.status());
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListDomainsResponse response;
  absl::Status status =
      FromGrpc((*stub)->ListDomains(&context, v1::ListDomainsRequest(), &response));
  if (!status.ok()) return Fail(status);
  if (!JsonOutput()) {
    std::printf("%-8s %-11s %-5s %-8s %-6s %s\n", "DOMAIN", "STATE", "HW", "OVERLAY", "VCPUS",
                "ATTACHED");
  }
  for (const v1::DomainInfo& d : response.domain()) {
    if (JsonOutput()) {
      JsonLine()
          .Num("domain", d.domain())
          .Str("state", d.state())
          .Bool("live", d.live())
          .Bool("hardware_domain", d.hardware_domain())
          .Bool("has_overlay", d.has_overlay())
          .Num("vcpus", d.vcpus())
          .Str("attached", d.attached())
          .Num("attached_pid", d.attached_pid())
          .Num("applied_generation", d.applied_generation())
          .Print();
    } else {
      // An attached data plane: its source, its VMM's pid and the generation
      // it applies (compare with the daemon's to see it caught up).
      const std::string attached =
          d.attached().empty() ? "-"
                               : absl::StrCat(d.attached(), " pid=", d.attached_pid(),
                                              " generation=", d.applied_generation());
      std::printf("%-8u %-11s %-5s %-8s %-6u %s\n", d.domain(), d.state().c_str(),
                  d.hardware_domain() ? "yes" : "no", d.has_overlay() ? "yes" : "no",
                  d.vcpus(), attached.c_str());
    }
  }
  return kExitOk;
}

// stats --msrs: one line per (domain, MSR) with its counts per access and
// action.
void PrintMsrStats(const v1::StatsResponse& response) {
  if (!JsonOutput()) {
    std::printf("%-7s %-11s %-32s %10s %10s  %s\n", "DOMAIN", "MSR", "NAME", "READS", "WRITES",
                "ACTIONS");
  }
  for (const v1::MsrStats& m : response.msrs()) {
    const std::string domain = m.domain_other() ? "other" : absl::StrCat(m.domain());
    const std::string msr = m.msr_other() ? "other" : HexString(m.msr());
    if (JsonOutput()) {
      JsonLine read, write;
      for (const v1::MsrStats::ActionCount& a : m.actions()) {
        (a.access() == "write" ? write : read).Num(a.action(), static_cast<double>(a.count()));
      }
      JsonLine line;
      if (m.domain_other()) {
        line.Str("domain", "other");
      } else {
        line.Num("domain", m.domain());
      }
      line.Str("msr", msr)
          .Str("name", m.name())
          .Num("reads", static_cast<double>(m.reads()))
          .Num("writes", static_cast<double>(m.writes()))
          .Obj("actions", JsonLine().Obj("read", read).Obj("write", write))
          .Print();
    } else {
      std::string actions;
      for (const v1::MsrStats::ActionCount& a : m.actions()) {
        absl::StrAppend(&actions, actions.empty() ? "" : ", ", a.access(), " ", a.action(), " ",
                        a.count());
      }
      std::printf("%-7s %-11s %-32s %10llu %10llu  %s\n", domain.c_str(), msr.c_str(),
                  m.name().empty() ? "-" : m.name().c_str(),
                  static_cast<unsigned long long>(m.reads()),
                  static_cast<unsigned long long>(m.writes()), actions.c_str());
    }
  }
}

namespace {

// The request stats sends, from --msrs and --domain; an error here is a
// usage error (--domain without --msrs, or not a domain id).
absl::StatusOr<v1::StatsRequest> StatsRequestFromFlags() {
  v1::StatsRequest request;
  request.set_msrs(absl::GetFlag(FLAGS_msrs));
  request.set_learned(absl::GetFlag(FLAGS_learned));
  if (request.msrs() && request.learned()) {
    return absl::InvalidArgumentError("stats: give --msrs or --learned, not both");
  }
  if (std::string domain = absl::GetFlag(FLAGS_domain); !domain.empty()) {
    if (!request.msrs() && !request.learned()) {
      return absl::InvalidArgumentError("stats: --domain goes with --msrs or --learned");
    }
    ASSIGN_OR_RETURN(uint32_t id, ParseNumber32(domain, "--domain"));
    request.set_domain(id);
  }
  return request;
}

// The GetStats RPC: the daemon's counters (per MSR for --msrs).
absl::StatusOr<v1::StatsResponse> FetchStats(const v1::StatsRequest& request) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, Connect());
  auto stub = v1::EmulatorService::NewStub(channel);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::StatsResponse response;
  RETURN_IF_ERROR(FromGrpc(stub->GetStats(&context, request, &response)));
  return response;
}

// -o json, fleet mode: the "fleet" object, every key present (null when it
// does not apply), so that scripts can test staleness and the last error.
JsonLine FleetJson(const v1::FleetSelf& f) {
  JsonLine j;
  j.Str("id", f.id())
      .StrList("classes", {f.classes().begin(), f.classes().end()})
      .Str("endpoints", f.endpoints())
      .Num("applied_revision", static_cast<double>(f.applied_revision()))
      .Bool("stale", !f.stale_since().empty());
  if (f.stale_since().empty()) {
    j.Null("stale_since");
  } else {
    j.Str("stale_since", f.stale_since());
  }
  if (f.has_last_error()) {
    j.Obj("last_error", JsonLine()
                            .Str("key", f.last_error().key())
                            .Num("line", f.last_error().line())
                            .Str("message", f.last_error().message()));
  } else {
    j.Null("last_error");
  }
  return j;
}

// -o json: the daemon's totals as one line, with "fleet" in fleet mode.
void PrintStatsJson(const v1::StatsResponse& response) {
  JsonLine line;
  line.Num("traps", static_cast<double>(response.traps()))
      .Num("completed", static_cast<double>(response.completed()))
      .Num("exceptions", static_cast<double>(response.exceptions()))
      .Num("unhandled", static_cast<double>(response.unhandled()))
      .Num("device_io", static_cast<double>(response.device_io()))
      .Num("decode_errors", static_cast<double>(response.decode_errors()))
      .Num("generation", static_cast<double>(response.generation()))
      .Num("edits", static_cast<double>(response.edits()))
      .Num("uptime_seconds", response.uptime_seconds())
      .Str("host", response.host())
      .Str("host_vendor", x86::VendorWord(policy::FromProto(response.host_vendor())));
  if (response.has_fleet()) line.Obj("fleet", FleetJson(response.fleet()));
  line.Print();
}

// The daemon's totals for a reader, then in fleet mode where the policy
// comes from, whether it may be behind etcd, and the last revision refused.
// stats --learned: one line per access a learning domain made that ENFORCE
// would fault, with its count and its first occurrence.
void PrintLearned(const v1::StatsResponse& response) {
  if (!JsonOutput()) {
    std::printf("%-7s %-6s %-10s %-6s %10s %-7s %-7s %-18s %s\n", "DOMAIN", "INSN", "INDEX",
                "ACCESS", "COUNT", "ENFORCE", "GIVEN", "FIRST_RIP", "RULE");
  }
  for (const v1::LearnedAccess& l : response.learned()) {
    const std::string index = absl::StrCat(
        "0x", absl::Hex(l.index()), l.width() > 1 ? absl::StrCat("+", l.width()) : "");
    if (JsonOutput()) {
      JsonLine()
          .Num("domain", l.domain())
          .Str("instruction", l.instruction())
          .Str("index", absl::StrCat("0x", absl::Hex(l.index())))
          .Str("access", l.access())
          .Num("width", l.width())
          .Num("count", l.count())
          .Str("enforcing", l.enforcing())
          .Str("given", l.given())
          .Str("rip", absl::StrCat("0x", absl::Hex(l.rip())))
          .Str("rule", l.rule())
          .Print();
    } else {
      std::printf("%-7u %-6s %-10s %-6s %10llu %-7s %-7s 0x%-16llx %s\n", l.domain(),
                  l.instruction().c_str(), index.c_str(), l.access().c_str(),
                  static_cast<unsigned long long>(l.count()), l.enforcing().c_str(),
                  l.given().c_str(), static_cast<unsigned long long>(l.rip()), l.rule().c_str());
    }
  }
}

void PrintStatsText(const v1::StatsResponse& response) {
  std::printf(
      "host        %s\nuptime      %.0f s\ngeneration  %llu (%llu edits)\n"
      "traps       %llu: %llu completed, %llu exceptions, %llu unhandled, "
      "%llu to the device model, %llu decode errors\n",
      response.host().c_str(), response.uptime_seconds(),
      static_cast<unsigned long long>(response.generation()),
      static_cast<unsigned long long>(response.edits()),
      static_cast<unsigned long long>(response.traps()),
      static_cast<unsigned long long>(response.completed()),
      static_cast<unsigned long long>(response.exceptions()),
      static_cast<unsigned long long>(response.unhandled()),
      static_cast<unsigned long long>(response.device_io()),
      static_cast<unsigned long long>(response.decode_errors()));
  if (!response.has_fleet()) return;
  const v1::FleetSelf& f = response.fleet();
  std::printf("fleet       %s as host %s, revision %lld%s\n", f.endpoints().c_str(),
              f.id().c_str(), static_cast<long long>(f.applied_revision()),
              f.stale_since().empty()
                  ? ""
                  : absl::StrCat(", STALE since ", f.stale_since(),
                                 " (etcd unreachable; serving the last good revision)")
                        .c_str());
  if (f.has_last_error()) {
    std::printf("fleet error revision %lld not applied: %s%s: %s\n",
                static_cast<long long>(f.last_error().revision()), f.last_error().key().c_str(),
                f.last_error().line() > 0 ? absl::StrCat(":", f.last_error().line()).c_str() : "",
                f.last_error().message().c_str());
  }
}

}  // namespace

int RunStats(const Args& args) {
  if (!args.empty()) return UsageError("stats takes no arguments");
  absl::StatusOr<v1::StatsRequest> request = StatsRequestFromFlags();
  if (!request.ok()) return UsageError(request.status().message());
  absl::StatusOr<v1::StatsResponse> response = FetchStats(*request);
  if (!response.ok()) return Fail(response.status());
  if (request->msrs()) {
    PrintMsrStats(*response);
  } else if (request->learned()) {
    PrintLearned(*response);
  } else if (JsonOutput()) {
    PrintStatsJson(*response);
  } else {
    PrintStatsText(*response);
  }
  return kExitOk;
}

int RunWatch(const Args& args) {
  if (!args.empty()) return UsageError("watch takes no arguments");
  uint64_t limit = 0;
  if (std::string c = absl::GetFlag(FLAGS_count); !c.empty()) {
    absl::StatusOr<uint64_t> n = ParseNumber(c, "--count");
    if (!n.ok()) return UsageError(n.status().message());
    limit = *n;
  }
  auto channel = Connect();
  if (!channel.ok()) return Fail(channel.status());
  auto stub = v1::AuditService::NewStub(*channel);
  grpc::ClientContext context;
  auto reader = stub->Watch(&context, v1::WatchRequest());
  v1::AuditEvent event;
  uint64_t seen = 0;
  while ((limit == 0 || seen < limit) && reader->Read(&event)) {
    ++seen;
    if (JsonOutput()) {
      JsonLine empty;
      PrintMessageJson(event, &empty);
    } else if (event.has_edit()) {
      std::printf("#%llu edit gen=%llu %s by %s on %s\n%s",
                  static_cast<unsigned long long>(event.sequence()),
                  static_cast<unsigned long long>(event.edit().generation()),
                  event.edit().method().c_str(), event.edit().who().c_str(),
                  event.edit().layer().c_str(), event.edit().diff().c_str());
    } else {
      const v1::TrapEvent& t = event.trap();
      std::printf("#%llu trap d%uv%u %s %s msr 0x%x -> %s%s\n",
                  static_cast<unsigned long long>(event.sequence()), t.domain(),
                  t.vcpu(), t.reason().c_str(), t.mnemonic().c_str(), t.msr(),
                  v1::Outcome::Kind_Name(t.outcome()).c_str(),
                  t.suppressed() ? absl::StrCat(" (", t.suppressed(), " suppressed)").c_str() : "");
    }
    std::fflush(stdout);
  }
  if (limit != 0 && seen >= limit) {
    context.TryCancel();
    return kExitOk;
  }
  absl::Status status = FromGrpc(reader->Finish());
  return status.ok() ? kExitOk : Fail(status);
}

}  // namespace pvemu::client
