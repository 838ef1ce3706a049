#include "enforce/kvm_msr_filter.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "x86/msr_catalog.h"

namespace pvemu::enforce {
namespace {

using Span = policy::DomainSnapshot::NamedSpan;

// Where the rules deciding `entry` are ("FILE:LINE"), or the vPMU-off note.
void AddSources(const policy::DomainSnapshot& domain, const policy::MsrEntry& entry,
                std::set<std::string>* out) {
  for (uint32_t origin : {entry.read_origin, entry.write_origin}) {
    const policy::RuleOrigin& o = domain.origin(origin);
    if (o.layer == "unknown-msr") continue;  // the half no rule decides
    out->insert(o.layer == "vpmu-off" ? std::string("the built-in vPMU-off rule (PMU MSRs)")
                                      : o.source);
  }
}

std::string Hex(uint32_t v) { return absl::StrFormat("0x%x", v); }

std::string SpanText(uint32_t first, uint32_t last) {
  return first == last ? Hex(first) : absl::StrCat(Hex(first), "-", Hex(last));
}

// The union of the named spans: sorted, disjoint, adjacent ones joined.
std::vector<std::pair<uint32_t, uint32_t>> Union(const std::vector<Span>& spans) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const Span& s : spans) {
    if (!out.empty() && uint64_t{s.first} <= uint64_t{out.back().second} + 1) {
      out.back().second = std::max(out.back().second, s.last);
    } else {
      out.emplace_back(s.first, s.last);
    }
  }
  return out;
}

// The fewest windows of at most kMaxMsrsPerRange MSRs that cover every
// exiting MSR: each window starts at the first exiting MSR not yet covered
// (greedy from the left is optimal for fixed-width windows) and is trimmed
// to the last exiting MSR inside it.
std::vector<std::pair<uint32_t, uint32_t>> Windows(
    const std::vector<std::pair<uint32_t, uint32_t>>& exiting) {
  std::vector<std::pair<uint32_t, uint32_t>> windows;
  size_t i = 0;
  uint64_t next = exiting.empty() ? 0 : exiting[0].first;  // first uncovered MSR
  while (i < exiting.size()) {
    const uint64_t start = std::max<uint64_t>(next, exiting[i].first);
    const uint64_t limit = start + kMaxMsrsPerRange - 1;
    uint64_t end = start;
    while (i < exiting.size() && exiting[i].first <= limit) {
      end = std::min<uint64_t>(exiting[i].second, limit);
      if (exiting[i].second > limit) break;  // the interval goes on past this window
      ++i;
    }
    windows.emplace_back(static_cast<uint32_t>(start), static_cast<uint32_t>(end));
    next = end + 1;
  }
  return windows;
}

}  // namespace

bool FilterRange::Exits(uint32_t msr) const {
  if (msr < base || msr - base >= nmsrs) return false;
  const uint32_t bit = msr - base;
  return (bitmap[bit / 8] & (1u << (bit % 8))) == 0;
}

bool MsrFilter::Exits(uint32_t msr) const {
  auto it = std::upper_bound(exiting.begin(), exiting.end(), msr,
                             [](uint32_t m, const auto& span) { return m < span.first; });
  return it != exiting.begin() && msr <= std::prev(it)->second;
}

uint64_t MsrFilter::exiting_count() const {
  uint64_t n = 0;
  for (const auto& [first, last] : exiting) n += uint64_t{last} - first + 1;
  return n;
}

