// Hex strings of instruction bytes, as operators type them ("0f 32", "0F32").
#ifndef PVEMU_CLIENT_HEX_H_
#define PVEMU_CLIENT_HEX_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "emulator/trap.h"

namespace pvemu::client {

// Bytes from hex digits; spaces, tabs and an optional 0x prefix are allowed.
// InvalidArgument names the offending character's position (up to 64 bytes: the decoder itself reports over-long ones).
absl::StatusOr<std::string> ParseHexBytes(absl::string_view text);

// --mode=64|32|16|real.
absl::StatusOr<emulator::Mode> ParseModeFlag();

}  // namespace pvemu::client

#endif  // PVEMU_CLIENT_HEX_H_
