// Policy → KVM MSR filter (KVM_X86_SET_MSR_FILTER). Exactly the MSRs a rule
// of the domain's effective policy names (singly or in ranges, either layer,
// conditions matched for this host and domain) exit to user space, and, while
// the vPMU is off, the PMU MSRs (they #GP on every trap source, so they must
// exit). Every other MSR stays with KVM's own emulation.
//
// KVM's limits (Documentation/virt/kvm/api.rst, KVM_X86_SET_MSR_FILTER): at
// most 16 ranges, each a bitmap of at most 0x600 bytes (0x3000 MSRs). A set
// bit lets KVM handle the MSR; a clear bit makes the access exit. Each range
// carries per-MSR bits, so grouping nearby MSRs into one range never makes an
// unnamed MSR exit.
//
// Thread-safety: pure functions; a MsrFilter is an immutable value.
#ifndef PVEMU_ENFORCE_KVM_MSR_FILTER_H_
#define PVEMU_ENFORCE_KVM_MSR_FILTER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "policy/compile.h"

namespace pvemu::enforce {

inline constexpr size_t kMaxFilterRanges = 16;         // KVM_MSR_FILTER_MAX_RANGES
inline constexpr uint32_t kMaxBitmapBytes = 0x600;     // KVM_MSR_FILTER_MAX_BITMAP_SIZE
inline constexpr uint32_t kMaxMsrsPerRange = kMaxBitmapBytes * 8;
// x2APIC MSRs: KVM applies no filter to them (api.rst: "x2APIC MSRs are
// always allowed"), so a rule naming one could never be enforced.
inline constexpr uint32_t kX2apicFirst = 0x800;
inline constexpr uint32_t kX2apicLast = 0x8ff;

// One KVM filter range, in KVM's bitmap convention.
struct FilterRange {
  uint32_t base = 0;
  uint32_t nmsrs = 0;
  // Whole 64-bit words, (nmsrs + 63) / 64 * 8 bytes: KVM copies
  // BITS_TO_LONGS(nmsrs) longs. A set bit lets KVM handle the MSR.
  std::vector<uint8_t> bitmap;
  bool Exits(uint32_t msr) const;
};

struct MsrFilter {
  // Sorted by base, disjoint, at most kMaxFilterRanges.
  std::vector<FilterRange> ranges;
  // What the ranges mean: every exiting MSR, as sorted disjoint closed
  // intervals. Two filters with equal `exiting` behave the same.
  std::vector<std::pair<uint32_t, uint32_t>> exiting;

  bool Exits(uint32_t msr) const;
  uint64_t exiting_count() const;
  bool SameExits(const MsrFilter& other) const { return exiting == other.exiting; }
};

// The filter under which exactly the MSRs both `a` and `b` make exit do, in
// `a`'s ranges (so KVM takes it whenever it took `a`). A policy swap that
// changes the exiting set installs it first: the MSRs that leave stop
// exiting before the new policy decides (which would answer them by its
// unknown_msr, neither generation's answer), and those that enter start
// only once it does (kvm/data_plane.cc, DataPlane::Apply).
MsrFilter IntersectExits(const MsrFilter& a, const MsrFilter& b);

// The filter for one compiled domain. InvalidArgument, naming each rule
// (FILE:LINE) and why, when KVM cannot express it: a rule that applies to
// this host and domain names an x2APIC MSR (0x800-0x8ff), or the named MSRs
// need more than 16 ranges of 0x3000 MSRs. The message does not name the
// domain (a shared snapshot serves every domain without an overlay): callers
// say which domain they asked for.
absl::StatusOr<MsrFilter> CompileMsrFilter(const policy::DomainSnapshot& domain);

// For people (`pvemuctl kvm-filter`): a summary line, one line per range
// ("range 0: base 0x00000000 nmsrs 0x1b1 (3 exit)"), then the exiting
// intervals with their catalog names.
std::string FilterToText(const MsrFilter& filter);
// The same as one compact JSON object: {"ranges":[{"base","nmsrs","exiting"}],
// "exiting":[{"first","last"}],"exiting_count"} with MSRs as "0x..".
std::string FilterToJson(const MsrFilter& filter);

// One sentence: whether `msr` exits to pvemu on this domain and why (named by
// a rule at FILE:LINE, a PMU MSR while the vPMU is off), or stays with KVM
// (then UNKNOWN and INVAL exits still reach pvemu: an MSR KVM does not know
// follows unknown_msr, a value KVM rejects gets #GP).
std::string ExplainKvm(const MsrFilter& filter, const policy::DomainSnapshot& domain,
                       uint32_t msr);

}  // namespace pvemu::enforce

#endif  // PVEMU_ENFORCE_KVM_MSR_FILTER_H_
