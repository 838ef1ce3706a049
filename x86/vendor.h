// CPU vendors: the command-line words, the CPUID leaf 0 identification
// strings, and the enum the rest of pvemu converts to and from its schema
// (policy/vendor_proto.h). Pure data; safe from any thread.
#ifndef PVEMU_X86_VENDOR_H_
#define PVEMU_X86_VENDOR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pvemu::x86 {

// The numbers equal pvemu.v1.Vendor's (checked in policy/vendor_proto.h).
enum class Vendor : uint8_t {
  kUnspecified = 0,  // no condition / not known
  kIntel = 1,        // "GenuineIntel"
  kAmd = 2,          // "AuthenticAMD"
  kHygon = 3,        // "HygonGenuine"
  kCentaur = 4,      // "CentaurHauls"
  kZhaoxin = 5,      // "  Shanghai  "
};

// "intel", "AMD", "Hygon", ... (case-insensitive). InvalidArgument lists the
// accepted words.
absl::StatusOr<Vendor> ParseVendor(absl::string_view word);

// Lower-case word for the enum: "intel"; "unspecified" for kUnspecified.
absl::string_view VendorWord(Vendor vendor);

// The 12-byte CPUID leaf 0 identification string ("GenuineIntel") of a
// vendor (EBX, EDX, ECX in that order), and back (kUnspecified for strings no
// vendor uses).
absl::string_view VendorCpuidString(Vendor vendor);
Vendor VendorFromCpuidString(absl::string_view id);

}  // namespace pvemu::x86

#endif  // PVEMU_X86_VENDOR_H_
