#include "server/services.h"

#include <algorithm>
#include <tuple>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "emulator/trap_convert.h"
#include "x86/msr_catalog.h"
#include "policy/loader.h"
#include "base/textproto.h"
#include "server/fleet/fleet.h"

namespace pvemu::server {
namespace {

// Readers and editors may read; only editors may change anything.
#define REQUIRE_ROLE(role_needed, what)                                   \
  do {                                                                    \
    if (!Allowed(auth_, *context, role_needed == Role::kEditor)) {        \
      return Denied(what, auth_, *context);                               \
    }                                                                     \
  } while (0)

// The layer a request names; `required` makes an unset one an error.
absl::StatusOr<std::optional<policy::LayerRef>> LayerOf(const v1::LayerRef& ref, bool has,
                                                        bool required) {
  if (!has || ref.layer_case() == v1::LayerRef::LAYER_NOT_SET) {
    if (required) {
      return absl::InvalidArgumentError(
          "layer is required: set layer.default = true or layer.domain = N");
    }
    return std::optional<policy::LayerRef>();
  }
  if (ref.layer_case() == v1::LayerRef::kDefault) {
    if (!ref.default_()) {
      return absl::InvalidArgumentError(
          "layer.default must be true when set; use layer.domain = N for a domain");
    }
    return std::optional<policy::LayerRef>(policy::LayerRef::Default());
  }
  return std::optional<policy::LayerRef>(policy::LayerRef::Domain(ref.domain()));
}

// The policy of an apply/diff request: parsed text (with positions) or the
// message (validated with field paths).
absl::StatusOr<policy::LoadedPolicy> PolicyOf(const v1::Policy& msg, bool has_msg,
                                              const std::string& text,
                                              const std::string& source_name) {
  std::string name = source_name.empty() ? "<request>" : source_name;
  if (has_msg && !text.empty()) {
    return absl::InvalidArgumentError("give either policy or textproto, not both");
  }
  if (!text.empty()) return policy::ParsePolicy(text, name);
  if (!has_msg) {
    return absl::InvalidArgumentError("the request carries no policy: set policy or textproto");
  }
  policy::LoadedPolicy loaded{msg, policy::SourceMap(name)};
  return loaded;
}

policy::EditOptions EditOptionsFor(uint64_t if_generation, const Authorizer& auth,
                                   const grpc::ServerContext& context) {
  policy::EditOptions options;
  options.if_generation = if_generation;
  options.who = auth.Describe(context);
  return options;
}

void FillEdit(const policy::EditResult& result, v1::EditResponse* response) {
  response->set_generation(result.generation);
  response->set_diff(result.diff);
}

}  // namespace

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels percent-encoded in a trailer, and clients refuse
  // metadata over 8 KiB with a transport error that hides this status. Long
  // messages echo the caller's input (an MSR "name" of megabytes); cut them.
  constexpr size_t kMaxMessage = 2048;
  absl::string_view message = status.message();
  if (message.size() > kMaxMessage) {
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        absl::StrCat(message.substr(0, kMaxMessage), "... (",
                                     message.size() - kMaxMessage, " more bytes)"));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(message));
}

namespace {

// The default layer of a fleet-mode host is the fleet's layers composed:
// an edit of it goes to one of them, by name.
absl::Status FleetRefusal(const fleet::Fleet& f, absl::string_view command) {
  const std::string& id = f.keys().host_id();
  return absl::FailedPreconditionError(absl::StrCat(
      "this host (", id, ") is in fleet mode: its default layer is composed from the fleet's "
      "layers in etcd, so edit one of them: `pvemuctl fleet ", command, " --layer=host:", id,
      "` for this host alone (or --layer=default for every host, --layer=class:NAME for a "
      "class); `--domain=N` edits this host's overlay of domain N"));
}

}  // namespace

grpc::Status PolicyServiceImpl::FleetDomainEdit(grpc::ServerContext* context, int op,
                                                uint32_t domain, const std::string& textproto,
                                                const std::string& source_name,
                                                const v1::MsrRule* rule, uint64_t if_generation,
                                                v1::EditResponse* response) {
  // --if-generation keeps its meaning: the policy this host serves.
  if (if_generation != 0 && if_generation != store_.generation()) {
    return ToGrpc(absl::AbortedError(absl::StrCat(
        "the policy is at generation ", store_.generation(), " (fleet revision), not ",
        if_generation, "; re-read it and retry")));
  }
  fleet::LayerEdit edit;
  edit.op = static_cast<fleet::LayerEdit::Op>(op);
  edit.layer = fleet::LayerName{fleet::LayerName::kHostDomain, fleet_->keys().host_id(), domain};
  edit.who = auth_.Describe(*context);
  edit.textproto = textproto;
  edit.source_name = source_name;
  if (rule != nullptr) edit.rule = *rule;
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::FleetEditResponse> done = fleet_->Edit(edit);
  if (metrics_ != nullptr) metrics_->CountEdit(done.status(), absl::Now() - start);
  if (!done.ok()) return ToGrpc(done.status());
  if (!done->not_applied().empty()) {
    return ToGrpc(absl::FailedPreconditionError(done->not_applied()));
  }
  response->set_generation(done->revision());
  response->set_diff(done->diff());
  return grpc::Status::OK;
}

