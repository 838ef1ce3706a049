#include "policy/suggest.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "x86/msr_catalog.h"

namespace pvemu::policy {
namespace {

using pvemu::v1::MsrRule;
using pvemu::v1::ReadAction;
using pvemu::v1::WriteAction;

std::string Hex(uint64_t value) { return absl::StrCat("0x", absl::Hex(value)); }

// How the host answered, as AccessSummary::answers counts it.
std::string DescribeAnswer(const MsrAccess& access) {
  switch (access.outcome) {
    case MsrAccess::Outcome::kUnknown:
      return "unknown";
    case MsrAccess::Outcome::kException:
      return absl::StrCat(
          "#", access.vector.has_value() ? pvemu::v1::Vector_Name(*access.vector) : "exception");
    case MsrAccess::Outcome::kCompleted:
      break;
  }
  if (access.value.has_value()) return absl::StrCat("read ", Hex(*access.value));
  return "completed";
}

// "read 3 time(s), first at kern.log:12 (host: #GP x3)".
std::string DescribeSummary(absl::string_view verb, const AccessSummary& summary) {
  std::string answers;
  for (const auto& [answer, count] : summary.answers) {
    absl::StrAppend(&answers, answers.empty() ? "" : ", ", answer, " x", count);
  }
  return absl::StrCat(verb, " ", summary.count, " time(s), first at ", summary.first_source,
                      " (host: ", answers, ")");
}

MsrRule DraftRule(uint32_t msr, const AccessSummary* reads, const AccessSummary* writes) {
  MsrRule rule;
  const absl::string_view name = x86::MsrName(msr);
  rule.set_msr(name.empty() ? Hex(msr) : std::string(name));
  std::string comment;
  if (reads != nullptr) {
    if (reads->faulted) {
      rule.set_read(ReadAction::GP);
    } else if (reads->last_value.value_or(0) != 0) {
      rule.set_read(ReadAction::CONST);
      rule.set_value(*reads->last_value);
    } else {
      rule.set_read(ReadAction::ZERO);
    }
    comment = DescribeSummary("read", *reads);
  }
  if (writes != nullptr) {
    rule.set_write(writes->faulted ? WriteAction::GP : WriteAction::IGNORE);
    absl::StrAppend(&comment, comment.empty() ? "" : "; ", DescribeSummary("written", *writes));
  }
  rule.set_comment(comment);
  return rule;
}

}  // namespace

void PolicyDrafter::Add(const MsrAccess& access) {
  AccessSummary& summary = seen_[{access.domain, access.msr, access.write}];
  if (summary.count++ == 0) summary.first_source = access.source;
  ++summary.answers[DescribeAnswer(access)];
  if (access.outcome == MsrAccess::Outcome::kException &&
      access.vector == pvemu::v1::GP) {
    summary.faulted = true;
  }
  if (!access.write && access.value.has_value()) summary.last_value = access.value;
}

std::vector<DraftedRule> PolicyDrafter::Rules() const {
  std::vector<DraftedRule> rules;
  // seen_ is ordered by (domain, msr, write): a rule's reads come just
  // before its writes.
  for (const auto& [key, summary] : seen_) {
    const auto& [domain, msr, write] = key;
    if (rules.empty() || rules.back().domain != domain || rules.back().msr != msr) {
      DraftedRule& rule = rules.emplace_back();
      rule.domain = domain;
      rule.msr = msr;
    }
    (write ? rules.back().writes : rules.back().reads) = summary;
  }
  for (DraftedRule& drafted : rules) {
    drafted.rule = DraftRule(drafted.msr, drafted.reads ? &*drafted.reads : nullptr,
                             drafted.writes ? &*drafted.writes : nullptr);
  }
  return rules;
}

pvemu::v1::Policy PolicyDrafter::Draft() const {
  pvemu::v1::Policy policy;
  for (DraftedRule& drafted : Rules()) {
    if (policy.domain_size() == 0 ||
        policy.domain(policy.domain_size() - 1).domain() != drafted.domain) {
      policy.add_domain()->set_domain(drafted.domain);
    }
    *policy.mutable_domain(policy.domain_size() - 1)->add_msr() = std::move(drafted.rule);
  }
  return policy;
}

pvemu::v1::Policy DraftPolicy(absl::Span<const MsrAccess> accesses) {
  PolicyDrafter drafter;
  for (const MsrAccess& access : accesses) drafter.Add(access);
  return drafter.Draft();
}

}  // namespace pvemu::policy
