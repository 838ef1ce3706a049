#include "policy/loader.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "x86/msr_catalog.h"
#include "policy/rules.h"
#include "base/status_macros.h"
#include "base/textproto.h"

namespace pvemu::policy {
namespace {

using pvemu::v1::Layer;
using pvemu::v1::MsrRule;
using pvemu::v1::Policy;
using pvemu::v1::ReadAction;
using pvemu::v1::TscPolicy;
using pvemu::v1::WriteAction;

// Enough errors to act on. A flood (thousands of copies of one rule, each
// tying with every other) would cost time and memory for nothing, and would
// not fit in a gRPC status.
constexpr size_t kMaxErrors = 8;

class Validator {
 public:
  explicit Validator(const SourceMap& source) : source_(source) {}

  void Error(absl::string_view path, absl::string_view message) {
    if (full()) return;
    errors_.push_back(absl::StrCat(source_.Where(path), ": ", message));
  }

  // Whether further errors would be dropped; validation stops early.
  bool full() const { return errors_.size() >= kMaxErrors; }

  // Proto3 enums are open: a binary message (an RPC) can carry any number
  // where text format can only name a value.
  void KnownEnum(const google::protobuf::EnumDescriptor* type, int value,
                 const std::string& path) {
    if (type->FindValueByNumber(value) != nullptr) return;
    std::vector<std::string> names;
    for (int i = 0; i < type->value_count(); ++i) names.push_back(type->value(i)->name());
    Error(path, absl::StrFormat("%d is not a value of %s; use one of %s", value,
                                absl::StripPrefix(type->full_name(), "pvemu.v1."),
                                absl::StrJoin(names, ", ")));
  }

  void Layer(const pvemu::v1::Layer& layer, const std::string& path, bool is_default) {
    if (is_default && layer.domain() != 0) {
      Error(path + ".domain",
            absl::StrFormat("the default layer cannot name a domain (domain: %d); "
                            "move these settings into a `domain { domain: %d ... }` layer",
                            layer.domain(), layer.domain()));
    }
    if (is_default && layer.has_hardware_domain()) {
      Error(path + ".hardware_domain",
            "the default layer cannot set hardware_domain; set it in a domain layer");
    }
    KnownEnum(pvemu::v1::UnknownMsr_descriptor(), layer.unknown_msr(), path + ".unknown_msr");
    KnownEnum(pvemu::v1::Vendor_descriptor(), layer.guest_vendor(), path + ".guest_vendor");
    KnownEnum(TscPolicy::Mode_descriptor(), layer.tsc().mode(), path + ".tsc.mode");
    for (int i = 0; i < layer.cpuid_size(); ++i) {
      KnownEnum(pvemu::v1::CpuidEntry::Source_descriptor(), layer.cpuid(i).source(),
                absl::StrCat(path, ".cpuid[", i, "].source"));
    }
    std::vector<Resolved> rules;
    for (int i = 0; i < layer.msr_size() && !full(); ++i) {
      std::string rpath = absl::StrCat(path, ".msr[", i, "]");
      Rule(layer.msr(i), rpath, &rules);
    }
    Ties(rules);
    for (int i = 0; i < layer.io_port_size(); ++i) {
      const pvemu::v1::PortRange& p = layer.io_port(i);
      std::string ppath = absl::StrCat(path, ".io_port[", i, "]");
      bool in_range = true;
      if (p.first() > 0xffff) {
        Error(ppath + ".first", absl::StrFormat("port 0x%x is out of range; ports are "
                                                "0..0xffff", p.first()));
        in_range = false;
      }
      if (p.last() > 0xffff) {
        Error(ppath + ".last", absl::StrFormat("port 0x%x is out of range; ports are "
                                               "0..0xffff", p.last()));
        in_range = false;
      }
      if (in_range && p.first() > p.last()) {
        Error(ppath, absl::StrFormat("port range first 0x%x is greater than last 0x%x; "
                                     "swap them", p.first(), p.last()));
      }
    }
    if (layer.has_tsc() && layer.tsc().mode() == TscPolicy::EMULATED &&
        layer.tsc().frequency_khz() == 0) {
      Error(path + ".tsc", "tsc mode EMULATED needs frequency_khz (the guest's TSC "
                           "frequency); add it or use NATIVE/OFFSET");
    }
  }