template <typename Edit>
absl::StatusOr<policy::EditResult> PolicyServiceImpl::Timed(Edit edit) {
  const absl::Time start = absl::Now();
  absl::StatusOr<policy::EditResult> result = edit();
  if (metrics_ != nullptr) metrics_->CountEdit(result.status(), absl::Now() - start);
  return result;
}

grpc::Status PolicyServiceImpl::GetPolicy(grpc::ServerContext* context,
                                          const v1::GetPolicyRequest* request,
                                          v1::GetPolicyResponse* response) {
  REQUIRE_ROLE(Role::kReader, "reading");
  auto layer = LayerOf(request->layer(), request->has_layer(), false);
  if (!layer.ok()) return ToGrpc(layer.status());
  std::shared_ptr<const policy::Snapshot> snap = store_.Current();
  const v1::Policy& whole = snap->policy();
  v1::Policy* out = response->mutable_policy();
  if (!layer->has_value()) {
    *out = whole;
  } else if ((*layer)->is_default) {
    *out->mutable_default_() = whole.default_();
  } else {
    bool found = false;
    for (const v1::Layer& d : whole.domain()) {
      if (d.domain() == (*layer)->domain) {
        *out->add_domain() = d;
        found = true;
      }
    }
    if (!found) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("domain ", (*layer)->domain,
                                       " has no overlay: it follows the default layer "
                                       "(policy get --domain=default)"));
    }
  }
  response->set_textproto(ToTextProto(*out));
  response->set_generation(snap->generation());
  return grpc::Status::OK;
}

grpc::Status PolicyServiceImpl::ApplyPolicy(grpc::ServerContext* context,
                                            const v1::ApplyPolicyRequest* request,
                                            v1::EditResponse* response) {
  REQUIRE_ROLE(Role::kEditor, "editing");
  auto layer = LayerOf(request->layer(), request->has_layer(), false);
  if (!layer.ok()) return ToGrpc(layer.status());
  if (fleet_ != nullptr) {
    if (!layer->has_value() || (*layer)->is_default) return ToGrpc(FleetRefusal(*fleet_, "apply -f FILE"));
    if (request->has_policy() && !request->textproto().empty()) {
      return ToGrpc(absl::InvalidArgumentError("give either policy or textproto, not both"));
    }
    const std::string text =
        request->textproto().empty() ? ToTextProto(request->policy()) : request->textproto();
    return FleetDomainEdit(context, fleet::LayerEdit::kApply, (*layer)->domain, text,
                           request->source_name(), nullptr, request->if_generation(), response);
  }
  auto loaded = PolicyOf(request->policy(), request->has_policy(), request->textproto(),
                         request->source_name());
  if (!loaded.ok()) return ToGrpc(loaded.status());
  policy::EditOptions options = EditOptionsFor(request->if_generation(), auth_, *context);
  absl::StatusOr<policy::EditResult> result = Timed([&] {
    return layer->has_value()
               ? store_.ApplyLayer(**layer, loaded->policy, loaded->source, options)
               : store_.ApplyPolicy(loaded->policy, loaded->source, options);
  });
  if (!result.ok()) return ToGrpc(result.status());
  FillEdit(*result, response);
  return grpc::Status::OK;
}

template <typename Request>
grpc::Status PolicyServiceImpl::EditRule(grpc::ServerContext* context, const Request& request,
                                         RuleEdit edit, v1::EditResponse* response) {
  REQUIRE_ROLE(Role::kEditor, "editing");
  auto layer = LayerOf(request.layer(), request.has_layer(), true);
  if (!layer.ok()) return ToGrpc(layer.status());
  if (fleet_ != nullptr) {
    const bool set = edit == &policy::Store::SetRule;
    if ((*layer)->is_default) {
      return ToGrpc(FleetRefusal(*fleet_, set ? "set-rule" : "delete-rule"));
    }
    return FleetDomainEdit(context, set ? fleet::LayerEdit::kSetRule : fleet::LayerEdit::kDeleteRule,
                           (*layer)->domain, "", "", &request.rule(), request.if_generation(),
                           response);
  }
  // Explicit captures: GCC 12 miscompiles an implicit `this` captured with
  // [&] next to a pointer-to-member call here (UBSan: misaligned `this`).
  const policy::EditOptions options = EditOptionsFor(request.if_generation(), auth_, *context);
  policy::Store& store = store_;
  const policy::LayerRef target = **layer;
  const v1::MsrRule& rule = request.rule();
  auto result = Timed([&store, edit, &target, &rule, &options] {
    return (store.*edit)(target, rule, options);
  });
  if (!result.ok()) return ToGrpc(result.status());
  FillEdit(*result, response);
  return grpc::Status::OK;
}

