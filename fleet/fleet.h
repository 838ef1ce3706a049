// Fleet mode (pvemud --fleet): a host that takes its policy layers from
// etcd. Assembles the parts, each in its own file:
//   etcd_client   the connection to etcd (proto/etcd/)
//   keys          the --fleet URL, the keys, the layer names
//   compose       base policy + layers -> one policy, class ties
//   applier       a revision's layer set -> the Store, or refused whole
//   watcher       list, then watch from the last revision seen
//   status_keeper registration and the leased status key
//   state_file    the last applied revision on disk
//   editor        validated, compare-and-swap edits
// See README.md, "A fleet on etcd", and docs/DESIGN.md.
//
// Nothing here is on a trap path: traps read the Store's snapshot, which
// this only replaces; a host never waits on etcd to answer a trap.
//
// Thread-safety: every method is safe to call concurrently.
#ifndef PVEMU_FLEET_FLEET_H_
#define PVEMU_FLEET_FLEET_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "policy/loader.h"
#include "policy/store.h"
#include "pvemu/v1/service.pb.h"
#include "fleet/applier.h"
#include "fleet/editor.h"
#include "fleet/etcd_client.h"
#include "fleet/keys.h"
#include "fleet/status_keeper.h"
#include "fleet/watcher.h"

namespace pvemu::fleet {

struct FleetOptions {
  std::string url;                   // --fleet
  std::string host_id;               // --host-id ("" = the hostname)
  std::vector<std::string> classes;  // --host-class
  std::string ca_file, cert_file, key_file;  // --fleet-ca/--fleet-cert/--fleet-key
  std::string state_dir;             // fleet.state goes here ("" = none)
  std::string version;               // pvemu's, for the registration
};

class Fleet {
 public:
  // Applies the last good state from disk (if any) at once, then starts
  // following etcd in the background: a host whose etcd is down starts
  // and serves. `store` must outlive the Fleet; `base` is the host's base
  // policy (the store's initial one).
  static absl::StatusOr<std::unique_ptr<Fleet>> Start(const FleetOptions& options,
                                                      policy::Store& store,
                                                      policy::LoadedPolicy base,
                                                      std::vector<std::string>* warnings);
  ~Fleet();
  void Stop();

  // Waits up to `timeout` for the first revision from etcd (start-up).
  bool WaitFirstSync(absl::Duration timeout) const;

  v1::FleetSelf Self() const;
  // Every registered host, from etcd; with etcd unreachable, this host's
  // last view, marked stale.
  v1::FleetStatusResponse Status();
  absl::StatusOr<v1::GetLayerResponse> GetLayer(const LevelName& layer) const;
  absl::StatusOr<v1::FleetEditResponse> Edit(const LevelEdit& edit);

  const FleetKeys& keys() const { return applier_->keys(); }

 private:
  Fleet() = default;

  std::unique_ptr<EtcdClient> etcd_;
  std::unique_ptr<Applier> applier_;
  std::unique_ptr<Watcher> watcher_;
  std::unique_ptr<StatusKeeper> keeper_;
  std::unique_ptr<Editor> editor_;
  std::vector<std::string> classes_;

  absl::Mutex view_mu_;
  v1::FleetStatusResponse last_view_ ABSL_GUARDED_BY(view_mu_);
};

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_FLEET_H_
