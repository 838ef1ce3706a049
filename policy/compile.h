// Compilation: a validated policy flattened, for one host vendor, into
// immutable per-domain lookup tables. A trap does one lookup and never walks
// rules; lookups allocate nothing and take no lock.
//
// Precedence is by specificity only (DESIGN.md, "The policy model"), in this
// order of keys:
//   1. the domain layer before the default layer;
//   2. a single MSR before a range, a narrower range before a wider one;
//   3. a rule with more conditions (host_vendor, guest_vendor,
//      hardware_domain) before one with fewer.
// A rule whose conditions do not match this host and domain is dropped.
// The read and write halves are decided independently: a rule that leaves
// `read` unset passes the read decision on to the next most specific matching
// rule (likewise `write`), and a half no rule decides follows the layer's
// unknown_msr mode. `value` travels with the read half; writable_mask,
// on_reserved_bits and allow_host_write travel with the write half; `audit`
// is set if either deciding rule asks for it.
//
// vPMU: when a domain's vPMU is off, the PMU MSRs (Intel IA32_PMCn,
// IA32_PERFEVTSELn, IA32_A_PMCn, fixed counters, global control/status,
// PEBS/DS; AMD K7 and F15h PERF_CTL/PERF_CTR, PERF_CNTR_GLOBAL_*) read and
// write #GP whatever the rules say. This is compile-time logic rather than
// shipped rules, because it must hold for every policy, not only the shipped
// one; explain reports it as layer "vpmu-off".
//
// Thread-safety: Snapshot and DomainSnapshot are immutable once built and safe
// to read from any number of threads.
#ifndef PVEMU_POLICY_COMPILE_H_
#define PVEMU_POLICY_COMPILE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "policy/msr_index.h"
#include "policy/source_map.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::policy {

// Where a decision came from, for explain and audit.
struct RuleOrigin {
  std::string layer;    // "default", "domain", "unknown-msr" or "vpmu-off"
  std::string source;   // "FILE:LINE" (or "FILE:PATH" without positions)
  std::string comment;  // the rule's comment
};

// The final decision for one MSR in one domain. Fields are ordered so the
// entry packs into 40 bytes: a large policy's decisions are read on the trap
// path, and fewer cache lines per entry means fewer misses.
struct MsrEntry {
  // CONST: the value read; SHADOW: the register's initial value (if
  // has_value; else the host's value, or 0).
  uint64_t value = 0;
  uint64_t writable_mask = ~uint64_t{0};  // bits a guest write may change
  pvemu::v1::ReadAction::Action read = pvemu::v1::ReadAction::GP;
  pvemu::v1::WriteAction::Action write = pvemu::v1::WriteAction::GP;
  uint32_t read_origin = 0;   // index into DomainSnapshot::origin()
  uint32_t write_origin = 0;
  bool has_value = false;
  bool drop_reserved = false;  // a write touching other bits is dropped, not #GP
  bool allow_host_write = false;
  bool audit = false;
  bool unknown = false;  // no rule named this MSR: the unknown_msr mode decided
  // In a LEARN domain's effective table: what the enforcing entry would have
  // faulted and this one relaxes (kRelaxed* bits; 0 in ENFORCE).
  uint8_t relaxed = 0;
  static constexpr uint8_t kRelaxedRead = 1;      // read GP, now ZERO
  static constexpr uint8_t kRelaxedWrite = 2;     // write GP, now IGNORE
  static constexpr uint8_t kRelaxedReserved = 4;  // reserved bits GP, now dropped
};
static_assert(sizeof(MsrEntry) <= 40, "keep MsrEntry small: it is read on every MSR trap");

// One compiled CPUID leaf.
struct CpuidDecision {
  pvemu::v1::CpuidEntry::Source source = pvemu::v1::CpuidEntry::HOST;
  uint32_t set[4] = {0, 0, 0, 0};    // eax, ebx, ecx, edx
  uint32_t clear[4] = {0, 0, 0, 0};
  std::string origin;  // "FILE:LINE"

