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
std::string EntryKey(const MsrEntry& e) {
  return absl::StrCat(e.read, ",", e.write, ",", e.value, ",", e.has_value, ",",
                                 e.writable_mask, ",", e.drop_reserved, ",",
                                 e.allow_host_write, ",", e.audit, ",", e.unknown, ",",
                                 e.read_origin, ",", e.write_origin);
}

}  // namespace

bool IsPmuMsr(uint32_t msr) {
  for (const auto& [first, last] : kPmuRanges) {
    if (msr >= first && msr <= last) return true;
  }
  return false;
}

const CpuidDecision* DomainSnapshot::Cpuid(uint32_t leaf, uint32_t subleaf) const {
  // One probe answers the common case, a leaf the policy does not mention.
  auto kinds = cpuid_leaf_kinds_.find(leaf);
  if (kinds == cpuid_leaf_kinds_.end()) return nullptr;
  if (kinds->second & kCpuidHasExact) {
    auto exact = cpuid_exact_.find(uint64_t{leaf} << 32 | subleaf);
    if (exact != cpuid_exact_.end()) return &exact->second;
  }
  if (kinds->second & kCpuidHasAny) {
    auto any = cpuid_any_.find(leaf);
    if (any != cpuid_any_.end()) return &any->second;
  }
  return nullptr;
}

bool DomainSnapshot::PortAllowed(uint32_t port, uint32_t width) const {
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
  absl::StatusOr<std::shared_ptr<const Snapshot>> All(uint64_t generation);

 private:
  // One matching rule with its specificity key; larger key = more specific.
  struct Cand {
    const MsrRule* rule;
    Target target;
    int layer;  // 0 default, 1 domain, 2 vpmu-off (synthetic)
    int conditions;
    uint32_t origin;
    auto Key() const {
      return std::make_tuple(layer, target.single ? 1 : 0, ~target.width(), conditions);
    }
  };
  struct MoreSpecific {
    bool operator()(const Cand* a, const Cand* b) const {
      if (a->Key() != b->Key()) return a->Key() > b->Key();
      return a < b;
    }
  };
  // The rules that decide each half; nullptr: nobody (fallback).
  struct Decision {
    const Cand* read = nullptr;
    const Cand* write = nullptr;
    bool operator==(const Decision& o) const { return read == o.read && write == o.write; }
  };
  struct Seg {
    uint32_t first, last;
    Decision d;
  };

  absl::Status Collect(const Layer& layer, const std::string& path, int layer_rank,
                       const DomainContext& ctx, DomainSnapshot* snap,
                       std::vector<Cand>* out);
  static std::vector<Seg> Sweep(const std::vector<const Cand*>& ranges);
  static Decision At(const std::vector<Seg>& segs, uint32_t msr);
  MsrEntry Materialize(const Decision& d, const DomainSnapshot& snap) const;
  // The index of `e` in snap->entries_, adding it if new.
  uint32_t Intern(const MsrEntry& e, DomainSnapshot* snap);

  absl::flat_hash_map<std::string, uint32_t> interned_;

  const Policy& policy_;
  const SourceMap& source_;
  pvemu::v1::Vendor host_;
  MsrRule pmu_gp_rule_;
};

absl::Status Compiler::Collect(const Layer& layer, const std::string& path, int layer_rank,
                               const DomainContext& ctx, DomainSnapshot* snap,
                               std::vector<Cand>* out) {
  for (int i = 0; i < layer.msr_size(); ++i) {
    const MsrRule& rule = layer.msr(i);
    if (!ConditionsMatch(rule, host_, ctx.guest_vendor, ctx.hardware_domain)) continue;
    ASSIGN_OR_RETURN(Target t, ResolveTarget(rule));
    std::string rpath = absl::StrCat(path, ".msr[", i, "]");
    snap->origins_.push_back(RuleOrigin{layer_rank == 1 ? "domain" : "default",
                                        source_.WhereLine(rpath), rule.comment()});
    out->push_back(Cand{&rule, t, layer_rank, ConditionCount(rule),
                        static_cast<uint32_t>(snap->origins_.size() - 1)});
  }
  return absl::OkStatus();
}

