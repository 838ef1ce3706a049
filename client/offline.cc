#include "client/offline.h"

#include "absl/flags/flag.h"
#include "client/flags.h"
#include "policy/shipped.h"
#include "policy/vendor_proto.h"
#include "hosts/open_host.h"
#include "base/status_macros.h"
#include "x86/vendor.h"

namespace pvemu::client {

absl::StatusOr<std::unique_ptr<emulator::Host>> HostFromFlags() {
  ASSIGN_OR_RETURN(auto host, hosts::OpenSimHost(absl::GetFlag(FLAGS_host_profile)));
  return std::unique_ptr<emulator::Host>(std::move(host));
}

absl::StatusOr<v1::Vendor> HostVendorFromFlags() {
  if (std::string v = absl::GetFlag(FLAGS_host_vendor); !v.empty()) {
    ASSIGN_OR_RETURN(x86::Vendor parsed, x86::ParseVendor(v));
    return policy::ToProto(parsed);
  }
  ASSIGN_OR_RETURN(auto host, HostFromFlags());
  return host->vendor();
}

absl::StatusOr<std::unique_ptr<policy::Store>> StoreFromFlags(v1::Vendor vendor) {
  std::string name = absl::GetFlag(FLAGS_policy);
  if (name.empty()) name = "default";
  absl::StatusOr<policy::LoadedPolicy> loaded = policy::LoadPolicyByNameOrFile(name);
  if (!loaded.ok()) return loaded.status();
  return policy::Store::FromPolicy(loaded->policy, loaded->source, vendor);
}

absl::StatusOr<Offline> OfflineFromFlags() {
  Offline o;
  ASSIGN_OR_RETURN(o.host, HostFromFlags());
  ASSIGN_OR_RETURN(o.store, StoreFromFlags(o.host->vendor()));
  // As pvemud by default: PASSTHROUGH writes do not reach the host.
  dispatch::DispatchOptions options;
  o.dispatcher = std::make_unique<dispatch::Dispatcher>(*o.store, *o.host, nullptr, options);
  return o;
}

}  // namespace pvemu::client
