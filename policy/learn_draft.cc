#include "policy/learn_draft.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "x86/msr_catalog.h"

namespace pvemu::policy {

using Kind = RelaxedAccess::Kind;

void LearnedDrafter::Add(const RelaxedAccess& access) {
  const bool port = access.kind == Kind::kPortIn || access.kind == Kind::kPortOut;
  Seen& seen = seen_[{access.domain, access.kind, access.index, port ? access.width : uint8_t{0}}];
  if (seen.count == 0) seen.first = access.first;
  seen.count += access.count;
}

namespace {

std::string Times(uint64_t n) { return n == 1 ? "once" : absl::StrCat(n, " times"); }

// One domain's rules and ports, from its entries of seen_ (in key order).
struct DomainDraft {
  struct Msr {
    uint64_t reads = 0, writes = 0;
    std::string first_read, first_write;
  };
  std::map<uint32_t, Msr> msrs;
  struct Span {
    uint32_t first, last;
    uint64_t count;
    std::string first_seen;
  };
  std::vector<Span> spans;

  void AddTo(pvemu::v1::Layer* layer) {
    for (const auto& [msr, m] : msrs) {
      pvemu::v1::MsrRule* rule = layer->add_msr();
      const absl::string_view name = x86::MsrName(msr);
      rule->set_msr(name.empty() ? absl::StrFormat("0x%x", msr) : std::string(name));
      std::string comment = "learned:";
      if (m.reads != 0) {
        rule->set_read(pvemu::v1::ReadAction::ZERO);
        absl::StrAppend(&comment, " read ", Times(m.reads), ", first ", m.first_read);
      }
      if (m.writes != 0) {
        rule->set_write(pvemu::v1::WriteAction::IGNORE);
        absl::StrAppend(&comment, m.reads != 0 ? ";" : "", " written ", Times(m.writes),
                        ", first ", m.first_write);
      }
      rule->set_comment(comment);
    }
    // Every byte of each access, then overlapping and adjacent spans as one.
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.first < b.first; });
    std::vector<Span> merged;
    for (const Span& s : spans) {
      if (!merged.empty() && s.first <= merged.back().last + 1) {
        merged.back().last = std::max(merged.back().last, s.last);
        merged.back().count += s.count;
      } else {
        merged.push_back(s);
      }
    }
    for (const Span& s : merged) {
      pvemu::v1::PortRange* range = layer->add_io_port();
      range->set_first(s.first);
      range->set_last(s.last);
      range->set_comment(
          absl::StrCat("learned: accessed ", Times(s.count), ", first ", s.first_seen));
    }
  }
};

}  // namespace

pvemu::v1::Policy LearnedDrafter::Draft() const {
  std::map<uint32_t, DomainDraft> domains;
  for (const auto& [key, seen] : seen_) {
    const auto& [domain, kind, index, width] = key;
    DomainDraft& d = domains[domain];
    switch (kind) {
      case Kind::kMsrRead:
        d.msrs[index].reads += seen.count;
        d.msrs[index].first_read = seen.first;
        break;
      case Kind::kMsrWrite:
        d.msrs[index].writes += seen.count;
        d.msrs[index].first_write = seen.first;
        break;
      case Kind::kPortIn:
      case Kind::kPortOut: {
        const uint32_t last = std::min<uint32_t>(0xffff, index + std::max<uint8_t>(width, 1) - 1);
        d.spans.push_back({index, last, seen.count,
                           absl::StrCat(kind == Kind::kPortIn ? "IN " : "OUT ", width, " byte",
                                        width == 1 ? "" : "s", " at ", seen.first)});
        break;
      }
    }
  }
  pvemu::v1::Policy policy;
  for (auto& [domain, d] : domains) {
    pvemu::v1::Layer* layer = policy.add_domain();
    layer->set_domain(domain);
    d.AddTo(layer);
  }
  return policy;
}

}  // namespace pvemu::policy