std::vector<Compiler::Seg> Compiler::Sweep(const std::vector<const Cand*>& ranges) {
  // Events at `first` (add) and `last + 1` (remove); 64-bit to hold 2^32.
  std::vector<std::pair<uint64_t, const Cand*>> adds, removes;
  for (const Cand* c : ranges) {
    adds.push_back({c->target.first, c});
    removes.push_back({uint64_t{c->target.last} + 1, c});
  }
  std::sort(adds.begin(), adds.end());
  std::sort(removes.begin(), removes.end());
  std::set<const Cand*, MoreSpecific> readers, writers;
  std::vector<Seg> segs;
  size_t ai = 0, ri = 0;
  uint64_t pos = 0;
  while (ai < adds.size() || ri < removes.size()) {
    uint64_t next = ai < adds.size() ? adds[ai].first : ~uint64_t{0};
    if (ri < removes.size()) next = std::min(next, removes[ri].first);
    if (next > pos && (!readers.empty() || !writers.empty())) {
      Decision d{readers.empty() ? nullptr : *readers.begin(),
                 writers.empty() ? nullptr : *writers.begin()};
      uint32_t first = static_cast<uint32_t>(pos);
      uint32_t last = static_cast<uint32_t>(next - 1);
      if (!segs.empty() && segs.back().d == d && uint64_t{segs.back().last} + 1 == pos) {
        segs.back().last = last;
      } else {
        segs.push_back(Seg{first, last, d});
      }
    }
    pos = next;
    while (ri < removes.size() && removes[ri].first == pos) {
      readers.erase(removes[ri].second);
      writers.erase(removes[ri].second);
      ++ri;
    }
    while (ai < adds.size() && adds[ai].first == pos) {
      const Cand* c = adds[ai].second;
      if (c->rule->read() != ReadAction::ACTION_UNSPECIFIED) readers.insert(c);
      if (c->rule->write() != WriteAction::ACTION_UNSPECIFIED) writers.insert(c);
      ++ai;
    }
  }
  return segs;
}

Compiler::Decision Compiler::At(const std::vector<Seg>& segs, uint32_t msr) {
  auto it = std::lower_bound(segs.begin(), segs.end(), msr,
                             [](const Seg& s, uint32_t m) { return s.last < m; });
  if (it != segs.end() && it->first <= msr) return it->d;
  return Decision{};
}

MsrEntry Compiler::Materialize(const Decision& d, const DomainSnapshot& snap) const {
  MsrEntry e = snap.entries_[0];
  if (d.read == nullptr && d.write == nullptr) return e;
  e.unknown = false;
  e.audit = false;
  if (d.read != nullptr) {
    const MsrRule& r = *d.read->rule;
    // Validation refuses unknown action numbers; should one get here anyway,
    // it compiles to the safe answer, never to whatever its low byte means.
    e.read = ReadAction::Action_IsValid(r.read()) ? r.read() : ReadAction::GP;
    e.value = r.value();
    e.has_value = r.has_value();
    e.read_origin = d.read->origin;
    e.audit |= r.audit();
    if (e.read == ReadAction::ZERO) {
      e.value = 0;
      e.has_value = true;
    }
  }
  if (d.write != nullptr) {
    const MsrRule& w = *d.write->rule;
    e.write = WriteAction::Action_IsValid(w.write()) ? w.write() : WriteAction::GP;
    e.writable_mask = w.has_writable_mask() ? w.writable_mask() : ~uint64_t{0};
    e.drop_reserved = w.on_reserved_bits() == pvemu::v1::RESERVED_DROP;
    e.allow_host_write = w.allow_host_write();
    e.write_origin = d.write->origin;
    e.audit |= w.audit();
    // A write-only SHADOW rule may carry the register's initial value.
    if (!e.has_value && w.has_value() && e.read == ReadAction::SHADOW) {
      e.value = w.value();
      e.has_value = true;
    }
  } else {
    e.writable_mask = ~uint64_t{0};
  }
  return e;
}

