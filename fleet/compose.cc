#include "fleet/compose.h"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "policy/rule_target.h"

namespace pvemu::fleet {
namespace {

using pvemu::v1::Layer;
using pvemu::v1::MsrRule;
using pvemu::v1::Policy;
using policy::LoadedPolicy;
using policy::SourceMap;

// One parsed layer in precedence order.
struct Level {
  std::string key;
  LevelName layer;
  LoadedPolicy loaded;
};

// A rule's identity for merging: its resolved target and its conditions.
std::string Identity(const MsrRule& rule) {
  absl::StatusOr<policy::Target> t = policy::ResolveTarget(rule);
  // Layers are validated before they are merged, so targets resolve.
  if (!t.ok()) return absl::StrCat("unresolved:", rule.ShortDebugString());
  return absl::StrCat(t->first, "-", t->last, t->single ? "s" : "r", "|", rule.host_vendor(), "|",
                      rule.guest_vendor(), "|",
                      rule.has_hardware_domain() ? (rule.hardware_domain() ? 1 : 0) : -1);
}

// Whether two rules of one identity decide the same (comments aside).
bool SameDecision(MsrRule a, MsrRule b) {
  a.clear_comment();
  b.clear_comment();
  a.clear_msr();
  a.clear_range();
  b.clear_msr();
  b.clear_range();
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

std::string Path(absl::string_view layer_path, absl::string_view field, int index) {
  return absl::StrCat(layer_path, ".", field, "[", index, "]");
}

// Whether `rule` can apply on a host of `vendor` (UNSPECIFIED: any host).
bool ForHost(const MsrRule& rule, v1::Vendor vendor) {
  return vendor == v1::VENDOR_UNSPECIFIED || rule.host_vendor() == v1::VENDOR_UNSPECIFIED ||
         rule.host_vendor() == vendor;
}

bool DecidesRead(const MsrRule& r) { return r.read() != v1::ReadAction::ACTION_UNSPECIFIED; }
bool DecidesWrite(const MsrRule& r) { return r.write() != v1::WriteAction::ACTION_UNSPECIFIED; }

// Takes the layer-wide settings `src` sets (hardware_domain, unknown_msr,
// tsc, vpmu, guest_vendor, mode), with their source positions: a layer that sets
// one overrides what the layers below it said.
void TakeSettings(const Layer& src, const SourceMap& src_map, const std::string& src_path,
                  Layer* dst, SourceMap* dst_map, const std::string& dst_path) {
  const auto graft = [&](absl::string_view field) {
    dst_map->Graft(absl::StrCat(dst_path, ".", field), src_map, absl::StrCat(src_path, ".", field));
  };
  if (src.has_hardware_domain()) {
    dst->set_hardware_domain(src.hardware_domain());
    graft("hardware_domain");
  }
  if (src.unknown_msr() != v1::UNKNOWN_MSR_UNSPECIFIED) {
    dst->set_unknown_msr(src.unknown_msr());
    graft("unknown_msr");
  }
  if (src.tsc().mode() != v1::TscPolicy::MODE_UNSPECIFIED) {
    *dst->mutable_tsc() = src.tsc();
    graft("tsc");
  }
  if (src.has_vpmu()) {
    dst->set_vpmu(src.vpmu());
    graft("vpmu");
  }
  if (src.guest_vendor() != v1::VENDOR_UNSPECIFIED) {
    dst->set_guest_vendor(src.guest_vendor());
    graft("guest_vendor");
  }
  if (src.has_mode()) {
    dst->set_mode(src.mode());
    graft("mode");
  }
}

// Merges `src` (at `src_path` in `src_map`) over `dst` (at `dst_path`).
// A layer that has rules for an MSR or a range replaces what the layers
// below say about that MSR or range, and about every MSR and narrower range
// inside it, for each half (read, write) its rules decide: its rules are
// the whole story there, as a domain overlay's are over the default layer.
// Rules for other host vendors never apply on this host and are left out.
void MergeIntoComposed(const Layer& src, const SourceMap& src_map, const std::string& src_path,
                Layer* dst, SourceMap* dst_map, const std::string& dst_path,
                v1::Vendor vendor) {
  // What `src` shadows, by half: single MSRs in a hash map, ranges in a
  // list, so that a layer of thousands of single-MSR rules over thousands
  // more costs one look-up per rule, not every pair (an etcd writer chooses
  // the layers' sizes; etcd's 1.5 MiB takes some 20,000 rules).
  struct Shadow {
    policy::Target target;
    bool read, write;
  };
  struct Halves {
    bool read = false, write = false;
  };
  absl::flat_hash_map<uint32_t, Halves> single_shadows;
  std::vector<Shadow> range_shadows;
  for (const MsrRule& r : src.msr()) {
    absl::StatusOr<policy::Target> t = policy::ResolveTarget(r);
    if (!t.ok() || !ForHost(r, vendor)) continue;
    if (t->first == t->last) {
      Halves& h = single_shadows[t->first];
      h.read = h.read || DecidesRead(r);
      h.write = h.write || DecidesWrite(r);
    } else {
      range_shadows.push_back({*t, DecidesRead(r), DecidesWrite(r)});
    }
  }
  const int old_count = dst->msr_size();
  google::protobuf::RepeatedPtrField<MsrRule> kept;
  std::vector<int> kept_from;  // old index of each kept rule
  for (int i = 0; i < old_count; ++i) {
    MsrRule d = dst->msr(i);
    absl::StatusOr<policy::Target> td = policy::ResolveTarget(d);
    const auto shadow = [&d](bool read, bool write) {
      if (read && DecidesRead(d)) {
        d.clear_read();
        if (d.write() != v1::WriteAction::SHADOW) d.clear_value();
      }
      if (write && DecidesWrite(d)) {
        d.clear_write();
        d.clear_writable_mask();
        d.clear_on_reserved_bits();
        d.clear_allow_host_write();
      }
    };
    if (td.ok() && td->first == td->last) {
      // Only a single-MSR shadow of that very MSR contains it.
      auto it = single_shadows.find(td->first);
      if (it != single_shadows.end()) shadow(it->second.read, it->second.write);
    }
    for (const Shadow& s : range_shadows) {
      if (!td.ok() || td->first < s.target.first || td->last > s.target.last) continue;
      shadow(s.read, s.write);
    }
    if (!DecidesRead(d) && !DecidesWrite(d)) continue;
    *kept.Add() = std::move(d);
    kept_from.push_back(i);
  }
  for (int j = 0; j < src.msr_size(); ++j) {
    if (!ForHost(src.msr(j), vendor)) continue;
    *kept.Add() = src.msr(j);
    kept_from.push_back(-1 - j);
  }
  *dst->mutable_msr() = std::move(kept);
  // Positions move with their rules. A kept rule only moves towards the
  // front (kept_from grows, and from >= n), so its old positions are read
  // before anything is written over them: the map is not copied, and a rule
  // that kept its index (all of them, when nothing is shadowed) keeps its
  // positions untouched. That copy and a graft per rule were most of an
  // ordinary edit's compose.
  for (int n = 0; n < dst->msr_size(); ++n) {
    const int from = kept_from[n];
    if (from >= 0) {
      dst_map->Move(Path(dst_path, "msr", n), Path(dst_path, "msr", from));
    } else {
      dst_map->Graft(Path(dst_path, "msr", n), src_map, Path(src_path, "msr", -1 - from));
    }
  }
  const SourceMap none("<none>");
  for (int n = dst->msr_size(); n < old_count; ++n) {
    dst_map->Graft(Path(dst_path, "msr", n), none, "-");  // drops the stale positions
  }
  // CPUID entries by (leaf, has_subleaf, subleaf), ports by (first, last).
  const auto leaf_key = [](const v1::CpuidEntry& e) {
    return std::make_tuple(e.leaf(), e.has_subleaf(), e.subleaf());
  };
  absl::flat_hash_map<std::tuple<uint32_t, bool, uint32_t>, int> cpuid_at;
  for (int i = 0; i < dst->cpuid_size(); ++i) cpuid_at.emplace(leaf_key(dst->cpuid(i)), i);
  for (int j = 0; j < src.cpuid_size(); ++j) {
    const v1::CpuidEntry& e = src.cpuid(j);
    auto [it, added] = cpuid_at.emplace(leaf_key(e), dst->cpuid_size());
    if (added) dst->add_cpuid();
    const int i = it->second;
    *dst->mutable_cpuid(i) = e;
    dst_map->Graft(Path(dst_path, "cpuid", i), src_map, Path(src_path, "cpuid", j));
  }
  absl::flat_hash_set<std::pair<uint32_t, uint32_t>> ports;
  for (const v1::PortRange& r : dst->io_port()) ports.emplace(r.first(), r.last());
  for (int j = 0; j < src.io_port_size(); ++j) {
    if (!ports.emplace(src.io_port(j).first(), src.io_port(j).last()).second) continue;
    *dst->add_io_port() = src.io_port(j);
    dst_map->Graft(Path(dst_path, "io_port", dst->io_port_size() - 1), src_map,
                   Path(src_path, "io_port", j));
  }
  TakeSettings(src, src_map, src_path, dst, dst_map, dst_path);
}

// Appends `src`'s rules, CPUID entries and ports to `dst` and takes the
// settings it sets: the classes of a host, which are peers, become one
// level this way (their disagreements are ties, checked before).
void Concat(const Layer& src, const SourceMap& src_map, const std::string& src_path, Layer* dst,
            SourceMap* dst_map, const std::string& dst_path) {
  const auto append = [&](absl::string_view field, int from, int to) {
    dst_map->Graft(Path(dst_path, field, to), src_map, Path(src_path, field, from));
  };
  // dst's rules by identity, so that each of src's is one look-up.
  absl::flat_hash_map<std::string, std::vector<int>> by_identity;
  for (int i = 0; i < dst->msr_size(); ++i) by_identity[Identity(dst->msr(i))].push_back(i);
  for (int j = 0; j < src.msr_size(); ++j) {
    // Two classes may agree on a rule: keep one copy (a disagreement was
    // refused as a tie before).
    std::vector<int>& same = by_identity[Identity(src.msr(j))];
    bool have = false;
    for (int i : same) have = have || SameDecision(dst->msr(i), src.msr(j));
    if (have) continue;
    *dst->add_msr() = src.msr(j);
    same.push_back(dst->msr_size() - 1);
    append("msr", j, dst->msr_size() - 1);
  }
  for (int j = 0; j < src.cpuid_size(); ++j) {
    *dst->add_cpuid() = src.cpuid(j);
    append("cpuid", j, dst->cpuid_size() - 1);
  }
  for (int j = 0; j < src.io_port_size(); ++j) {
    *dst->add_io_port() = src.io_port(j);
    append("io_port", j, dst->io_port_size() - 1);
  }
  TakeSettings(src, src_map, src_path, dst, dst_map, dst_path);
}

// The path of `domain`'s overlay in `policy` ("domain[3]"), or "" if none.
std::string DomainPath(const Policy& policy, uint32_t domain) {
  for (int i = 0; i < policy.domain_size(); ++i) {
    if (policy.domain(i).domain() == domain) return absl::StrCat("domain[", i, "]");
  }
  return "";
}

// Two classes tie when they decide one rule, or set one layer-wide setting,
// differently. `a` and `b` are the same layer (default, or one domain's
// overlay) of two classes.
absl::Status CheckTie(const Level& a, const Layer& la, const std::string& pa, const Level& b,
                      const Layer& lb, const std::string& pb) {
  const auto tie = [&](const std::string& path_a, const std::string& path_b,
                       absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        b.loaded.source.Where(path_b), ": class ", b.layer.name, " (", b.key, ") and class ",
        a.layer.name, " (", a.loaded.source.WhereLine(path_a), ") both decide ", what,
        " differently, and this host has both classes, so neither wins; make the two "
        "agree, or move the decision to a layer above them (the host's layer)"));
  };
  absl::flat_hash_map<std::string, std::vector<int>> a_by_identity;
  for (int i = 0; i < la.msr_size(); ++i) a_by_identity[Identity(la.msr(i))].push_back(i);
  for (int j = 0; j < lb.msr_size(); ++j) {
    auto same = a_by_identity.find(Identity(lb.msr(j)));
    if (same == a_by_identity.end()) continue;
    for (int i : same->second) {
      if (SameDecision(la.msr(i), lb.msr(j))) continue;
      absl::StatusOr<policy::Target> t = policy::ResolveTarget(lb.msr(j));
      return tie(Path(pa, "msr", i), Path(pb, "msr", j),
                 absl::StrCat("the rule for ", t.ok() ? policy::DescribeTarget(*t) : "?",
                              " with the same conditions"));
    }
  }
  if (la.unknown_msr() != v1::UNKNOWN_MSR_UNSPECIFIED &&
      lb.unknown_msr() != v1::UNKNOWN_MSR_UNSPECIFIED && la.unknown_msr() != lb.unknown_msr()) {
    return tie(pa + ".unknown_msr", pb + ".unknown_msr", "unknown_msr");
  }
  if (la.has_vpmu() && lb.has_vpmu() && la.vpmu() != lb.vpmu()) {
    return tie(pa + ".vpmu", pb + ".vpmu", "vpmu");
  }
  if (la.has_mode() && lb.has_mode() && la.mode() != lb.mode()) {
    return tie(pa + ".mode", pb + ".mode", "the mode");
  }
  if (la.tsc().mode() != v1::TscPolicy::MODE_UNSPECIFIED &&
      lb.tsc().mode() != v1::TscPolicy::MODE_UNSPECIFIED &&
      !google::protobuf::util::MessageDifferencer::Equals(la.tsc(), lb.tsc())) {
    return tie(pa + ".tsc", pb + ".tsc", "the TSC mode");
  }
  if (la.guest_vendor() != v1::VENDOR_UNSPECIFIED && lb.guest_vendor() != v1::VENDOR_UNSPECIFIED &&
      la.guest_vendor() != lb.guest_vendor()) {
    return tie(pa + ".guest_vendor", pb + ".guest_vendor", "guest_vendor");
  }
  if (la.has_hardware_domain() && lb.has_hardware_domain() &&
      la.hardware_domain() != lb.hardware_domain()) {
    return tie(pa + ".hardware_domain", pb + ".hardware_domain", "hardware_domain");
  }
  return absl::OkStatus();
}

absl::Status CheckClassTies(const std::vector<const Level*>& classes) {
  for (size_t x = 0; x < classes.size(); ++x) {
    for (size_t y = x + 1; y < classes.size(); ++y) {
      const Level& a = *classes[x];
      const Level& b = *classes[y];
      RETURN_IF_ERROR(CheckTie(a, a.loaded.policy.default_(), "default", b,
                               b.loaded.policy.default_(), "default"));
      for (int j = 0; j < b.loaded.policy.domain_size(); ++j) {
        const Layer& lb = b.loaded.policy.domain(j);
        const std::string pa = DomainPath(a.loaded.policy, lb.domain());
        if (pa.empty()) continue;
        const Layer& la = a.loaded.policy.domain(std::stoi(pa.substr(7)));
        RETURN_IF_ERROR(CheckTie(a, la, pa, b, lb, absl::StrCat("domain[", j, "]")));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadedPolicy> ParseLevelValue(const std::string& key, const LevelName& layer,
                                             absl::string_view value) {
  ASSIGN_OR_RETURN(LoadedPolicy loaded, policy::ParsePolicy(value, key));
  if (layer.kind != LevelName::kHostDomain) return loaded;
  const Policy& p = loaded.policy;
  if (p.has_default_() || p.domain_size() != 1 || p.domain(0).domain() != layer.domain) {
    const std::string where =
        p.domain_size() > 0 ? loaded.source.Where("domain[0]")
        : p.has_default_()  ? loaded.source.Where("default")
                            : absl::StrCat(key, ":1:1");
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a domain overlay key holds exactly one `domain { domain: ", layer.domain,
        " ... }` layer and nothing else; put rules for every domain in the host's layer (",
        layer.name, ")"));
  }
  return loaded;
}

absl::StatusOr<LoadedPolicy> Compose(const LoadedPolicy& base, const FleetKeys& keys,
                                     const LevelSet& layers, v1::Vendor host_vendor) {
  // Each layer on its own first: its own errors point into its own text.
  std::vector<Level> levels;
  const auto add = [&](const std::string& key, const LevelName& layer) -> absl::Status {
    auto it = layers.find(key);
    if (it == layers.end()) return absl::OkStatus();
    ASSIGN_OR_RETURN(LoadedPolicy loaded, ParseLevelValue(key, layer, it->second));
    levels.push_back(Level{key, layer, std::move(loaded)});
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(add(keys.Default(), LevelName{}));
  std::vector<size_t> class_levels;
  for (const std::string& c : keys.classes()) {
    const size_t before = levels.size();
    RETURN_IF_ERROR(add(keys.Class(c), LevelName{LevelName::kClass, c, 0}));
    if (levels.size() > before) class_levels.push_back(before);
  }
  RETURN_IF_ERROR(add(keys.Host(keys.host_id()), LevelName{LevelName::kHost, keys.host_id(), 0}));
  for (const auto& [key, value] : layers) {
    std::optional<LevelName> layer = keys.Classify(key);
    if (layer.has_value() && layer->kind == LevelName::kHostDomain) {
      RETURN_IF_ERROR(add(key, *layer));
    }
  }
  {
    std::vector<const Level*> classes;
    for (size_t i : class_levels) classes.push_back(&levels[i]);
    RETURN_IF_ERROR(CheckClassTies(classes));
  }
  // The classes, peers, as one level in their place.
  if (class_levels.size() > 1) {
    Level combined{"", LevelName{LevelName::kClass, "*", 0},
                   LoadedPolicy{Policy(), SourceMap("classes")}};
    Policy& c = combined.loaded.policy;
    for (size_t i : class_levels) {
      const Level& level = levels[i];
      if (level.loaded.policy.has_default_()) {
        Concat(level.loaded.policy.default_(), level.loaded.source, "default", c.mutable_default_(),
               &combined.loaded.source, "default");
      }
      for (int j = 0; j < level.loaded.policy.domain_size(); ++j) {
        const Layer& l = level.loaded.policy.domain(j);
        std::string path = DomainPath(c, l.domain());
        if (path.empty()) {
          path = absl::StrCat("domain[", c.domain_size(), "]");
          c.add_domain()->set_domain(l.domain());
        }
        Concat(l, level.loaded.source, absl::StrCat("domain[", j, "]"),
               c.mutable_domain(std::stoi(path.substr(7))), &combined.loaded.source, path);
      }
    }
    std::vector<Level> merged;
    for (size_t i = 0; i < levels.size(); ++i) {
      if (i == class_levels.front()) merged.push_back(std::move(combined));
      if (std::find(class_levels.begin(), class_levels.end(), i) == class_levels.end()) {
        merged.push_back(std::move(levels[i]));
      }
    }
    levels = std::move(merged);
  }

  LoadedPolicy out{base.policy, SourceMap("fleet layers")};
  out.source.Graft("default", base.source, "default");
  for (int i = 0; i < base.policy.domain_size(); ++i) {
    const std::string path = absl::StrCat("domain[", i, "]");
    out.source.Graft(path, base.source, path);
  }
  for (const Level& level : levels) {
    const Policy& p = level.loaded.policy;
    if (p.has_default_()) {
      MergeIntoComposed(p.default_(), level.loaded.source, "default", out.policy.mutable_default_(),
                 &out.source, "default", host_vendor);
    }
    for (int j = 0; j < p.domain_size(); ++j) {
      std::string path = DomainPath(out.policy, p.domain(j).domain());
      if (path.empty()) {
        path = absl::StrCat("domain[", out.policy.domain_size(), "]");
        out.policy.add_domain()->set_domain(p.domain(j).domain());
        out.source.Graft(path, level.loaded.source, absl::StrCat("domain[", j, "]"));
      }
      Layer* dst = out.policy.mutable_domain(std::stoi(path.substr(7)));
      MergeIntoComposed(p.domain(j), level.loaded.source, absl::StrCat("domain[", j, "]"), dst,
                 &out.source, path, host_vendor);
    }
  }
  // Rules of different layers that tie by specificity are found here, with
  // each rule's own key and line.
  RETURN_IF_ERROR(policy::ValidatePolicy(out.policy, out.source));
  return out;
}

v1::FleetError ErrorOf(const absl::Status& status, const LevelSet& layers) {
  v1::FleetError error;
  error.set_message(std::string(status.message()));
  // The first line that starts with a key: that key, and the line after it.
  for (absl::string_view line : absl::StrSplit(status.message(), '\n')) {
    for (const auto& [key, value] : layers) {
      absl::string_view rest = line;
      if (!absl::ConsumePrefix(&rest, key) || !absl::ConsumePrefix(&rest, ":")) continue;
      error.set_key(key);
      uint32_t n = 0;
      if (absl::SimpleAtoi(rest.substr(0, rest.find(':')), &n)) error.set_line(n);
      // The message without the position the fields above now hold.
      if (status.message().find('\n') == absl::string_view::npos) {
        absl::string_view m = rest;
        if (n > 0) {
          m.remove_prefix(std::min(m.size(), m.find(':') + 1));  // "LINE:"
          size_t sp = m.find(": ");
          if (sp != absl::string_view::npos && sp <= 6) m.remove_prefix(sp + 2);  // "COL: "
        }
        error.set_message(std::string(absl::StripLeadingAsciiWhitespace(m)));
      }
      return error;
    }
  }
  // Else the first key named anywhere ("... ties with the rule for range
  // 0xc5-0xcc at /pvemu/policy/default:1": a fleet rule that ties with one
  // of the host's base policy, whose file the validator names first), so
  // that `fleet status` names the value to change. The message stays whole.
  size_t first = absl::string_view::npos;
  for (const auto& [key, value] : layers) {
    const std::string at = absl::StrCat(key, ":");
    for (size_t pos = status.message().find(at); pos != absl::string_view::npos;
         pos = status.message().find(at, pos + 1)) {
      // A whole key: not the tail of a longer one.
      if (pos > 0 && !absl::ascii_isspace(static_cast<unsigned char>(status.message()[pos - 1])))
        continue;
      if (pos >= first) break;
      first = pos;
      error.set_key(key);
      uint32_t n = 0;
      absl::string_view rest = status.message().substr(pos + at.size());
      error.set_line(absl::SimpleAtoi(rest.substr(0, rest.find_first_not_of("0123456789")), &n)
                         ? n
                         : 0);
      break;
    }
  }
  return error;
}

}  // namespace pvemu::fleet
