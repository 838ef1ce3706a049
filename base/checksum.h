// FNV-1a (64-bit): the checksum in the header line of pvemu's state files
// (policy.textproto, fleet.state), which lets a reader tell a whole file
// from a truncated or foreign one. Not cryptographic; speed and stability
// across versions are what matter.
#ifndef PVEMU_BASE_CHECKSUM_H_
#define PVEMU_BASE_CHECKSUM_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace pvemu::base {

inline uint64_t Fnv1a64(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace pvemu::base

#endif  // PVEMU_BASE_CHECKSUM_H_