  absl::Status Finish() const {
    if (errors_.empty()) return absl::OkStatus();
    std::string message = absl::StrJoin(errors_, "\n");
    if (full()) {
      absl::StrAppend(&message, "\n(at most ", kMaxErrors,
                      " errors are reported; fix these and check again)");
    }
    return absl::InvalidArgumentError(message);
  }

  void Domains(const Policy& policy) {
    absl::flat_hash_map<uint32_t, int> seen;
    for (int i = 0; i < policy.domain_size() && !full(); ++i) {
      uint32_t d = policy.domain(i).domain();
      std::string path = absl::StrCat("domain[", i, "]");
      auto [it, inserted] = seen.emplace(d, i);
      if (!inserted) {
        Error(path, absl::StrFormat("domain %d is already defined at %s; merge the two "
                                    "layers into one",
                                    d, source_.WhereLine(absl::StrCat("domain[", it->second,
                                                                      "]"))));
      }
      Layer(policy.domain(i), path, /*is_default=*/false);
    }
  }

 private:
  struct Resolved {
    const MsrRule* rule;
    std::string path;
    Target target;
  };

  void Rule(const MsrRule& rule, const std::string& path, std::vector<Resolved>* out) {
    bool target_ok = true;
    Target t;
    if (rule.target_case() == MsrRule::kMsr) {
      absl::StatusOr<uint32_t> i = x86::ParseMsr(rule.msr());
      if (!i.ok()) {
        Error(path + ".msr", i.status().message());
        target_ok = false;
      } else {
        t.first = t.last = *i;
      }
    } else if (rule.target_case() == MsrRule::kRange) {
      t.single = false;
      absl::StatusOr<uint32_t> first = x86::ParseMsr(rule.range().first());
      absl::StatusOr<uint32_t> last = x86::ParseMsr(rule.range().last());
      if (!first.ok()) Error(path + ".range.first", first.status().message());
      if (!last.ok()) Error(path + ".range.last", last.status().message());
      if (first.ok() && last.ok()) {
        t.first = *first;
        t.last = *last;
        if (t.first > t.last) {
          Error(path + ".range",
                absl::StrFormat("range first 0x%x is greater than last 0x%x; swap them",
                                t.first, t.last));
          target_ok = false;
        }
      } else {
        target_ok = false;
      }
    } else {
      Error(path, "rule has no target; set `msr: NAME` or `range { first: .. last: .. }`");
      target_ok = false;
    }

    KnownEnum(pvemu::v1::Vendor_descriptor(), rule.host_vendor(), path + ".host_vendor");
    KnownEnum(pvemu::v1::Vendor_descriptor(), rule.guest_vendor(), path + ".guest_vendor");
    KnownEnum(ReadAction::Action_descriptor(), rule.read(), path + ".read");
    KnownEnum(WriteAction::Action_descriptor(), rule.write(), path + ".write");
    KnownEnum(pvemu::v1::ReservedBits_descriptor(), rule.on_reserved_bits(),
              path + ".on_reserved_bits");
    if (rule.read() == ReadAction::CONST && !rule.has_value()) {
      Error(path + ".read", "read CONST needs a value; add `value: N`");
    }
    if (rule.has_writable_mask() && rule.write() != WriteAction::SHADOW &&
        rule.write() != WriteAction::PASSTHROUGH) {
      Error(path + ".writable_mask",
            absl::StrCat("writable_mask applies only to a SHADOW or PASSTHROUGH write, "
                         "but this rule's write is ",
                         WriteAction::Action_Name(rule.write()),
                         "; set `write: SHADOW` or remove writable_mask"));
    }
    if (rule.write() == WriteAction::PASSTHROUGH && !rule.allow_host_write()) {
      Error(path + ".write",
            "write PASSTHROUGH needs `allow_host_write: true` (and the daemon's host "
            "writes enabled); add it, or use SHADOW or IGNORE");
    }
    // A rule that decides neither half cannot tie with anything.
    bool decides = rule.read() != ReadAction::ACTION_UNSPECIFIED ||
                   rule.write() != WriteAction::ACTION_UNSPECIFIED;
    if (target_ok && decides) out->push_back(Resolved{&rule, path, t});
  }