MsrFilter IntersectExits(const MsrFilter& a, const MsrFilter& b) {
  MsrFilter out;
  // The intervals both list, by walking the two sorted lists together.
  size_t i = 0, j = 0;
  while (i < a.exiting.size() && j < b.exiting.size()) {
    const uint32_t first = std::max(a.exiting[i].first, b.exiting[j].first);
    const uint32_t last = std::min(a.exiting[i].second, b.exiting[j].second);
    if (first <= last) out.exiting.emplace_back(first, last);
    if (a.exiting[i].second < b.exiting[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  // a's ranges, with the bit of every MSR that exits there but not in b set.
  out.ranges = a.ranges;
  for (FilterRange& range : out.ranges) {
    for (uint32_t bit = 0; bit < range.nmsrs; ++bit) {
      const uint32_t msr = range.base + bit;
      if (range.Exits(msr) && !out.Exits(msr)) range.bitmap[bit / 8] |= 1u << (bit % 8);
    }
  }
  return out;
}

absl::StatusOr<MsrFilter> CompileMsrFilter(const policy::DomainSnapshot& domain) {
  const std::vector<Span> spans = domain.NamedMsrs();

  std::set<std::string> x2apic_rules;
  for (const Span& s : spans) {
    if (s.first <= kX2apicLast && s.last >= kX2apicFirst) AddSources(domain, *s.entry, &x2apic_rules);
  }
  if (!x2apic_rules.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KVM cannot filter x2APIC MSRs 0x800-0x8ff (KVM always ",
        "handles them itself), so these rules could never be enforced on a KVM domain: ",
        absl::StrJoin(x2apic_rules, ", "),
        ". Remove the rules, or narrow their ranges to leave out 0x800-0x8ff."));
  }

  MsrFilter filter;
  filter.exiting = Union(spans);
  const std::vector<std::pair<uint32_t, uint32_t>> windows = Windows(filter.exiting);
  if (windows.size() > kMaxFilterRanges) {
    // Name the rules of each window beyond what fits, so the operator sees
    // which MSRs lie too far apart.
    std::vector<std::string> parts;
    for (const auto& [first, last] : windows) {
      std::set<std::string> rules;
      for (const Span& s : spans) {
        if (s.first <= last && s.last >= first) AddSources(domain, *s.entry, &rules);
      }
      parts.push_back(absl::StrCat(SpanText(first, last), " (", absl::StrJoin(rules, ", "), ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the MSRs the rules name need ", windows.size(),
        " KVM filter ranges of at most 0x", absl::Hex(kMaxMsrsPerRange), " MSRs, and KVM allows ",
        kMaxFilterRanges, ". Named MSRs by range, with their rules: ", absl::StrJoin(parts, "; "),
        ". Merge or drop rules whose MSRs lie far apart (a range rule over a wide span costs ",
        "one filter range per 0x3000 MSRs)."));
  }

  for (const auto& [first, last] : windows) {
    FilterRange range;
    range.base = first;
    range.nmsrs = last - first + 1;
    // KVM copies BITS_TO_LONGS(nmsrs) longs from the bitmap: size it in
    // whole 64-bit words. Set bits let KVM handle an MSR.
    range.bitmap.assign((range.nmsrs + 63) / 64 * 8, 0xff);
    filter.ranges.push_back(std::move(range));
  }
  size_t r = 0;
  for (const auto& [first, last] : filter.exiting) {
    for (uint64_t msr = first; msr <= last; ++msr) {
      while (msr > uint64_t{filter.ranges[r].base} + filter.ranges[r].nmsrs - 1) ++r;
      const uint32_t bit = static_cast<uint32_t>(msr) - filter.ranges[r].base;
      filter.ranges[r].bitmap[bit / 8] &= static_cast<uint8_t>(~(1u << (bit % 8)));
    }
  }
  return filter;
}

std::string FilterToText(const MsrFilter& filter) {
  std::string out = absl::StrCat(
      "KVM MSR filter: ", filter.ranges.size(), " of ", kMaxFilterRanges, " ranges; ",
      filter.exiting_count(), " MSRs exit to pvemu, every other MSR stays with KVM\n");
  for (size_t i = 0; i < filter.ranges.size(); ++i) {
    const FilterRange& r = filter.ranges[i];
    uint32_t exits = 0;
    for (uint32_t b = 0; b < r.nmsrs; ++b) exits += r.Exits(r.base + b) ? 1 : 0;
    absl::StrAppendFormat(&out, "range %u: base 0x%08x nmsrs 0x%x (%u exit)\n", i, r.base, r.nmsrs,
                          exits);
  }
  out += "exiting MSRs:\n";
  for (const auto& [first, last] : filter.exiting) {
    // Catalog names where the catalog has them; a bare number otherwise.
    const absl::string_view a = x86::MsrName(first), b = x86::MsrName(last);
    if (first == last) {
      absl::StrAppendFormat(&out, "  0x%08x             %s\n", first, a);
    } else if (a.empty() && b.empty()) {
      absl::StrAppendFormat(&out, "  0x%08x-0x%08x\n", first, last);
    } else {
      absl::StrAppendFormat(&out, "  0x%08x-0x%08x  %s .. %s\n", first, last,
                            a.empty() ? absl::StrFormat("0x%x", first) : std::string(a),
                            b.empty() ? absl::StrFormat("0x%x", last) : std::string(b));
    }
  }
  return out;
}

std::string FilterToJson(const MsrFilter& filter) {
  std::vector<std::string> ranges;
  for (const FilterRange& r : filter.ranges) {
    uint32_t exits = 0;
    for (uint32_t b = 0; b < r.nmsrs; ++b) exits += r.Exits(r.base + b) ? 1 : 0;
    ranges.push_back(absl::StrFormat(R"({"base":"0x%x","nmsrs":%u,"exiting":%u})", r.base,
                                     r.nmsrs, exits));
  }
  std::vector<std::string> exiting;
  for (const auto& [first, last] : filter.exiting) {
    exiting.push_back(absl::StrFormat(R"({"first":"0x%x","last":"0x%x"})", first, last));
  }
  return absl::StrCat(R"({"ranges":[)", absl::StrJoin(ranges, ","), R"(],"exiting":[)",
                      absl::StrJoin(exiting, ","), R"(],"exiting_count":)",
                      filter.exiting_count(), "}");
}

std::string ExplainKvm(const MsrFilter& filter, const policy::DomainSnapshot& domain,
                       uint32_t msr) {
  if (msr >= kX2apicFirst && msr <= kX2apicLast) {
    return absl::StrCat("on KVM, ", Hex(msr),
                        " is an x2APIC MSR: KVM handles it itself and no filter can make it exit");
  }
  if (filter.Exits(msr)) {
    std::set<std::string> rules;
    for (const Span& s : domain.NamedMsrs()) {
      if (s.first <= msr && msr <= s.last) AddSources(domain, *s.entry, &rules);
    }
    return absl::StrCat("on KVM, ", Hex(msr), " exits to pvemu (the filter denies it to KVM): ",
                        "named by ", absl::StrJoin(rules, ", "));
  }
  return absl::StrCat(
      "on KVM, ", Hex(msr), " stays with KVM's own emulation (no rule names it; no exit); ",
      "if KVM does not know it, the access still exits to pvemu (reason UNKNOWN) and follows ",
      "unknown_msr ", pvemu::v1::UnknownMsr_Name(domain.unknown_msr()),
      ", and a value KVM rejects exits (reason INVAL) and gets #GP");
}

}  // namespace pvemu::enforce
