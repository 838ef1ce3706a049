// CPU vendor names: command-line words, CPUID vendor strings and the enum.
#ifndef PVEMU_POLICY_VENDOR_H_
#define PVEMU_POLICY_VENDOR_H_

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::policy {

// "intel", "AMD", "Hygon", ... (case-insensitive). InvalidArgument lists the
// accepted words.
absl::StatusOr<pvemu::v1::Vendor> ParseVendor(absl::string_view word);

// Lower-case word for the enum: "intel"; "unspecified" for VENDOR_UNSPECIFIED.
absl::string_view VendorWord(pvemu::v1::Vendor vendor);

// The 12-byte CPUID leaf 0 identification string ("GenuineIntel") of a vendor,
// and back (VENDOR_UNSPECIFIED for strings no vendor uses).
absl::string_view VendorCpuidString(pvemu::v1::Vendor vendor);
pvemu::v1::Vendor VendorFromCpuidString(absl::string_view id);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_VENDOR_H_