grpc::Status PolicyServiceImpl::SetRule(grpc::ServerContext* context,
                                        const v1::SetRuleRequest* request,
                                        v1::EditResponse* response) {
  return EditRule(context, *request, &policy::Store::SetRule, response);
}

grpc::Status PolicyServiceImpl::DeleteRule(grpc::ServerContext* context,
                                           const v1::DeleteRuleRequest* request,
                                           v1::EditResponse* response) {
  return EditRule(context, *request, &policy::Store::DeleteRule, response);
}

grpc::Status PolicyServiceImpl::DiffPolicy(grpc::ServerContext* context,
                                           const v1::DiffPolicyRequest* request,
                                           v1::DiffPolicyResponse* response) {
  REQUIRE_ROLE(Role::kReader, "reading");
  auto layer = LayerOf(request->layer(), request->has_layer(), false);
  if (!layer.ok()) return ToGrpc(layer.status());
  auto loaded = PolicyOf(request->policy(), request->has_policy(), request->textproto(),
                         request->source_name());
  if (!loaded.ok()) return ToGrpc(loaded.status());
  const uint64_t generation = store_.generation();
  absl::StatusOr<std::string> diff =
      layer->has_value() ? store_.DiffLayer(**layer, loaded->policy, loaded->source)
                         : store_.Diff(loaded->policy, loaded->source);
  if (!diff.ok()) return ToGrpc(diff.status());
  response->set_diff(*diff);
  response->set_generation(generation);
  return grpc::Status::OK;
}

grpc::Status PolicyServiceImpl::ListDomains(grpc::ServerContext* context,
                                            const v1::ListDomainsRequest*,
                                            v1::ListDomainsResponse* response) {
  REQUIRE_ROLE(Role::kReader, "reading");
  std::shared_ptr<const policy::Snapshot> snap = store_.Current();
  std::vector<v1::DomainInfo> live;
  if (live_) {
    auto listed = live_();
    if (!listed.ok()) return ToGrpc(listed.status());
    live = std::move(*listed);
  } else {
    // Hosts without domains of their own (sim, linux) have one: dom0.
    v1::DomainInfo dom0;
    dom0.set_domain(0);
    dom0.set_live(true);
    dom0.set_state("running");
    live.push_back(dom0);
  }
  absl::flat_hash_map<uint32_t, v1::DomainInfo> by_id;
  for (v1::DomainInfo& d : live) by_id[d.domain()] = std::move(d);
  if (kvm_ != nullptr) {
    for (const KvmAttachments::Attachment& a : kvm_->List()) {
      v1::DomainInfo& d = by_id[a.domain];
      d.set_domain(a.domain);
      d.set_live(true);
      d.set_state("running");
      d.set_attached("kvm");
      d.set_attached_pid(a.pid);
      d.set_vcpus(a.vcpus);
      d.set_applied_generation(a.generation);
    }
  }
  for (const v1::Layer& layer : snap->policy().domain()) {
    v1::DomainInfo& d = by_id[layer.domain()];
    if (d.state().empty()) {
      d.set_domain(layer.domain());
      d.set_state("configured");
    }
  }
  std::vector<uint32_t> ids;
  for (const auto& [id, info] : by_id) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint32_t id : ids) {
    v1::DomainInfo& d = by_id[id];
    const policy::DomainSnapshot& ds = snap->ForDomain(id);
    d.set_hardware_domain(ds.hardware_domain());
    d.set_has_overlay(ds.has_overlay());
    *response->add_domain() = std::move(d);
  }
  response->set_generation(snap->generation());
  return grpc::Status::OK;
}

