// The in-process world of the offline commands (explain, emulate, replay):
// a sim host from --host-profile, a policy store from --policy, and the same
// dispatcher pvemud uses.
#ifndef PVEMU_CLIENT_OFFLINE_H_
#define PVEMU_CLIENT_OFFLINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "emulator/host.h"
#include "policy/store.h"
#include "dispatch/dispatch.h"

namespace pvemu::client {

struct Offline {
  std::unique_ptr<emulator::Host> host;
  std::unique_ptr<policy::Store> store;
  std::unique_ptr<dispatch::Dispatcher> dispatcher;
};

// --host-profile: a shipped profile name (default intel-xeon-e-2136) or a
// file's path, as pvemud takes it (hosts::OpenSimHost).
absl::StatusOr<std::unique_ptr<emulator::Host>> HostFromFlags();

// The host vendor a policy is compiled for offline (explain, kvm-filter):
// --host-vendor, else the vendor of --host-profile's host.
absl::StatusOr<v1::Vendor> HostVendorFromFlags();

// --policy: a file, or a shipped policy name (default, xen-pre-4.15,
// kvm-ignore-msrs, kvm); "" is the shipped default. Compiled for `vendor`.
absl::StatusOr<std::unique_ptr<policy::Store>> StoreFromFlags(v1::Vendor vendor);

absl::StatusOr<Offline> OfflineFromFlags();

}  // namespace pvemu::client

#endif  // PVEMU_CLIENT_OFFLINE_H_
