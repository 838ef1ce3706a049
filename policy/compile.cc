#include "policy/compile.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "policy/loader.h"
#include "policy/rules.h"
#include "base/status_macros.h"

namespace pvemu::policy {

using pvemu::v1::Layer;
using pvemu::v1::MsrRule;
using pvemu::v1::Policy;
using pvemu::v1::ReadAction;
using pvemu::v1::WriteAction;

namespace {

// PMU MSRs that #GP while a domain's vPMU is off (inclusive ranges).
constexpr std::pair<uint32_t, uint32_t> kPmuRanges[] = {
    {0xc1, 0xc8},                // IA32_PMC0-7
    {0x186, 0x18d},              // IA32_PERFEVTSEL0-7
    {0x1a6, 0x1a7},              // MSR_OFFCORE_RSP_0/1
    {0x309, 0x30c},              // IA32_FIXED_CTR0-3
    {0x345, 0x345},              // IA32_PERF_CAPABILITIES
    {0x38d, 0x392},              // fixed ctrl, global status/ctrl/ovf/set/inuse
    {0x3f1, 0x3f1},              // IA32_PEBS_ENABLE
    {0x3f6, 0x3f6},              // MSR_PEBS_LD_LAT_THRESHOLD
    {0x4c1, 0x4c8},              // IA32_A_PMC0-7
    {0x600, 0x600},              // IA32_DS_AREA
    {0xc0000300, 0xc0000302},    // AMD PERF_CNTR_GLOBAL_*
    {0xc0010000, 0xc0010007},    // MSR_K7_EVNTSEL0-3, MSR_K7_PERFCTR0-3
    {0xc0010200, 0xc001020b},    // MSR_F15H_PERF_CTL0-5 / PERF_CTR0-5
    {0xc0010240, 0xc0010247},    // MSR_F15H_NB_PERF_CTL0-3 / CTR0-3
};

// MsrEntry has padding, so key on the fields, not the bytes.
std::string EntryKey(const MsrEntry& entry) {
  return absl::StrCat(entry.read, ",", entry.write, ",", entry.value, ",", entry.has_value,
                      ",", entry.writable_mask, ",", entry.drop_reserved, ",",
                      entry.allow_host_write, ",", entry.audit, ",", entry.unknown, ",",
                      entry.read_origin, ",", entry.write_origin);
}

}  // namespace

bool IsPmuMsr(uint32_t msr) {
  for (const auto& [first, last] : kPmuRanges) {
    if (msr >= first && msr <= last) return true;
  }
  return false;
}

const CpuidDecision* DomainSnapshot::Cpuid(uint32_t leaf, uint32_t subleaf) const {
  // One load or one probe answers the common case, a leaf the policy does
  // not mention.
  uint8_t kinds = 0;
  if (const int low = LowCpuidLeaf(leaf); low >= 0) [[likely]] {
    kinds = cpuid_low_kinds_[low];
  } else if (auto it = cpuid_leaf_kinds_.find(leaf); it != cpuid_leaf_kinds_.end()) {
    kinds = it->second;
  }
  if (kinds == 0) return nullptr;
  if (kinds & kCpuidHasExact) {
    auto exact = cpuid_exact_.find(uint64_t{leaf} << 32 | subleaf);
    if (exact != cpuid_exact_.end()) return &exact->second;
  }
  if (kinds & kCpuidHasAny) {
    auto any = cpuid_any_.find(leaf);
    if (any != cpuid_any_.end()) return &any->second;
  }
  return nullptr;
}

void DomainSnapshot::MarkCpuidLeaf(uint32_t leaf, uint8_t kind) {
  if (const int low = LowCpuidLeaf(leaf); low >= 0) {
    cpuid_low_kinds_[low] |= kind;
  } else {
    cpuid_leaf_kinds_[leaf] |= kind;
  }
}

bool DomainSnapshot::EnforcedPortAllowed(uint32_t port, uint32_t width) const {
  if (width == 0) return true;
  uint64_t last = uint64_t{port} + width - 1;
  if (last > 0xffff) return false;
  // Merged ranges are disjoint and non-adjacent, so one must cover it all.
  auto it = std::upper_bound(ports_.begin(), ports_.end(), port,
                             [](uint32_t p, const std::pair<uint32_t, uint32_t>& r) {
                               return p < r.first;
                             });
  if (it == ports_.begin()) return false;
  --it;
  return it->first <= port && last <= it->second;
}

// Builds snapshots. One instance per CompilePolicy call.
class Compiler {
 public:
  Compiler(const Policy& policy, const SourceMap& source, pvemu::v1::Vendor host)
      : policy_(policy), source_(source), host_(host) {}

