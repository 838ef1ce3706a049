#include "server/policy_service.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/textproto.h"
#include "fleet/fleet.h"
#include "policy/loader.h"
#include "server/rpc_common.h"
#include "x86/msr_catalog.h"

namespace pvemu::server {

namespace {

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

grpc::Status PolicyServiceImpl::FleetDomainEdit(grpc::ServerContext* context, fleet::LevelEdit::Op op,
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
  fleet::LevelEdit edit;
  edit.op = op;
  edit.level = fleet::LevelName{fleet::LevelName::kHostDomain, fleet_->keys().host_id(), domain};
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
    return FleetDomainEdit(context, fleet::LevelEdit::kApply, (*layer)->domain, text,
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
    return FleetDomainEdit(context, set ? fleet::LevelEdit::kSetRule : fleet::LevelEdit::kDeleteRule,
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

grpc::Status PolicyServiceImpl::SetMode(grpc::ServerContext* context,
                                        const v1::SetModeRequest* request,
                                        v1::EditResponse* response) {
  REQUIRE_ROLE(Role::kEditor, "editing");
  auto layer = LayerOf(request->layer(), request->has_layer(), true);
  if (!layer.ok()) return ToGrpc(layer.status());
  if (fleet_ != nullptr) {
    // A fleet level's mode is a field of its value, like any other.
    return ToGrpc(absl::FailedPreconditionError(absl::StrCat(
        "this host (", fleet_->keys().host_id(), ") is in fleet mode: set `mode: ",
        v1::PolicyMode_Name(request->mode()),
        "` in the fleet level's value and apply it with `pvemuctl fleet apply -f FILE "
        "--layer=...`")));
  }
  const policy::EditOptions options = EditOptionsFor(request->if_generation(), auth_, *context);
  policy::Store& store = store_;
  const policy::LayerRef target = **layer;
  const v1::PolicyMode mode = request->mode();
  auto result = Timed([&store, &target, mode, &options] {
    return store.SetMode(target, mode, options);
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

}  // namespace pvemu::server
