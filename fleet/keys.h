// Fleet mode's names: the --fleet URL, the etcd keys under its prefix, and
// the layer names operators use (`--layer=default|class:NAME|host:ID`).
//
//   PREFIX/policy/default               the fleet default
//   PREFIX/policy/class/NAME            a host class's layer
//   PREFIX/policy/host/ID               a host's layer
//   PREFIX/policy/host/ID/domain/N      a domain overlay on that host
//   PREFIX/hosts/ID                     a host's registration (no lease)
//   PREFIX/status/ID                    a host's status (under a lease)
//
// Thread-safety: immutable values; free functions without state.
#ifndef PVEMU_FLEET_KEYS_H_
#define PVEMU_FLEET_KEYS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pvemu::fleet {

// etcd://HOST:PORT[,HOST:PORT...][/PREFIX]
struct FleetUrl {
  std::vector<std::string> endpoints;  // "HOST:PORT"
  std::string prefix = "/pvemu";       // with its leading slash, no trailing one
  std::string ToString() const;        // the URL again
  std::string EndpointList() const;    // "HOST:PORT,HOST:PORT"
};
absl::StatusOr<FleetUrl> ParseFleetUrl(absl::string_view url);

// A host id or class name: letters, digits, '.', '_', '-' (they become
// one path segment of a key, so never '/').
absl::Status CheckName(absl::string_view name, absl::string_view what);

// The key just past every key that starts with `prefix` (etcd's range_end
// for a prefix read or watch).
std::string PrefixEnd(absl::string_view prefix);

// One level of the fleet's policy: one key in etcd holding a policy value (the
// command line and the API call it a layer: `pvemuctl fleet --layer=`). A
// "layer" in the code is a policy's `default` or `domain` layer.
struct LevelName {
  enum Kind { kDefault, kClass, kHost, kHostDomain };
  Kind kind = kDefault;
  std::string name;     // class name or host id
  uint32_t domain = 0;  // kHostDomain
  // "default", "class:NAME", "host:ID", "host:ID/domain:N"
  std::string ToString() const;
  bool operator==(const LevelName& o) const {
    return kind == o.kind && name == o.name && domain == o.domain;
  }
};
absl::StatusOr<LevelName> ParseLevelName(absl::string_view text);

// The keys of one fleet (one prefix) as seen by one host.
class FleetKeys {
 public:
  FleetKeys(std::string prefix, std::string host_id, std::vector<std::string> classes)
      : prefix_(std::move(prefix)), host_id_(std::move(host_id)), classes_(std::move(classes)) {}

  const std::string& prefix() const { return prefix_; }
  const std::string& host_id() const { return host_id_; }
  const std::vector<std::string>& classes() const { return classes_; }

  std::string Level(const LevelName& level) const;
  std::string Default() const { return prefix_ + "/policy/default"; }
  std::string Class(absl::string_view name) const;
  std::string Host(absl::string_view id) const;
  // "PREFIX/policy/host/ID/domain/": every domain overlay of a host.
  std::string HostDomainPrefix(absl::string_view id) const;
  std::string ClassPrefix() const { return prefix_ + "/policy/class/"; }
  // "PREFIX/policy/": every layer of the fleet, all hosts' and classes'.
  std::string PolicyPrefix() const { return prefix_ + "/policy/"; }
  std::string Registration(absl::string_view id) const;
  std::string Status(absl::string_view id) const;
  std::string RegistrationPrefix() const { return prefix_ + "/hosts/"; }
  std::string StatusPrefix() const { return prefix_ + "/status/"; }

  // A key or a key range [key, range_end) this host reads and watches.
  struct Watched {
    std::string key;
    std::string range_end;  // "" for the key alone
  };
  // Exactly this host's layer keys: the fleet default, each of its classes,
  // its own key, and the range of its domain overlays. Exact keys, so that
  // host h1 never sees host h10's layer.
  std::vector<Watched> HostKeys() const;

  // The layer `key` is for this host, or nullopt if it is not one of this
  // host's keys (another host's, another class's, or not a layer key).
  std::optional<LevelName> Classify(absl::string_view key) const;
  // The layer any well-formed layer key names (for edits and status).
  std::optional<LevelName> LayerOfKey(absl::string_view key) const;

 private:
  std::string prefix_;
  std::string host_id_;
  std::vector<std::string> classes_;
};

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_KEYS_H_