  absl::StatusOr<std::unique_ptr<DomainSnapshot>> Domain(uint32_t domid,
                                                         const Layer* overlay,
                                                         const std::string& overlay_path);
  // Every domain's snapshot, at no generation yet (UnstampedSnapshot).
  absl::StatusOr<std::shared_ptr<Snapshot>> AllUnstamped();

 private:
  // Where a rule comes from, in increasing precedence.
  enum class RuleLayer {
    kDefault,
    kDomain,
    kVpmuOff,  // synthetic: the PMU MSRs #GP while vPMU is off
  };
  // One matching rule with its specificity key; larger key = more specific.
  struct Candidate {
    const MsrRule* rule;
    Target target;
    RuleLayer layer;
    int conditions;
    uint32_t origin;
    auto Key() const {
      return std::make_tuple(layer, target.single ? 1 : 0, ~target.width(), conditions);
    }
  };
  struct MoreSpecific {
    bool operator()(const Candidate* a, const Candidate* b) const {
      if (a->Key() != b->Key()) return a->Key() > b->Key();
      return a < b;
    }
  };
  // The rules that decide each half; nullptr: nobody (fallback).
  struct Decision {
    const Candidate* read = nullptr;
    const Candidate* write = nullptr;
    bool operator==(const Decision& other) const {
      return read == other.read && write == other.write;
    }
  };
  // MSRs [first, last] that one decision covers.
  struct Segment {
    uint32_t first, last;
    Decision decision;
  };
  // The range rules swept into segments: all layers together, and each alone.
  struct RangeSegments {
    std::vector<Segment> all;
    std::vector<Segment> domain;
    std::vector<Segment> default_layer;
    std::vector<Segment> vpmu_off;
  };

  // The phases of Domain, in order.
  void SetContext(uint32_t domid, const Layer* overlay, const std::string& overlay_path,
                  DomainSnapshot* snapshot) const;
  void CompileUnknownMsr(const Layer* overlay, const std::string& overlay_path,
                         DomainSnapshot* snapshot) const;
  void CompileVpmuAndTsc(const Layer* overlay, const std::string& overlay_path,
                         DomainSnapshot* snapshot) const;
  void CompileMode(const Layer* overlay, const std::string& overlay_path,
                   DomainSnapshot* snapshot) const;
  void CompilePorts(const Layer* overlay, const std::string& overlay_path,
                    DomainSnapshot* snapshot) const;
  void CompileCpuid(const Layer* overlay, const std::string& overlay_path,
                    DomainSnapshot* snapshot) const;
  absl::Status CompileMsrRules(const Layer* overlay, const std::string& overlay_path,
                               DomainSnapshot* snapshot);

  CpuidDecision CompileCpuidEntry(const pvemu::v1::CpuidEntry& entry,
                                  const std::string& path) const;
  // The matching rules of every layer, the vPMU-off ones included.
  absl::Status CollectCandidates(const Layer* overlay, const std::string& overlay_path,
                                 DomainSnapshot* snapshot, std::vector<Candidate>* out);
  absl::Status Collect(const Layer& layer, const std::string& path, RuleLayer rule_layer,
                       DomainSnapshot* snapshot, std::vector<Candidate>* out);
  static std::vector<Segment> Sweep(const std::vector<const Candidate*>& ranges);
  static Decision DecisionAt(const std::vector<Segment>& segments, uint32_t msr);
  // The decision for a single MSR named by `rules` (sorted here, most
  // specific first), against the ranges of each layer.
  static Decision DecideSingle(uint32_t msr, std::vector<const Candidate*>& rules,
                               const RangeSegments& ranges);
  MsrEntry Materialize(const Decision& decision, const DomainSnapshot& snapshot) const;
  // The index of `entry` in snapshot->entries_, adding it if new.
  uint32_t Intern(const MsrEntry& entry, DomainSnapshot* snapshot);

  absl::flat_hash_map<std::string, uint32_t> interned_;