  // Two rules of one layer tie when some MSR, host and domain could match both
  // with the same specificity and they decide the same half (read or write).
  void Ties(std::vector<Resolved>& rules) {
    std::sort(rules.begin(), rules.end(), [](const Resolved& a, const Resolved& b) {
      if (a.target.single != b.target.single) return a.target.single;
      if (a.target.width() != b.target.width()) return a.target.width() < b.target.width();
      if (a.target.first != b.target.first) return a.target.first < b.target.first;
      return a.path < b.path;  // stable, file order within a layer
    });
    for (size_t i = 0; i < rules.size() && !full(); ++i) {
      for (size_t j = i + 1; j < rules.size() && !full(); ++j) {
        const Resolved& a = rules[i];
        const Resolved& b = rules[j];
        if (b.target.single != a.target.single || b.target.width() != a.target.width() ||
            b.target.first > a.target.last) {
          break;
        }
        const MsrRule& ra = *a.rule;
        const MsrRule& rb = *b.rule;
        bool halves = (ra.read() != ReadAction::ACTION_UNSPECIFIED &&
                       rb.read() != ReadAction::ACTION_UNSPECIFIED) ||
                      (ra.write() != WriteAction::ACTION_UNSPECIFIED &&
                       rb.write() != WriteAction::ACTION_UNSPECIFIED);
        if (!halves || ConditionCount(ra) != ConditionCount(rb) ||
            !ConditionsCompatible(ra, rb)) {
          continue;
        }
        const Resolved& first = source_.Line(a.path) <= source_.Line(b.path) ? a : b;
        const Resolved& second = &first == &a ? b : a;
        Error(second.path,
              absl::StrFormat("rule for %s ties with the rule for %s at %s (same layer, "
                              "same specificity, both can apply); add a condition to one "
                              "of them or delete one",
                              DescribeTarget(second.target), DescribeTarget(first.target),
                              source_.WhereLine(first.path)));
      }
    }
  }

  const SourceMap& source_;
  std::vector<std::string> errors_;
};

}  // namespace

absl::Status ValidatePolicy(const Policy& policy, const SourceMap& source) {
  Validator v(source);
  if (policy.has_default_()) v.Layer(policy.default_(), "default", /*is_default=*/true);
  v.Domains(policy);
  return v.Finish();
}

absl::Status ValidatePolicy(const Policy& policy, absl::string_view source_name) {
  return ValidatePolicy(policy, SourceMap(std::string(source_name)));
}

absl::StatusOr<LoadedPolicy> ParsePolicy(absl::string_view text,
                                         absl::string_view source_name) {
  Policy policy;
  google::protobuf::TextFormat::ParseInfoTree tree;
  RETURN_IF_ERROR(ParseTextProto(text, source_name, &policy, &tree));
  LoadedPolicy out{policy, SourceMap::FromParseInfo(std::string(source_name), policy, tree)};
  RETURN_IF_ERROR(ValidatePolicy(out.policy, out.source));
  return out;
}

absl::StatusOr<LoadedPolicy> LoadPolicyFile(const std::string& path) {
  std::string text;
  RETURN_IF_ERROR(ReadFileToString(path, &text));
  return ParsePolicy(text, path);
}

}  // namespace pvemu::policy
