// Fleet mode's layer composition: the host's base policy and its fleet
// layers at one etcd revision, composed into the one pvemu.v1.Policy the
// Store validates and compiles for this host's vendor.
//
// Precedence, lowest first: the base policy (--policy or the shipped
// default), the fleet default, the host's classes (peers: in no order), the
// host's layer, its domain overlay keys. Each layer's `default { }` merges
// into the composed default layer and each `domain { domain: N }` into the
// composed overlay of domain N (the domain keys hold only that overlay).
// Rules: a layer that has rules for an MSR (or a range) replaces what the
// layers below say about it and about every MSR and narrower range inside
// it, for each half (read, write) its rules decide, whatever their
// conditions: write every case you need in that layer. Rules for another
// host vendor are left out (the host compiles for its own). Rules that only
// partly overlap keep both, and specificity decides between them exactly as
// within one policy file (two that tie are an error naming both keys and
// lines). Layer-wide settings (unknown_msr,
// tsc, vpmu, hardware_domain, guest_vendor, mode) come from the highest layer
// that sets them; CPUID entries replace by (leaf, subleaf); port ranges add.
//
// Two classes of the host that decide the same rule (target and
// conditions) or the same setting differently tie: an error naming both
// keys, because neither is above the other.
//
// Thread-safety: free functions without shared state.
#ifndef PVEMU_FLEET_COMPOSE_H_
#define PVEMU_FLEET_COMPOSE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "policy/loader.h"
#include "pvemu/v1/fleet.pb.h"
#include "fleet/keys.h"

namespace pvemu::fleet {

// Layers by their full etcd key, values as stored.
using LevelSet = std::map<std::string, std::string>;

// Parses and validates one layer's value on its own (errors read
// "KEY:LINE:COL: message"), and checks its shape: a domain key holds
// exactly one `domain { domain: N ... }` overlay and nothing else.
absl::StatusOr<policy::LoadedPolicy> ParseLevelValue(const std::string& key,
                                                     const LevelName& layer,
                                                     absl::string_view value);

// The composed policy, with positions that point into each layer's key.
// `host_vendor` UNSPECIFIED keeps the rules of every vendor.
absl::StatusOr<policy::LoadedPolicy> Compose(const policy::LoadedPolicy& base,
                                             const FleetKeys& keys, const LevelSet& layers,
                                             v1::Vendor host_vendor);

// A composition or compilation failure as the key at fault, the line in its
// value and the message. `keys` are the keys the failure may name (the
// first "KEY:LINE" of the message that starts with one of them wins).
v1::FleetError ErrorOf(const absl::Status& status, const LevelSet& layers);

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_COMPOSE_H_