  const Policy& policy_;
  const SourceMap& source_;
  pvemu::v1::Vendor host_;
  MsrRule pmu_gp_rule_;
};

absl::Status Compiler::Collect(const Layer& layer, const std::string& path,
                               RuleLayer rule_layer, DomainSnapshot* snapshot,
                               std::vector<Candidate>* out) {
  const DomainContext& context = snapshot->context_;
  for (int i = 0; i < layer.msr_size(); ++i) {
    const MsrRule& rule = layer.msr(i);
    if (!ConditionsMatch(rule, host_, context.guest_vendor, context.hardware_domain)) {
      continue;
    }
    ASSIGN_OR_RETURN(Target target, ResolveTarget(rule));
    std::string rule_path = absl::StrCat(path, ".msr[", i, "]");
    snapshot->origins_.push_back(
        RuleOrigin{rule_layer == RuleLayer::kDomain ? "domain" : "default",
                   source_.WhereLine(rule_path), rule.comment()});
    out->push_back(Candidate{&rule, target, rule_layer, ConditionCount(rule),
                             static_cast<uint32_t>(snapshot->origins_.size() - 1)});
  }
  return absl::OkStatus();
}

std::vector<Compiler::Segment> Compiler::Sweep(const std::vector<const Candidate*>& ranges) {
  // Events at `first` (add) and `last + 1` (remove); 64-bit to hold 2^32.
  std::vector<std::pair<uint64_t, const Candidate*>> adds, removes;
  for (const Candidate* candidate : ranges) {
    adds.push_back({candidate->target.first, candidate});
    removes.push_back({uint64_t{candidate->target.last} + 1, candidate});
  }
  std::sort(adds.begin(), adds.end());
  std::sort(removes.begin(), removes.end());
  std::set<const Candidate*, MoreSpecific> readers, writers;
  std::vector<Segment> segments;
  size_t next_add = 0, next_remove = 0;
  uint64_t position = 0;
  while (next_add < adds.size() || next_remove < removes.size()) {
    uint64_t next = next_add < adds.size() ? adds[next_add].first : ~uint64_t{0};
    if (next_remove < removes.size()) next = std::min(next, removes[next_remove].first);
    if (next > position && (!readers.empty() || !writers.empty())) {
      Decision decision{readers.empty() ? nullptr : *readers.begin(),
                        writers.empty() ? nullptr : *writers.begin()};
      uint32_t first = static_cast<uint32_t>(position);
      uint32_t last = static_cast<uint32_t>(next - 1);
      if (!segments.empty() && segments.back().decision == decision &&
          uint64_t{segments.back().last} + 1 == position) {
        segments.back().last = last;
      } else {
        segments.push_back(Segment{first, last, decision});
      }
    }
    position = next;
    while (next_remove < removes.size() && removes[next_remove].first == position) {
      readers.erase(removes[next_remove].second);
      writers.erase(removes[next_remove].second);
      ++next_remove;
    }
    while (next_add < adds.size() && adds[next_add].first == position) {
      const Candidate* candidate = adds[next_add].second;
      if (candidate->rule->read() != ReadAction::ACTION_UNSPECIFIED) readers.insert(candidate);
      if (candidate->rule->write() != WriteAction::ACTION_UNSPECIFIED) writers.insert(candidate);
      ++next_add;
    }
  }
  return segments;
}

Compiler::Decision Compiler::DecisionAt(const std::vector<Segment>& segments, uint32_t msr) {
  auto it = std::lower_bound(segments.begin(), segments.end(), msr,
                             [](const Segment& s, uint32_t m) { return s.last < m; });
  if (it != segments.end() && it->first <= msr) return it->decision;
  return Decision{};
}

MsrEntry Compiler::Materialize(const Decision& decision, const DomainSnapshot& snapshot) const {
  MsrEntry entry = snapshot.entries_[0];
  if (decision.read == nullptr && decision.write == nullptr) return entry;
  entry.unknown = false;
  entry.audit = false;
  if (decision.read != nullptr) {
    const MsrRule& reader = *decision.read->rule;
    // Validation refuses unknown action numbers; should one get here anyway,
    // it compiles to the safe answer, never to whatever its low byte means.
    entry.read = ReadAction::Action_IsValid(reader.read()) ? reader.read() : ReadAction::GP;
    entry.value = reader.value();
    entry.has_value = reader.has_value();
    entry.read_origin = decision.read->origin;
    entry.audit |= reader.audit();
    if (entry.read == ReadAction::ZERO) {
      entry.value = 0;
      entry.has_value = true;
    }
  }
  if (decision.write != nullptr) {
    const MsrRule& writer = *decision.write->rule;
    entry.write = WriteAction::Action_IsValid(writer.write()) ? writer.write() : WriteAction::GP;
    entry.writable_mask = writer.has_writable_mask() ? writer.writable_mask() : ~uint64_t{0};
    entry.drop_reserved = writer.on_reserved_bits() == pvemu::v1::RESERVED_DROP;
    entry.allow_host_write = writer.allow_host_write();
    entry.write_origin = decision.write->origin;
    entry.audit |= writer.audit();
    // A write-only SHADOW rule may carry the register's initial value.
    if (!entry.has_value && writer.has_value() && entry.read == ReadAction::SHADOW) {
      entry.value = writer.value();
      entry.has_value = true;
    }
  } else {
    entry.writable_mask = ~uint64_t{0};
  }
  return entry;
}

// Who the snapshot is for: the domain, whether it is the hardware domain,
// and the vendor its guest sees.
void Compiler::SetContext(uint32_t domid, const Layer* overlay, const std::string& overlay_path,
                          DomainSnapshot* snapshot) const {
  const Layer& default_layer = policy_.default_();
  DomainContext& context = snapshot->context_;
  context.domain = domid;
  context.hardware_domain = overlay != nullptr && overlay->has_hardware_domain()
                                ? overlay->hardware_domain()
                                : domid == 0;
  if (overlay != nullptr && overlay->guest_vendor() != pvemu::v1::VENDOR_UNSPECIFIED) {
    context.guest_vendor = overlay->guest_vendor();
    snapshot->setting_origins_.guest_vendor = source_.WhereLine(overlay_path + ".guest_vendor");
  } else if (default_layer.guest_vendor() != pvemu::v1::VENDOR_UNSPECIFIED) {
    context.guest_vendor = default_layer.guest_vendor();
    snapshot->setting_origins_.guest_vendor = source_.WhereLine("default.guest_vendor");
  } else {
    context.guest_vendor = host_;
  }
  snapshot->has_overlay_ = overlay != nullptr;
}

// The unknown_msr mode, its origin (origins_[0]) and the fallback entry
// (entries_[0]) it decides.
void Compiler::CompileUnknownMsr(const Layer* overlay, const std::string& overlay_path,
                                 DomainSnapshot* snapshot) const {
  const Layer& default_layer = policy_.default_();
  pvemu::v1::UnknownMsr mode = default_layer.unknown_msr();
  if (overlay != nullptr && overlay->unknown_msr() != pvemu::v1::UNKNOWN_MSR_UNSPECIFIED) {
    mode = overlay->unknown_msr();
  }
  if (mode == pvemu::v1::UNKNOWN_MSR_UNSPECIFIED) mode = pvemu::v1::UNKNOWN_GP;
  snapshot->unknown_msr_ = mode;
  std::string mode_path = overlay != nullptr && overlay->unknown_msr() != 0
                              ? overlay_path + ".unknown_msr"
                              : "default.unknown_msr";
  snapshot->origins_.push_back(RuleOrigin{
      "unknown-msr",
      default_layer.unknown_msr() == 0 && mode_path == "default.unknown_msr"
          ? "built-in: unknown_msr unset means GP"
          : source_.WhereLine(mode_path),
      absl::StrCat("unknown_msr: ", pvemu::v1::UnknownMsr_Name(mode))});
  MsrEntry& fallback = snapshot->entries_.emplace_back();
  fallback.unknown = true;
  switch (mode) {
    case pvemu::v1::UNKNOWN_RELAXED:
      fallback.read = ReadAction::ZERO;
      fallback.has_value = true;
      fallback.write = WriteAction::IGNORE;
      break;
    case pvemu::v1::UNKNOWN_HOST:
      fallback.read = ReadAction::PASSTHROUGH;
      fallback.write = WriteAction::GP;
      break;
    default:
      fallback.read = ReadAction::GP;
      fallback.write = WriteAction::GP;
  }
}

// vPMU and TSC: the domain's field if set, else the default's.
void Compiler::CompileVpmuAndTsc(const Layer* overlay, const std::string& overlay_path,
                                 DomainSnapshot* snapshot) const {
  const Layer& default_layer = policy_.default_();
  SettingOrigins& origins = snapshot->setting_origins_;
  if (overlay != nullptr && overlay->has_vpmu()) {
    snapshot->vpmu_ = overlay->vpmu();
    origins.vpmu = source_.WhereLine(overlay_path + ".vpmu");
  } else if (default_layer.has_vpmu()) {
    snapshot->vpmu_ = default_layer.vpmu();
    origins.vpmu = source_.WhereLine("default.vpmu");
  } else {
    snapshot->vpmu_ = false;
  }
  TscConfig& tsc = snapshot->tsc_;
  if (default_layer.has_tsc()) origins.tsc = source_.WhereLine("default.tsc");
  if (default_layer.tsc().mode() != 0) tsc.mode = default_layer.tsc().mode();
  tsc.offset = default_layer.tsc().offset();
  tsc.frequency_khz = default_layer.tsc().frequency_khz();
  if (overlay != nullptr) {
    if (overlay->has_tsc()) origins.tsc = source_.WhereLine(overlay_path + ".tsc");
    if (overlay->tsc().mode() != 0) tsc.mode = overlay->tsc().mode();
    if (overlay->tsc().offset() != 0) tsc.offset = overlay->tsc().offset();
    if (overlay->tsc().frequency_khz() != 0) tsc.frequency_khz = overlay->tsc().frequency_khz();
  }
}

// The mode: the domain's if set, else the default's, else ENFORCE. A LEARN
// domain gets the relaxed table its traps read (Lookup); the enforced one
// stays for tools. In ENFORCE Lookup reads entries_ itself: the trap path is
// the same code on the same data whatever this feature does.
void Compiler::CompileMode(const Layer* overlay, const std::string& overlay_path,
                           DomainSnapshot* snapshot) const {
  const Layer& default_layer = policy_.default_();
  pvemu::v1::PolicyMode mode = pvemu::v1::ENFORCE;
  if (overlay != nullptr && overlay->has_mode()) {
    mode = overlay->mode();
    snapshot->setting_origins_.mode = source_.WhereLine(overlay_path + ".mode");
  } else if (default_layer.has_mode()) {
    mode = default_layer.mode();
    snapshot->setting_origins_.mode = source_.WhereLine("default.mode");
  }
  snapshot->learning_ = mode == pvemu::v1::LEARN;
  snapshot->effective_ = snapshot->entries_.data();
  if (!snapshot->learning_) return;
  snapshot->relaxed_entries_ = snapshot->entries_;
  for (MsrEntry& e : snapshot->relaxed_entries_) {
    // As UNKNOWN_RELAXED answers: a read gives 0, a write completes and is
    // dropped (Xen's msr_relaxed).
    if (e.read == ReadAction::GP) {
      e.read = ReadAction::ZERO;
      e.relaxed |= MsrEntry::kRelaxedRead;
    }
    if (e.write == WriteAction::GP) {
      e.write = WriteAction::IGNORE;
      e.relaxed |= MsrEntry::kRelaxedWrite;
    }
    if (e.writable_mask != ~uint64_t{0} && !e.drop_reserved) {
      e.drop_reserved = true;
      e.relaxed |= MsrEntry::kRelaxedReserved;
    }
  }
  snapshot->effective_ = snapshot->relaxed_entries_.data();
}

// Ports: the union of both layers, merged; and each range as written, with
// where it was written.
void Compiler::CompilePorts(const Layer* overlay, const std::string& overlay_path,
                            DomainSnapshot* snapshot) const {
  std::vector<std::pair<uint32_t, uint32_t>> ports;
  auto add = [&](const Layer& layer, const std::string& path) {
    for (int i = 0; i < layer.io_port_size(); ++i) {
      const auto& range = layer.io_port(i);
      ports.push_back({range.first(), range.last()});
      snapshot->port_grants_.push_back(PortGrant{
          range.first(), range.last(), source_.WhereLine(absl::StrCat(path, ".io_port[", i, "]"))});
    }
  };
  add(policy_.default_(), "default");
  if (overlay != nullptr) add(*overlay, overlay_path);
  std::sort(ports.begin(), ports.end());
  std::vector<std::pair<uint32_t, uint32_t>>& merged = snapshot->ports_;
  for (const auto& range : ports) {
    if (!merged.empty() && range.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, range.second);
    } else {
      merged.push_back(range);
    }
  }
}

