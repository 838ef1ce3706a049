// The policy one domain gets, as pvemuctl's per-domain views of it read it
// (kvm-filter, xen-config, explain --kvm): offline from --policy, or the
// daemon's current policy with --server; and the usage checks they share.
#ifndef PVEMU_CLIENT_DOMAIN_POLICY_VIEW_H_
#define PVEMU_CLIENT_DOMAIN_POLICY_VIEW_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "enforce/kvm_msr_filter.h"
#include "policy/compile.h"
#include "policy/loader.h"

namespace pvemu::client {

// With --server, the host vendor is the daemon's: a usage message if
// --host-vendor, --host-profile or --policy is given as well ("" if not).
// `command` names the command in the message.
std::string ServerFlagConflict(absl::string_view command);

// A per-domain view of the policy (kvm-filter, xen-config): the usage checks
// they share (flags only, --domain given, no ServerFlagConflict), then
// `view`; the command's exit code.
int RunDomainPolicyView(const std::vector<std::string>& args, absl::string_view command,
                        absl::FunctionRef<absl::Status()> view);

// The daemon's current policy (GetPolicy), compiled here for the daemon's
// host vendor (GetStats), at the daemon's generation. There is no RPC for a
// KVM filter: the daemon serves the policy, and the filter is a pure
// function of it. Rules are located as "pvemud generation G:LINE", LINE
// being the line in `pvemuctl policy get`'s output at generation G.
absl::StatusOr<std::shared_ptr<const policy::Snapshot>> DaemonSnapshot();

// The daemon's current policy (GetPolicy) with positions as `pvemuctl policy
// get` prints them, and the vendor it compiles for (GetStats): what
// DaemonSnapshot compiles, for commands that compose or replay it.
struct DaemonPolicy {
  policy::LoadedPolicy loaded;
  v1::Vendor vendor = v1::VENDOR_UNSPECIFIED;
  uint64_t generation = 0;
};
absl::StatusOr<DaemonPolicy> FetchDaemonPolicy();

// As explain does: --server given, DaemonSnapshot(); otherwise --policy
// (default: the shipped default) compiled for --host-vendor, else for the
// vendor of --host-profile (default: the shipped Intel profile).
absl::StatusOr<std::shared_ptr<const policy::Snapshot>> SnapshotFromFlags();

// The KVM MSR filter of `domain`, or CompileMsrFilter's refusal
// (InvalidArgument) led by what was refused: "domain N's policy cannot be a
// KVM MSR filter: ...".
absl::StatusOr<enforce::MsrFilter> KvmFilterFor(const policy::Snapshot& snapshot, uint32_t domain);

}  // namespace pvemu::client

#endif  // PVEMU_CLIENT_DOMAIN_POLICY_VIEW_H_