absl::StatusOr<std::unique_ptr<DomainSnapshot>> Compiler::Domain(
    uint32_t domid, const Layer* overlay, const std::string& overlay_path) {
  auto snap = std::unique_ptr<DomainSnapshot>(new DomainSnapshot);
  const Layer& def = policy_.default_();
  DomainContext& ctx = snap->context_;
  ctx.domain = domid;
  ctx.hardware_domain = overlay != nullptr && overlay->has_hardware_domain()
                            ? overlay->hardware_domain()
                            : domid == 0;
  ctx.guest_vendor = overlay != nullptr && overlay->guest_vendor() != pvemu::v1::VENDOR_UNSPECIFIED
                         ? overlay->guest_vendor()
                     : def.guest_vendor() != pvemu::v1::VENDOR_UNSPECIFIED ? def.guest_vendor()
                                                                           : host_;
  snap->has_overlay_ = overlay != nullptr;

  // Unknown MSRs.
  pvemu::v1::UnknownMsr mode = def.unknown_msr();
  if (overlay != nullptr && overlay->unknown_msr() != pvemu::v1::UNKNOWN_MSR_UNSPECIFIED) {
    mode = overlay->unknown_msr();
  }
  if (mode == pvemu::v1::UNKNOWN_MSR_UNSPECIFIED) mode = pvemu::v1::UNKNOWN_GP;
  snap->unknown_msr_ = mode;
  std::string mode_path = overlay != nullptr && overlay->unknown_msr() != 0
                              ? overlay_path + ".unknown_msr"
                              : "default.unknown_msr";
  snap->origins_.push_back(RuleOrigin{
      "unknown-msr",
      def.unknown_msr() == 0 && mode_path == "default.unknown_msr"
          ? "built-in: unknown_msr unset means GP"
          : source_.WhereLine(mode_path),
      absl::StrCat("unknown_msr: ", pvemu::v1::UnknownMsr_Name(mode))});
  snap->entries_.emplace_back();
  MsrEntry& fb = snap->entries_[0];
  fb.unknown = true;
  switch (mode) {
    case pvemu::v1::UNKNOWN_RELAXED:
      fb.read = ReadAction::ZERO;
      fb.has_value = true;
      fb.write = WriteAction::IGNORE;
      break;
    case pvemu::v1::UNKNOWN_HOST:
      fb.read = ReadAction::PASSTHROUGH;
      fb.write = WriteAction::GP;
      break;
    default:
      fb.read = ReadAction::GP;
      fb.write = WriteAction::GP;
  }

  // vPMU, TSC, guest vendor: the domain's field if set, else the default's.
  snap->vpmu_ = overlay != nullptr && overlay->has_vpmu() ? overlay->vpmu()
                : def.has_vpmu()                         ? def.vpmu()
                                                         : false;
  TscConfig& tsc = snap->tsc_;
  if (def.tsc().mode() != 0) tsc.mode = def.tsc().mode();
  tsc.offset = def.tsc().offset();
  tsc.frequency_khz = def.tsc().frequency_khz();
  if (overlay != nullptr) {
    if (overlay->tsc().mode() != 0) tsc.mode = overlay->tsc().mode();
    if (overlay->tsc().offset() != 0) tsc.offset = overlay->tsc().offset();
    if (overlay->tsc().frequency_khz() != 0) tsc.frequency_khz = overlay->tsc().frequency_khz();
  }

  // Ports: the union of both layers, merged.
  std::vector<std::pair<uint32_t, uint32_t>> ports;
  for (const auto& p : def.io_port()) ports.push_back({p.first(), p.last()});
  if (overlay != nullptr) {
    for (const auto& p : overlay->io_port()) ports.push_back({p.first(), p.last()});
  }
  std::sort(ports.begin(), ports.end());
  for (const auto& p : ports) {
    if (!snap->ports_.empty() && p.first <= snap->ports_.back().second + 1) {
      snap->ports_.back().second = std::max(snap->ports_.back().second, p.second);
    } else {
      snap->ports_.push_back(p);
    }
  }

  // CPUID: domain exact, domain any, default exact, default any.
  auto cpuid_of = [&](const pvemu::v1::CpuidEntry& c, const std::string& path) {
    CpuidDecision d;
    d.source = c.source() == pvemu::v1::CpuidEntry::CONST ? pvemu::v1::CpuidEntry::CONST
                                                          : pvemu::v1::CpuidEntry::HOST;
    const auto& s = c.set();
    const auto& k = c.clear();
    d.set[0] = s.eax(); d.set[1] = s.ebx(); d.set[2] = s.ecx(); d.set[3] = s.edx();
    d.clear[0] = k.eax(); d.clear[1] = k.ebx(); d.clear[2] = k.ecx(); d.clear[3] = k.edx();
    d.origin = source_.WhereLine(path);
    return d;
  };
  absl::flat_hash_set<uint32_t> domain_any_leaves;
  if (overlay != nullptr) {
    for (int i = 0; i < overlay->cpuid_size(); ++i) {
      const auto& c = overlay->cpuid(i);
      std::string path = absl::StrCat(overlay_path, ".cpuid[", i, "]");
      if (c.has_subleaf()) {
        snap->cpuid_exact_[uint64_t{c.leaf()} << 32 | c.subleaf()] = cpuid_of(c, path);
      } else {
        snap->cpuid_any_[c.leaf()] = cpuid_of(c, path);
        domain_any_leaves.insert(c.leaf());
      }
    }
  }
  for (int i = 0; i < def.cpuid_size(); ++i) {
    const auto& c = def.cpuid(i);
    std::string path = absl::StrCat("default.cpuid[", i, "]");
    if (c.has_subleaf()) {
      if (domain_any_leaves.contains(c.leaf())) continue;
      snap->cpuid_exact_.emplace(uint64_t{c.leaf()} << 32 | c.subleaf(), cpuid_of(c, path));
    } else {
      snap->cpuid_any_.emplace(c.leaf(), cpuid_of(c, path));
    }
  }
  for (const auto& [key, d] : snap->cpuid_exact_) {
    snap->cpuid_leaf_kinds_[static_cast<uint32_t>(key >> 32)] |= DomainSnapshot::kCpuidHasExact;
  }
  for (const auto& [leaf, d] : snap->cpuid_any_) {
    snap->cpuid_leaf_kinds_[leaf] |= DomainSnapshot::kCpuidHasAny;
  }

  // MSR rules.
  std::vector<Cand> cands;
  RETURN_IF_ERROR(Collect(def, "default", 0, ctx, snap.get(), &cands));
  if (overlay != nullptr) RETURN_IF_ERROR(Collect(*overlay, overlay_path, 1, ctx, snap.get(), &cands));
  if (!snap->vpmu_) {
    pmu_gp_rule_.set_read(ReadAction::GP);
    pmu_gp_rule_.set_write(WriteAction::GP);
    snap->origins_.push_back(RuleOrigin{"vpmu-off", "built-in: vpmu off",
                                        "PMU MSRs #GP while the domain's vPMU is off"});
    for (const auto& [first, last] : kPmuRanges) {
      cands.push_back(Cand{&pmu_gp_rule_, Target{first, last, false}, 2, 0,
                           static_cast<uint32_t>(snap->origins_.size() - 1)});
    }
  }
  std::vector<const Cand*> all_ranges, dom_ranges, def_ranges, pmu_ranges;
  absl::flat_hash_map<uint32_t, std::vector<const Cand*>> singles;
  for (const Cand& c : cands) {
    if (c.target.single) {
      singles[c.target.first].push_back(&c);
      continue;
    }
    all_ranges.push_back(&c);
    (c.layer == 2 ? pmu_ranges : c.layer == 1 ? dom_ranges : def_ranges).push_back(&c);
  }
  std::vector<Seg> all = Sweep(all_ranges);
  std::vector<Seg> dom = Sweep(dom_ranges);
  std::vector<Seg> dft = Sweep(def_ranges);
  std::vector<Seg> pmu = Sweep(pmu_ranges);

  interned_.clear();
  interned_.emplace(EntryKey(snap->entries_[0]), 0);
  std::vector<MsrIndex::Interval> intervals;
  intervals.reserve(all.size());
  for (const Seg& s : all) {
    intervals.push_back({s.first, s.last, Intern(Materialize(s.d, *snap), snap.get())});
  }
  std::vector<std::pair<uint32_t, uint32_t>> single_entries;
  single_entries.reserve(singles.size());
  for (auto& [msr, list] : singles) {
    std::sort(list.begin(), list.end(), MoreSpecific());
    // Order: vpmu-off, domain singles, domain ranges, default singles,
    // default ranges; the first that decides a half wins it.
    std::vector<Decision> chain;
    chain.push_back(At(pmu, msr));
    for (const Cand* c : list) {
      if (c->layer == 1) chain.push_back(Decision{c, c});
    }
    chain.push_back(At(dom, msr));
    for (const Cand* c : list) {
      if (c->layer == 0) chain.push_back(Decision{c, c});
    }
    chain.push_back(At(dft, msr));
    Decision d;
    for (const Decision& step : chain) {
      if (d.read == nullptr && step.read != nullptr &&
          step.read->rule->read() != ReadAction::ACTION_UNSPECIFIED) {
        d.read = step.read;
      }
      if (d.write == nullptr && step.write != nullptr &&
          step.write->rule->write() != WriteAction::ACTION_UNSPECIFIED) {
        d.write = step.write;
      }
    }
    single_entries.emplace_back(msr, Intern(Materialize(d, *snap), snap.get()));
  }
  snap->index_ = MsrIndex::Build(single_entries, std::move(intervals), 0);
  return snap;
}


uint32_t Compiler::Intern(const MsrEntry& e, DomainSnapshot* snap) {
  auto [it, inserted] = interned_.emplace(EntryKey(e), static_cast<uint32_t>(snap->entries_.size()));
  if (inserted) snap->entries_.push_back(e);
  return it->second;
}

std::vector<DomainSnapshot::Interval> DomainSnapshot::ranges() const {
  std::vector<Interval> out;
  for (const MsrIndex::Interval& r : index_.intervals()) {
    out.push_back(Interval{r.first, r.last, entries_[r.decision]});
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Snapshot>> Compiler::All(uint64_t generation) {
  auto snap = std::shared_ptr<Snapshot>(new Snapshot);
  snap->generation_ = generation;
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
  return std::shared_ptr<const Snapshot>(std::move(snap));
}

absl::StatusOr<std::shared_ptr<const Snapshot>> CompilePolicy(const Policy& policy,
                                                              const SourceMap& source,
                                                              pvemu::v1::Vendor host_vendor,
                                                              uint64_t generation) {
  RETURN_IF_ERROR(ValidatePolicy(policy, source));
  Compiler c(policy, source, host_vendor);
  return c.All(generation);
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

}  // namespace pvemu::policy