CpuidDecision Compiler::CompileCpuidEntry(const pvemu::v1::CpuidEntry& entry,
                                          const std::string& path) const {
  CpuidDecision decision;
  decision.source = entry.source() == pvemu::v1::CpuidEntry::CONST
                        ? pvemu::v1::CpuidEntry::CONST
                        : pvemu::v1::CpuidEntry::HOST;
  const auto& set = entry.set();
  const auto& clear = entry.clear();
  decision.set[0] = set.eax();
  decision.set[1] = set.ebx();
  decision.set[2] = set.ecx();
  decision.set[3] = set.edx();
  decision.clear[0] = clear.eax();
  decision.clear[1] = clear.ebx();
  decision.clear[2] = clear.ecx();
  decision.clear[3] = clear.edx();
  decision.origin = source_.WhereLine(path);
  return decision;
}

// CPUID: domain exact, domain any, default exact, default any.
void Compiler::CompileCpuid(const Layer* overlay, const std::string& overlay_path,
                            DomainSnapshot* snapshot) const {
  absl::flat_hash_set<uint32_t> domain_any_leaves;
  if (overlay != nullptr) {
    for (int i = 0; i < overlay->cpuid_size(); ++i) {
      const auto& entry = overlay->cpuid(i);
      std::string path = absl::StrCat(overlay_path, ".cpuid[", i, "]");
      if (entry.has_subleaf()) {
        snapshot->cpuid_exact_[uint64_t{entry.leaf()} << 32 | entry.subleaf()] =
            CompileCpuidEntry(entry, path);
      } else {
        snapshot->cpuid_any_[entry.leaf()] = CompileCpuidEntry(entry, path);
        domain_any_leaves.insert(entry.leaf());
      }
    }
  }
  const Layer& default_layer = policy_.default_();
  for (int i = 0; i < default_layer.cpuid_size(); ++i) {
    const auto& entry = default_layer.cpuid(i);
    std::string path = absl::StrCat("default.cpuid[", i, "]");
    if (entry.has_subleaf()) {
      if (domain_any_leaves.contains(entry.leaf())) continue;
      snapshot->cpuid_exact_.emplace(uint64_t{entry.leaf()} << 32 | entry.subleaf(),
                                     CompileCpuidEntry(entry, path));
    } else {
      snapshot->cpuid_any_.emplace(entry.leaf(), CompileCpuidEntry(entry, path));
    }
  }
  for (const auto& [key, decision] : snapshot->cpuid_exact_) {
    snapshot->MarkCpuidLeaf(static_cast<uint32_t>(key >> 32), DomainSnapshot::kCpuidHasExact);
  }
  for (const auto& [leaf, decision] : snapshot->cpuid_any_) {
    snapshot->MarkCpuidLeaf(leaf, DomainSnapshot::kCpuidHasAny);
  }
}