grpc::Status PolicyServiceImpl::Explain(grpc::ServerContext* context,
                                        const v1::ExplainRequest* request,
                                        v1::ExplainResponse* response) {
  REQUIRE_ROLE(Role::kReader, "reading");
  std::optional<uint64_t> write;
  if (request->has_write_value()) write = request->write_value();
  if (request->has_port()) {
    const uint32_t width = request->port_width() == 0 ? 1 : request->port_width();
    if (!request->msr().empty()) {
      return ToGrpc(absl::InvalidArgumentError("explain: give an msr or a port, not both"));
    }
    if (request->port() > 0xffff || (width != 1 && width != 2 && width != 4)) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "explain: port ", request->port(), " width ", width,
          " is not an I/O access; ports are 0..0xffff, widths 1, 2 or 4")));
    }
    std::shared_ptr<const policy::Snapshot> snap = store_.Current();
    policy::Explanation e =
        policy::ExplainPort(*snap, request->domain(), static_cast<uint16_t>(request->port()),
                            static_cast<uint8_t>(width), write);
    policy::ExplanationToProto(e, *snap, response);
    if (host_note_) response->set_host_note(host_note_(e));
    return grpc::Status::OK;
  }
  absl::StatusOr<uint32_t> msr = x86::ParseMsr(request->msr());
  if (!msr.ok()) return ToGrpc(msr.status());
  std::shared_ptr<const policy::Snapshot> snap = store_.Current();
  policy::Explanation e = policy::ExplainMsr(*snap, request->domain(), *msr, write);
  policy::ExplanationToProto(e, *snap, response);
  if (host_note_) response->set_host_note(host_note_(e));
  return grpc::Status::OK;
}

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
  std::unique_ptr<dispatch::Dispatcher::Session> session = Borrow();
  absl::Status status = HandleOne(*session, *request, response);
  Return(std::move(session));
  return ToGrpc(status);
}

grpc::Status EmulatorServiceImpl::EmulateStream(
    grpc::ServerContext* context, grpc::ServerReaderWriter<v1::Outcome, v1::Trap>* stream) {
  REQUIRE_ROLE(Role::kEditor, "emulating");
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
    FillMsrStats(dispatcher_.CountsByKey().msrs, *request, response);
  }
  return grpc::Status::OK;
}

grpc::Status AuditServiceImpl::Watch(grpc::ServerContext* context,
                                     const v1::WatchRequest* request,
                                     grpc::ServerWriter<v1::AuditEvent>* writer) {
  REQUIRE_ROLE(Role::kReader, "reading");
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


grpc::Status Denied(absl::string_view what, const Authorizer& auth,
                    const grpc::ServerContext& context) {
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(what, " is not allowed for ", auth.Describe(context),
                                   "; ask an operator to add you to pvemud's --",
                                   what == "reading" ? "readers" : "editors", " list"));
}

bool Allowed(const Authorizer& auth, const grpc::ServerContext& context, bool edit) {
  const Role role = auth.RoleOf(context);
  return role != Role::kNone && (!edit || role == Role::kEditor);
}

// --- KVM data planes ---------------------------------------------------------

uint64_t KvmAttachments::Attach(uint32_t domain, uint32_t pid, uint32_t vcpus) {
  absl::MutexLock lock(&mu_);
  const uint64_t key = next_key_++;
  by_key_[key] = Attachment{domain, pid, vcpus, 0};
  return key;
}

void KvmAttachments::Detach(uint64_t key) {
  absl::MutexLock lock(&mu_);
  by_key_.erase(key);
}

void KvmAttachments::Report(uint32_t pid, const v1::KvmTrapBatch& batch) {
  absl::MutexLock lock(&mu_);
  // The batch comes on its own stream: find the subscription of the same
  // process and domain to show what it applies.
  for (auto& [key, a] : by_key_) {
    if (a.pid == pid && a.domain == batch.domain()) {
      a.vcpus = batch.vcpus();
      a.generation = batch.generation();
    }
  }
  counts_.traps += batch.traps();
  counts_.completed += batch.completed();
  counts_.exceptions += batch.exceptions();
  counts_.device_io += batch.device_io();
}

std::vector<KvmAttachments::Attachment> KvmAttachments::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<Attachment> out;
  for (const auto& [key, a] : by_key_) out.push_back(a);
  std::sort(out.begin(), out.end(), [](const Attachment& x, const Attachment& y) {
    return std::tie(x.domain, x.pid) < std::tie(y.domain, y.pid);
  });
  return out;
}

void KvmAttachments::PolicyChanged(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  announced_generation_ = generation;
}

bool KvmAttachments::WaitForPolicy(uint64_t sent, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto moved = [this, sent]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return announced_generation_ != sent;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&moved), timeout);
}

KvmAttachments::Counts KvmAttachments::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

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
    for (const v1::TrapEvent& event : batch.events()) {
      audit_.PublishTrap(event, event.reason() == "unknown-msr");
    }
  }
  return grpc::Status::OK;
}

}  // namespace pvemu::server
