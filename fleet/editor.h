// Fleet mode's edits of the layers in etcd, made through any fleet-mode
// pvemud. An edit is made from this host's watch cache when the layer is
// one of this host's (Watcher::Cached), with a linearizable read of it
// beside the checks (etcd's quorum, and a cache behind it), from a read
// first otherwise. It is validated before it is written (the layer on its own,
// this host's whole layer set with it, and class ties on the registered
// hosts that have the class), written with a Txn that compares the key's
// mod_revision (the loser of a race gets ABORTED, never a lost update),
// acknowledged only once etcd committed it, and, when it is one of this
// host's layers, only once this host applied that revision (or within 5 s
// with why not).
//
// Error codes (pvemuctl exits 1 for each): INVALID_ARGUMENT (the edit is
// invalid; nothing written), ABORTED (the layer moved on), NOT_FOUND (no
// such rule), FAILED_PRECONDITION (etcd cannot take an edit now: no quorum
// or unreachable, naming it and its endpoints; nothing written), UNKNOWN
// (sent but not confirmed: "outcome unknown", and how to check).
//
// Thread-safety: every method is safe to call concurrently.
#ifndef PVEMU_FLEET_EDITOR_H_
#define PVEMU_FLEET_EDITOR_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "pvemu/v1/service.pb.h"
#include "fleet/applier.h"
#include "fleet/etcd_client.h"
#include "fleet/keys.h"
#include "fleet/watcher.h"

namespace pvemu::fleet {

struct LevelEdit {
  enum Op { kApply, kSetRule, kDeleteRule };
  Op op = kApply;
  LevelName level;  // the fleet level (the key) edited
  std::string who;           // the peer, for the value's header and the audit log
  int64_t if_revision = 0;   // 0: no check
  // kApply: the layer's new value and the name of its text in errors.
  std::string textproto;
  std::string source_name;
  // kSetRule / kDeleteRule: the rule, in the value's default layer or in
  // its overlay of `domain` (a domain key's value is its one overlay).
  v1::MsrRule rule;
  std::optional<uint32_t> domain;
};

class Editor {
 public:
  // `watcher` (may be null) serves the read of this host's own keys.
  Editor(const EtcdClient& etcd, Applier& applier, const Watcher* watcher, std::string host_name)
      : etcd_(etcd), applier_(applier), watcher_(watcher), host_name_(std::move(host_name)) {}

  absl::StatusOr<v1::FleetEditResponse> Edit(const LevelEdit& edit);
  absl::StatusOr<v1::GetLayerResponse> Get(const LevelName& layer) const;

  // How long an edit waits for this host to apply it.
  static constexpr absl::Duration kApplyWait = absl::Seconds(5);

 private:
  // The edited layer's new value (without its header), or why not.
  absl::StatusOr<v1::Policy> NewValue(const LevelEdit& edit, const std::string& key,
                                      const std::optional<KeyValue>& current) const;
  // Refuses a class edit that would tie with another class of a registered
  // host, naming the hosts.
  absl::Status CheckRegisteredTies(const LevelName& layer, const std::string& value) const;

  const EtcdClient& etcd_;
  Applier& applier_;
  const Watcher* const watcher_;
  const std::string host_name_;
};

// When this process last issued an edit's Txn (the steady clock): for
// BM_FleetEditToAllHosts, which times an edit from its put, as etcd's own
// latency benchmarks do, as well as from the RPC.
std::chrono::steady_clock::time_point LastEditTxnIssued();

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_EDITOR_H_