absl::Status Compiler::CollectCandidates(const Layer* overlay, const std::string& overlay_path,
                                         DomainSnapshot* snapshot,
                                         std::vector<Candidate>* out) {
  RETURN_IF_ERROR(Collect(policy_.default_(), "default", RuleLayer::kDefault, snapshot, out));
  if (overlay != nullptr) {
    RETURN_IF_ERROR(Collect(*overlay, overlay_path, RuleLayer::kDomain, snapshot, out));
  }
  if (!snapshot->vpmu_) {
    pmu_gp_rule_.set_read(ReadAction::GP);
    pmu_gp_rule_.set_write(WriteAction::GP);
    snapshot->origins_.push_back(RuleOrigin{"vpmu-off", "built-in: vpmu off",
                                            "PMU MSRs #GP while the domain's vPMU is off"});
    for (const auto& [first, last] : kPmuRanges) {
      out->push_back(Candidate{&pmu_gp_rule_, Target{first, last, false}, RuleLayer::kVpmuOff,
                               0, static_cast<uint32_t>(snapshot->origins_.size() - 1)});
    }
  }
  return absl::OkStatus();
}

Compiler::Decision Compiler::DecideSingle(uint32_t msr,
                                          std::vector<const Candidate*>& rules,
                                          const RangeSegments& ranges) {
  std::sort(rules.begin(), rules.end(), MoreSpecific());
  // Order: vpmu-off, domain singles, domain ranges, default singles,
  // default ranges; the first that decides a half wins it.
  std::vector<Decision> chain;
  chain.push_back(DecisionAt(ranges.vpmu_off, msr));
  for (const Candidate* candidate : rules) {
    if (candidate->layer == RuleLayer::kDomain) chain.push_back(Decision{candidate, candidate});
  }
  chain.push_back(DecisionAt(ranges.domain, msr));
  for (const Candidate* candidate : rules) {
    if (candidate->layer == RuleLayer::kDefault) chain.push_back(Decision{candidate, candidate});
  }
  chain.push_back(DecisionAt(ranges.default_layer, msr));
  Decision decision;
  for (const Decision& step : chain) {
    if (decision.read == nullptr && step.read != nullptr &&
        step.read->rule->read() != ReadAction::ACTION_UNSPECIFIED) {
      decision.read = step.read;
    }
    if (decision.write == nullptr && step.write != nullptr &&
        step.write->rule->write() != WriteAction::ACTION_UNSPECIFIED) {
      decision.write = step.write;
    }
  }
  return decision;
}