  // The leaf as this decision gives it, from the host's EAX..EDX in
  // `regs` (replaced for CONST, masked for HOST): the one rule every
  // consumer of a CPUID decision applies (the trap path, KVM's CPUID table).
  void Apply(uint32_t regs[4]) const {
    for (int i = 0; i < 4; ++i) {
      regs[i] = source == pvemu::v1::CpuidEntry::CONST ? set[i] : (regs[i] & ~clear[i]) | set[i];
    }
  }
};

struct TscConfig {
  pvemu::v1::TscPolicy::Mode mode = pvemu::v1::TscPolicy::NATIVE;
  int64_t offset = 0;
  uint64_t frequency_khz = 0;
};

// Where a domain's settings other than MSR rules came from ("FILE:LINE" of
// the deciding field; "" when no layer sets it and the built-in default
// applies), so tools that translate a policy for another enforcer
// (pvemuctl xen-config) can name the rule they cannot carry over.
struct SettingOrigins {
  std::string tsc;           // the tsc field (mode, offset or frequency) that decides
  std::string vpmu;
  std::string guest_vendor;
  std::string mode;          // the `mode` field that decides ENFORCE or LEARN
};

// One io_port range as a layer wrote it (before merging), with its origin.
struct PortGrant {
  uint32_t first = 0;
  uint32_t last = 0;
  std::string origin;  // "FILE:LINE"
};

// Who a compiled snapshot is for.
struct DomainContext {
  uint32_t domain = 0;
  bool hardware_domain = false;
  pvemu::v1::Vendor guest_vendor = pvemu::v1::VENDOR_UNSPECIFIED;
};

class DomainSnapshot {
 public:
  DomainSnapshot(const DomainSnapshot&) = delete;
  DomainSnapshot& operator=(const DomainSnapshot&) = delete;

  // The decision for an MSR as the trap path applies it; never fails
  // (unknown MSRs get the fallback). One probe of the exact-MSR table, then
  // on a miss one probe of the range page table (policy/msr_index.h). In a
  // LEARN domain what would fault is relaxed (MsrEntry::relaxed says what).
  const MsrEntry& Lookup(uint32_t msr) const { return effective_[index_.Find(msr)]; }
  // Lookup, with the MSR's count slot (1..count_slots()); for an MSR no
  // rule names on its own, the free slot its probe stopped at, marked
  // MsrIndex::kUnnamedSlot (0 when the domain names no MSR): what counting
  // per MSR indexes by, so that a count needs no hashing
  // (MsrIndex::FindCounted).
  const MsrEntry& LookupCounted(uint32_t msr, uint32_t* slot) const {
    return effective_[index_.FindCounted(msr, slot)];
  }
  uint32_t count_slots() const { return index_.slots(); }
  // The MSR at count slot `slot` and its entry as Lookup gives it; false for
  // a slot no MSR has.
  bool SlotMsr(uint32_t slot, uint32_t* msr, const MsrEntry** entry) const {
    uint32_t decision = 0;
    if (!index_.SlotSingle(slot, msr, &decision)) return false;
    *entry = &effective_[decision];
    return true;
  }
  // The decision as the policy enforces it, whatever the mode: for tools
  // (explain, the KVM MSR filter, which MSRs exit must not depend on the mode).
  const MsrEntry& EnforcedLookup(uint32_t msr) const { return entries_[index_.Find(msr)]; }
  // LEARN (PolicyMode): what would fault is relaxed and recorded.
  bool learning() const { return learning_; }
  // Whether a rule names `msr` on its own (not through a range): the MSRs
  // metrics always count apart (dispatch/trap_counts.h).
  bool NamesMsr(uint32_t msr) const { return index_.HasSingle(msr); }

  // The CPUID decision for a leaf/subleaf, or nullptr: use the host's value.
  // An exact subleaf beats an any-subleaf entry; the domain beats the default.
  const CpuidDecision* Cpuid(uint32_t leaf, uint32_t subleaf) const;

