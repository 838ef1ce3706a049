#include "x86/vendor.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pvemu::x86 {
namespace {

struct VendorName {
  Vendor vendor;
  absl::string_view word;
  absl::string_view cpuid;  // CPUID.0: EBX, EDX, ECX as a string
};

constexpr VendorName kVendors[] = {
    {Vendor::kIntel, "intel", "GenuineIntel"},
    {Vendor::kAmd, "amd", "AuthenticAMD"},
    {Vendor::kHygon, "hygon", "HygonGenuine"},
    {Vendor::kCentaur, "centaur", "CentaurHauls"},
    {Vendor::kZhaoxin, "zhaoxin", "  Shanghai  "},
};

}  // namespace

absl::StatusOr<Vendor> ParseVendor(absl::string_view word) {
  std::string lower = absl::AsciiStrToLower(word);
  for (const VendorName& v : kVendors) {
    if (lower == v.word) return v.vendor;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown vendor '", word,
      "'; use one of intel, amd, hygon, centaur, zhaoxin"));
}

absl::string_view VendorWord(Vendor vendor) {
  for (const VendorName& v : kVendors) {
    if (v.vendor == vendor) return v.word;
  }
  return "unspecified";
}

absl::string_view VendorCpuidString(Vendor vendor) {
  for (const VendorName& v : kVendors) {
    if (v.vendor == vendor) return v.cpuid;
  }
  return "";
}

Vendor VendorFromCpuidString(absl::string_view id) {
  for (const VendorName& v : kVendors) {
    if (v.cpuid == id) return v.vendor;
  }
  return Vendor::kUnspecified;
}

}  // namespace pvemu::x86