// MSR rules: ranges swept into an interval table, single MSRs decided one by
// one against the ranges of each layer.
absl::Status Compiler::CompileMsrRules(const Layer* overlay, const std::string& overlay_path,
                                       DomainSnapshot* snapshot) {
  std::vector<Candidate> candidates;
  RETURN_IF_ERROR(CollectCandidates(overlay, overlay_path, snapshot, &candidates));
  std::vector<const Candidate*> all_ranges, domain_ranges, default_ranges, vpmu_off_ranges;
  absl::flat_hash_map<uint32_t, std::vector<const Candidate*>> singles;
  for (const Candidate& candidate : candidates) {
    if (candidate.target.single) {
      singles[candidate.target.first].push_back(&candidate);
      continue;
    }
    all_ranges.push_back(&candidate);
    switch (candidate.layer) {
      case RuleLayer::kDefault: default_ranges.push_back(&candidate); break;
      case RuleLayer::kDomain: domain_ranges.push_back(&candidate); break;
      case RuleLayer::kVpmuOff: vpmu_off_ranges.push_back(&candidate); break;
    }
  }
  const RangeSegments ranges{Sweep(all_ranges), Sweep(domain_ranges),
                             Sweep(default_ranges), Sweep(vpmu_off_ranges)};

  interned_.clear();
  interned_.emplace(EntryKey(snapshot->entries_[0]), 0);
  std::vector<MsrIndex::Interval> intervals;
  intervals.reserve(ranges.all.size());
  for (const Segment& segment : ranges.all) {
    intervals.push_back({segment.first, segment.last,
                         Intern(Materialize(segment.decision, *snapshot), snapshot)});
  }
  std::vector<std::pair<uint32_t, uint32_t>> single_entries;
  single_entries.reserve(singles.size());
  for (auto& [msr, rules] : singles) {
    const Decision decision = DecideSingle(msr, rules, ranges);
    single_entries.emplace_back(msr, Intern(Materialize(decision, *snapshot), snapshot));
  }
  snapshot->index_ = MsrIndex::Build(single_entries, std::move(intervals), 0);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DomainSnapshot>> Compiler::Domain(
    uint32_t domid, const Layer* overlay, const std::string& overlay_path) {
  auto snapshot = std::unique_ptr<DomainSnapshot>(new DomainSnapshot);
  SetContext(domid, overlay, overlay_path, snapshot.get());
  CompileUnknownMsr(overlay, overlay_path, snapshot.get());
  CompileVpmuAndTsc(overlay, overlay_path, snapshot.get());
  CompilePorts(overlay, overlay_path, snapshot.get());
  CompileCpuid(overlay, overlay_path, snapshot.get());
  RETURN_IF_ERROR(CompileMsrRules(overlay, overlay_path, snapshot.get()));
  CompileMode(overlay, overlay_path, snapshot.get());
  return snapshot;
}

uint32_t Compiler::Intern(const MsrEntry& entry, DomainSnapshot* snapshot) {
  auto [it, inserted] =
      interned_.emplace(EntryKey(entry), static_cast<uint32_t>(snapshot->entries_.size()));
  if (inserted) snapshot->entries_.push_back(entry);
  return it->second;
}

std::vector<DomainSnapshot::Interval> DomainSnapshot::ranges() const {
  std::vector<Interval> out;
  for (const MsrIndex::Interval& r : index_.intervals()) {
    out.push_back(Interval{r.first, r.last, entries_[r.decision]});
  }
  return out;
}

std::vector<DomainSnapshot::CpuidRule> DomainSnapshot::CpuidRules() const {
  std::vector<CpuidRule> out;
  for (const auto& [leaf, decision] : cpuid_any_) out.push_back({leaf, true, 0, &decision});
  for (const auto& [key, decision] : cpuid_exact_) {
    out.push_back({static_cast<uint32_t>(key >> 32), false, static_cast<uint32_t>(key), &decision});
  }
  std::sort(out.begin(), out.end(), [](const CpuidRule& a, const CpuidRule& b) {
    return std::make_tuple(a.leaf, !a.any_subleaf, a.subleaf) <
           std::make_tuple(b.leaf, !b.any_subleaf, b.subleaf);
  });
  return out;
}

std::vector<DomainSnapshot::NamedSpan> DomainSnapshot::NamedMsrs() const {
  std::vector<NamedSpan> out;
  for (const auto& [msr, decision] : index_.Singles()) {
    if (!entries_[decision].unknown) out.push_back({msr, msr, &entries_[decision]});
  }
  for (const MsrIndex::Interval& r : index_.intervals()) {
    if (!entries_[r.decision].unknown) out.push_back({r.first, r.last, &entries_[r.decision]});
  }
  std::sort(out.begin(), out.end(),
            [](const NamedSpan& a, const NamedSpan& b) { return a.first < b.first; });
  return out;
}

absl::StatusOr<std::shared_ptr<Snapshot>> Compiler::AllUnstamped() {
  auto snap = std::shared_ptr<Snapshot>(new Snapshot);
  snap->host_vendor_ = host_;
  snap->policy_ = policy_;
  for (int i = 0; i < policy_.domain_size(); ++i) {
    const Layer& layer = policy_.domain(i);
    ASSIGN_OR_RETURN(std::unique_ptr<DomainSnapshot> d,
                     Domain(layer.domain(), &layer, absl::StrCat("domain[", i, "]")));
    snap->overlays_.emplace(layer.domain(), std::move(d));
  }
  ASSIGN_OR_RETURN(snap->dom0_, Domain(0, nullptr, ""));
  ASSIGN_OR_RETURN(snap->other_, Domain(1, nullptr, ""));
  // The generic snapshot answers for every domain without an overlay.
  snap->other_->context_.domain = 0xffffffffu;
  return snap;
}

absl::StatusOr<std::shared_ptr<const Snapshot>> CompilePolicy(const Policy& policy,
                                                              const SourceMap& source,
                                                              pvemu::v1::Vendor host_vendor,
                                                              uint64_t generation) {
  ASSIGN_OR_RETURN(UnstampedSnapshot compiled,
                   UnstampedSnapshot::Compile(policy, source, host_vendor));
  return std::move(compiled).Stamp(generation);
}

absl::StatusOr<std::unique_ptr<const DomainSnapshot>> CompileDomain(
    const Policy& policy, const SourceMap& source, pvemu::v1::Vendor host_vendor,
    uint32_t domid) {
  RETURN_IF_ERROR(ValidatePolicy(policy, source));
  Compiler c(policy, source, host_vendor);
  for (int i = 0; i < policy.domain_size(); ++i) {
    if (policy.domain(i).domain() == domid) {
      ASSIGN_OR_RETURN(std::unique_ptr<DomainSnapshot> d,
                       c.Domain(domid, &policy.domain(i), absl::StrCat("domain[", i, "]")));
      return std::unique_ptr<const DomainSnapshot>(std::move(d));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<DomainSnapshot> d, c.Domain(domid, nullptr, ""));
  return std::unique_ptr<const DomainSnapshot>(std::move(d));
}

absl::StatusOr<UnstampedSnapshot> UnstampedSnapshot::Compile(const Policy& policy,
                                                             const SourceMap& source,
                                                             pvemu::v1::Vendor host_vendor) {
  RETURN_IF_ERROR(ValidatePolicy(policy, source));
  Compiler c(policy, source, host_vendor);
  ASSIGN_OR_RETURN(std::shared_ptr<Snapshot> snap, c.AllUnstamped());
  return UnstampedSnapshot(std::move(snap));
}

std::shared_ptr<const Snapshot> UnstampedSnapshot::Stamp(uint64_t generation) && {
  snap_->generation_ = generation;
  return std::shared_ptr<const Snapshot>(std::move(snap_));
}

}  // namespace pvemu::policy