  // Whether every port in [port, port + width) is granted, as the trap path
  // applies it: a LEARN domain's accesses are all granted.
  bool PortAllowed(uint32_t port, uint32_t width) const {
    return learning_ ? width <= 0x10000 - port : EnforcedPortAllowed(port, width);
  }
  // Whether the io_port ranges grant every port in [port, port + width).
  bool EnforcedPortAllowed(uint32_t port, uint32_t width) const;

  const TscConfig& tsc() const { return tsc_; }
  bool vpmu() const { return vpmu_; }
  const SettingOrigins& setting_origins() const { return setting_origins_; }
  // The io_port ranges of both layers as written, default layer first (the
  // merged set PortAllowed answers from loses which rule granted what).
  const std::vector<PortGrant>& port_grants() const { return port_grants_; }
  // Every CPUID decision in force, sorted by leaf, any-subleaf before exact
  // subleaves (a default-layer subleaf a domain's any-subleaf entry hides is
  // not listed). Built on demand, for tools; the trap path uses Cpuid().
  struct CpuidRule {
    uint32_t leaf;
    bool any_subleaf;
    uint32_t subleaf;  // when !any_subleaf
    const CpuidDecision* decision;
  };
  std::vector<CpuidRule> CpuidRules() const;
  pvemu::v1::Vendor guest_vendor() const { return context_.guest_vendor; }
  bool hardware_domain() const { return context_.hardware_domain; }
  uint32_t domain() const { return context_.domain; }
  bool has_overlay() const { return has_overlay_; }
  const MsrEntry& fallback() const { return entries_[0]; }
  pvemu::v1::UnknownMsr unknown_msr() const { return unknown_msr_; }
  const RuleOrigin& origin(uint32_t index) const { return origins_[index]; }

  // Sizes, for tests and stats.
  size_t single_count() const { return index_.single_count(); }
  size_t range_count() const { return index_.intervals().size(); }
  size_t distinct_entries() const { return entries_.size(); }
  struct Interval {
    uint32_t first;
    uint32_t last;
    MsrEntry entry;
  };
  // The interval table (built on demand; for tests and tools).
  std::vector<Interval> ranges() const;
  // Every MSR a rule (or the vPMU-off rule) decides: single MSRs as
  // one-MSR spans, and the ranges' spans, sorted by first; a single may lie
  // inside a range. MSRs in none follow unknown_msr. Built on demand, for
  // the KVM MSR filter (enforce/kvm_msr_filter.h). Enforced entries.
  struct NamedSpan {
    uint32_t first;
    uint32_t last;
    const MsrEntry* entry;
  };
  std::vector<NamedSpan> NamedMsrs() const;

 private:
  friend class Compiler;
  DomainSnapshot() = default;

  DomainContext context_;
  bool has_overlay_ = false;
  // Decisions are deduplicated into entries_ (entries_[0] is the unknown-MSR
  // fallback) so the lookup tables hold 4-byte indices and stay in cache.
  std::vector<MsrEntry> entries_;
  // LEARN: entries_ with what would fault relaxed, index for index.
  std::vector<MsrEntry> relaxed_entries_;
  // What Lookup reads: entries_, or relaxed_entries_ when learning_.
  const MsrEntry* effective_ = nullptr;
  bool learning_ = false;
  MsrIndex index_;  // msr -> entries_ index
  pvemu::v1::UnknownMsr unknown_msr_ = pvemu::v1::UNKNOWN_GP;
  std::vector<RuleOrigin> origins_;
  absl::flat_hash_map<uint64_t, CpuidDecision> cpuid_exact_;  // leaf << 32 | subleaf
  absl::flat_hash_map<uint32_t, CpuidDecision> cpuid_any_;
  // Which of the two maps hold a leaf (kCpuidHas* bits, MarkCpuidLeaf), so
  // that a leaf the policy does not mention is answered at once: for the
  // leaves guests ask for most, basic 0..0x1f and extended
  // 0x80000000..0x8000001f (LowCpuidLeaf), by one byte load; for any other,
  // by one hash probe.
  static constexpr uint8_t kCpuidHasExact = 1;
  static constexpr uint8_t kCpuidHasAny = 2;
  static int LowCpuidLeaf(uint32_t leaf) {
    return (leaf & ~0x8000001fu) == 0 ? static_cast<int>((leaf & 0x1f) | (leaf >> 31) << 5) : -1;
  }
  void MarkCpuidLeaf(uint32_t leaf, uint8_t kind);
  std::array<uint8_t, 64> cpuid_low_kinds_ = {};
  absl::flat_hash_map<uint32_t, uint8_t> cpuid_leaf_kinds_;  // the other leaves
  std::vector<std::pair<uint32_t, uint32_t>> ports_;  // sorted, merged
  std::vector<PortGrant> port_grants_;
  TscConfig tsc_;
  bool vpmu_ = false;
  SettingOrigins setting_origins_;
};

