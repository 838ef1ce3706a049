#include "policy/explain.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "x86/msr_catalog.h"

namespace pvemu::policy {

using pvemu::v1::ReadAction;
using pvemu::v1::WriteAction;

namespace {

// A LEARN domain: what the guest gets instead of an enforcing fault.
void AddLearning(const DomainSnapshot& d, absl::string_view given, absl::string_view answer,
                 Explanation* x) {
  x->learning_action = std::string(given);
  absl::StrAppend(&x->detail, "; while domain ", x->domain, " learns (mode: LEARN, ",
                  d.setting_origins().mode, ") it ", answer,
                  " instead, and the access is recorded for pvemuctl suggest");
}

}  // namespace

Explanation ExplainMsr(const Snapshot& snapshot, uint32_t domain, uint32_t msr,
                       std::optional<uint64_t> write_value) {
  Explanation x = ExplainEnforcedMsr(snapshot, domain, msr, write_value);
  const DomainSnapshot& d = snapshot.ForDomain(domain);
  if (!d.learning() || x.action != "GP") return x;
  if (x.write) {
    AddLearning(d, "IGNORE", "completes and the value is dropped", &x);
  } else {
    AddLearning(d, "ZERO", "reads 0", &x);
  }
  return x;
}

Explanation ExplainEnforcedMsr(const Snapshot& snapshot, uint32_t domain, uint32_t msr,
                               std::optional<uint64_t> write_value) {
  const DomainSnapshot& d = snapshot.ForDomain(domain);
  const MsrEntry& e = d.EnforcedLookup(msr);
  Explanation x;
  x.domain = domain;
  x.msr = msr;
  x.name = std::string(x86::MsrName(msr));
  x.unknown = e.unknown;
  x.write = write_value.has_value();
  const RuleOrigin& o = d.origin(x.write ? e.write_origin : e.read_origin);
  x.layer = o.layer;
  x.source = o.source;
  x.comment = o.comment;
  if (!x.write) {
    x.action = ReadAction::Action_Name(e.read);
    switch (e.read) {
      case ReadAction::CONST:
      case ReadAction::ZERO:
        x.value = e.read == ReadAction::ZERO ? 0 : e.value;
        x.detail = absl::StrFormat("reads 0x%x", *x.value);
        break;
      case ReadAction::SHADOW:
        x.detail = e.has_value ? absl::StrFormat("reads the vCPU's shadow register "
                                                 "(initially 0x%x)", e.value)
                               : "reads the vCPU's shadow register (initially the host's value)";
        break;
      case ReadAction::PASSTHROUGH:
        x.detail = "reads the host MSR; a host fault injects #GP(0)";
        break;
      default:
        x.detail = "injects #GP(0)";
    }
    return x;
  }
  uint64_t v = *write_value;
  x.action = WriteAction::Action_Name(e.write);
  bool stores = e.write == WriteAction::SHADOW || e.write == WriteAction::PASSTHROUGH;
  if (stores && e.writable_mask != ~uint64_t{0}) {
    // Reserved bits are checked against the current value; without a host
    // that is known only for a shadow register with a configured value.
    if (e.write == WriteAction::SHADOW && e.has_value) {
      uint64_t changed = (v ^ e.value) & ~e.writable_mask;
      if (changed != 0) {
        x.action = e.drop_reserved ? "IGNORE" : "GP";
        x.detail = absl::StrFormat(
            "the write changes bits 0x%x outside writable_mask 0x%x; %s", changed,
            e.writable_mask, e.drop_reserved ? "it is dropped" : "#GP(0)");
        return x;
      }
    } else {
      x.detail = absl::StrFormat(
          "bits outside writable_mask 0x%x must keep their current value", e.writable_mask);
    }
  }
  switch (e.write) {
    case WriteAction::SHADOW:
      x.value = v;
      if (x.detail.empty()) x.detail = absl::StrFormat("stores 0x%x in the vCPU's shadow register", v);
      break;
    case WriteAction::PASSTHROUGH:
      x.value = v;
      if (x.detail.empty()) {
        x.detail = "writes the host MSR (only if the daemon allows host writes)";
      }
      break;
    case WriteAction::IGNORE:
      x.detail = "completes and drops the value";
      break;
    default:
      x.detail = "injects #GP(0)";
  }
  return x;
}

namespace {

// The io_port range of `layer` that holds [port, last], or null.
const v1::PortRange* GrantingRange(const v1::Layer& layer, uint32_t port, uint32_t last) {
  for (const v1::PortRange& r : layer.io_port()) {
    if (r.first() <= port && last <= r.last()) return &r;
  }
  return nullptr;
}

}  // namespace

Explanation ExplainPort(const Snapshot& snapshot, uint32_t domain, uint16_t port, uint8_t width,
                        std::optional<uint64_t> write_value) {
  Explanation x;
  x.domain = domain;
  x.port = port;
  x.width = width;
  x.write = write_value.has_value();
  const uint32_t last = uint32_t{port} + width - 1;
  const DomainSnapshot& d = snapshot.ForDomain(domain);
  const bool granted = d.EnforcedPortAllowed(port, width);
  const std::string what =
      absl::StrFormat("%s of %u byte%s at port %#x", x.write ? "OUT" : "IN", width,
                      width == 1 ? "" : "s", port);
  if (!granted) {
    x.action = "FLOAT";
    x.layer = "io_port";
    if (!x.write) x.value = width >= 4 ? 0xffffffffu : (1u << (8 * width)) - 1;
    x.detail = absl::StrCat(what, ": not in the domain's io_port ranges; ",
                            x.write ? "the write is dropped" : "reads all ones");
    if (d.learning()) {
      AddLearning(d, "DEVICE", "goes to the device as if granted", &x);
    }
    return x;
  }
  x.action = "DEVICE";
  // The range that grants it: the domain's own layer first, then the default.
  const v1::PortRange* range = nullptr;
  for (const v1::Layer& layer : snapshot.policy().domain()) {
    if (layer.domain() == domain && (range = GrantingRange(layer, port, last)) != nullptr) {
      x.layer = "domain";
      break;
    }
  }
  if (range == nullptr) {
    range = GrantingRange(snapshot.policy().default_(), port, last);
    x.layer = "default";
  }
  if (range != nullptr) {
    x.source = absl::StrFormat("io_port %#x-%#x", range->first(), range->last());
    x.comment = range->comment();
  } else {
    x.source = "io_port (adjacent ranges, merged)";
  }
  x.detail = absl::StrCat(what,
                          ": granted; a device the host models there answers, otherwise the "
                          "trap source's device model does (outcome DEVICE_IO)");
  return x;
}

void ExplanationToProto(const Explanation& e, const Snapshot& snapshot,
                        v1::ExplainResponse* response) {
  response->set_domain(e.domain);
  if (e.port.has_value()) {
    response->set_port(*e.port);
  } else {
    response->set_msr(e.msr);
  }
  response->set_name(e.name);
  response->set_access(e.access());
  response->set_action(e.action);
  if (e.value.has_value()) response->set_value(*e.value);
  response->set_layer(e.layer);
  response->set_source(e.source);
  response->set_generation(snapshot.generation());
  response->set_detail(e.detail);
  response->set_learning_action(e.learning_action);
}

}  // namespace pvemu::policy
