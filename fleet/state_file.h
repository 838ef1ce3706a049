// state_dir/fleet.state: the last fleet state this host applied (revision
// and its layers), written durably (base/durable_file.h) after each applied
// revision and read at start, so a host that starts while etcd is
// unreachable serves its last good policy at once. The previous file is kept
// as fleet.state.prev; a damaged file (checked by length and checksum) is
// never used.
#ifndef PVEMU_FLEET_STATE_FILE_H_
#define PVEMU_FLEET_STATE_FILE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pvemu/v1/fleet.pb.h"

namespace pvemu::fleet {

std::string FleetStatePath(const std::string& state_dir);

// The newest good state (fleet.state, else fleet.state.prev); nullopt if
// there is none. Problems with the files go to `warnings`.
std::optional<v1::FleetState> ReadFleetState(const std::string& state_dir,
                                             std::vector<std::string>* warnings);

// All or nothing: on failure the previous file is as it was.
absl::Status WriteFleetState(const std::string& state_dir, const v1::FleetState& state);

}  // namespace pvemu::fleet

#endif  // PVEMU_FLEET_STATE_FILE_H_