// A whole host's compiled policy at one generation.
class UnstampedSnapshot;
class Snapshot {
 public:
  uint64_t generation() const { return generation_; }
  pvemu::v1::Vendor host_vendor() const { return host_vendor_; }
  // The policy this was compiled from.
  const pvemu::v1::Policy& policy() const { return policy_; }

  // The snapshot for a domain: its overlay's, else dom0's or the generic
  // non-hardware domain's. Never fails; no allocation, no lock.
  const DomainSnapshot& ForDomain(uint32_t domid) const {
    auto it = overlays_.find(domid);
    if (it != overlays_.end()) return *it->second;
    return domid == 0 ? *dom0_ : *other_;
  }

 private:
  friend class Compiler;
  friend class UnstampedSnapshot;
  Snapshot() = default;

  uint64_t generation_ = 0;
  pvemu::v1::Vendor host_vendor_ = pvemu::v1::VENDOR_UNSPECIFIED;
  pvemu::v1::Policy policy_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<DomainSnapshot>> overlays_;
  std::unique_ptr<DomainSnapshot> dom0_;
  std::unique_ptr<DomainSnapshot> other_;
};

// Validates `policy` and compiles it for a host of `host_vendor`.
// InvalidArgument (all validation errors) if the policy is invalid.
absl::StatusOr<std::shared_ptr<const Snapshot>> CompilePolicy(
    const pvemu::v1::Policy& policy, const SourceMap& source,
    pvemu::v1::Vendor host_vendor, uint64_t generation);

// A policy compiled before its generation is known: fleet mode checks an
// edit's candidate by compiling it before etcd commits the edit and numbers
// it, and publishes that same compile at the revision (Store::
// ApplyPolicyAtGeneration) rather than compiling it twice.
class UnstampedSnapshot {
 public:
  // Validates and compiles, as CompilePolicy does.
  static absl::StatusOr<UnstampedSnapshot> Compile(const pvemu::v1::Policy& policy,
                                                   const SourceMap& source,
                                                   pvemu::v1::Vendor host_vendor);
  // The snapshot at `generation`; this one is then empty.
  std::shared_ptr<const Snapshot> Stamp(uint64_t generation) &&;
  bool empty() const { return snap_ == nullptr; }

 private:
  explicit UnstampedSnapshot(std::shared_ptr<Snapshot> snap) : snap_(std::move(snap)) {}
  std::shared_ptr<Snapshot> snap_;  // nobody else's until stamped
};

// Compiles one domain (for tests and `explain` of a hypothetical domain).
absl::StatusOr<std::unique_ptr<const DomainSnapshot>> CompileDomain(
    const pvemu::v1::Policy& policy, const SourceMap& source,
    pvemu::v1::Vendor host_vendor, uint32_t domid);

// Whether `msr` is one of the PMU MSRs that #GP while vPMU is off.
bool IsPmuMsr(uint32_t msr);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_COMPILE_H_
