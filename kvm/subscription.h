// The data plane's link to pvemud (KvmService): the policy stream, and the
// counts sent back in batches. Runs on its own threads; the exit path never
// waits for it. While the daemon is away (stopped, restarting, unreachable)
// the VM runs on its last policy and the link reconnects with backoff
// (100 ms doubling to 5 s).
#ifndef PVEMU_KVM_SUBSCRIPTION_H_
#define PVEMU_KVM_SUBSCRIPTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "policy/source_map.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::kvm {

class DataPlane;

struct SubscribedPolicy {
  pvemu::v1::Policy policy;
  policy::SourceMap source;
  uint64_t generation = 0;
};

class PolicySubscription {
 public:
  // The daemon's current policy for `domain`: Unavailable naming the address
  // when the daemon cannot be reached within `timeout`, PermissionDenied
  // when it refuses this process.
  static absl::StatusOr<SubscribedPolicy> FetchFirst(const std::string& server, uint32_t domain,
                                                     absl::Duration timeout);
  // Follows the daemon from now on: each later generation goes to
  // plane->Apply; counts go back every 50 ms. Stops in the destructor.
  static std::unique_ptr<PolicySubscription> Start(DataPlane* plane, const std::string& server,
                                                   uint32_t domain);
  // Waits until the policy stream is up (its first update arrived, so the
  // daemon holds this VM as attached and checks every later edit against
  // its KVM filter), or `timeout`; false after the timeout. FetchFirst's
  // stream ends when it returns: without this wait, an edit made just after
  // the plane opened could reach a daemon that held no attachment for it.
  bool WaitFollowing(absl::Duration timeout);
  ~PolicySubscription();

  // The gRPC target for a --server value: "unix:PATH" and "unix:///PATH" as
  // given, a bare path as "unix:PATH".
  static std::string Target(const std::string& server);

 private:
  struct Impl;
  explicit PolicySubscription(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pvemu::kvm

#endif  // PVEMU_KVM_SUBSCRIPTION_H_
