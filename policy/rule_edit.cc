#include "policy/rule_edit.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "policy/rules.h"

namespace pvemu::policy {

absl::Status EditRuleInLayer(pvemu::v1::Layer* layer, const pvemu::v1::MsrRule& rule,
                             RuleEditKind kind, absl::string_view where) {
  ASSIGN_OR_RETURN(Target target, ResolveTarget(rule));
  int found = -1;
  for (int i = 0; layer != nullptr && i < layer->msr_size() && found < 0; ++i) {
    absl::StatusOr<Target> t = ResolveTarget(layer->msr(i));
    if (t.ok() && t->first == target.first && t->last == target.last &&
        t->single == target.single && SameConditions(layer->msr(i), rule)) {
      found = i;
    }
  }
  if (kind == RuleEditKind::kSet) {
    if (layer == nullptr) return absl::InternalError("EditRuleInLayer: kSet needs a layer");
    *(found >= 0 ? layer->mutable_msr(found) : layer->add_msr()) = rule;
    return absl::OkStatus();
  }
  if (found < 0) {
    return absl::NotFoundError(
        absl::StrCat("no rule for ", DescribeTarget(target), " with these conditions in ", where));
  }
  layer->mutable_msr()->erase(layer->mutable_msr()->begin() + found);
  return absl::OkStatus();
}

}  // namespace pvemu::policy
