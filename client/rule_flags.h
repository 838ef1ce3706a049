// The rule flags `policy set-rule` and `fleet set-rule` share (--msr,
// --range, --host-vendor; --read, --write, --value, --writable-mask),
// read into a MsrRule. Defined in cmd_online.cc.
#ifndef PVEMU_CLIENT_RULE_FLAGS_H_
#define PVEMU_CLIENT_RULE_FLAGS_H_

#include "absl/status/status.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::client {

// The target and conditions (--msr | --range, --host-vendor).
absl::Status FillRuleTarget(v1::MsrRule* rule);
// The actions (--read, --write, --value, --writable-mask).
absl::Status FillRuleActions(v1::MsrRule* rule);

}  // namespace pvemu::client

#endif  // PVEMU_CLIENT_RULE_FLAGS_H_
