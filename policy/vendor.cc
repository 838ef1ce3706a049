#include "policy/vendor.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pvemu::policy {
namespace {

struct VendorName {
  pvemu::v1::Vendor vendor;
  absl::string_view word;
  absl::string_view cpuid;  // CPUID.0: EBX, EDX, ECX as a string
};

constexpr VendorName kVendors[] = {
    {pvemu::v1::INTEL, "intel", "GenuineIntel"},
    {pvemu::v1::AMD, "amd", "AuthenticAMD"},
    {pvemu::v1::HYGON, "hygon", "HygonGenuine"},
    {pvemu::v1::CENTAUR, "centaur", "CentaurHauls"},
    {pvemu::v1::ZHAOXIN, "zhaoxin", "  Shanghai  "},
};

}  // namespace

absl::StatusOr<pvemu::v1::Vendor> ParseVendor(absl::string_view word) {
  std::string lower = absl::AsciiStrToLower(word);
  for (const VendorName& v : kVendors) {
    if (lower == v.word) return v.vendor;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown vendor '", word,
      "'; use one of intel, amd, hygon, centaur, zhaoxin"));
}

absl::string_view VendorWord(pvemu::v1::Vendor vendor) {
  for (const VendorName& v : kVendors) {
    if (v.vendor == vendor) return v.word;
  }
  return "unspecified";
}

absl::string_view VendorCpuidString(pvemu::v1::Vendor vendor) {
  for (const VendorName& v : kVendors) {
    if (v.vendor == vendor) return v.cpuid;
  }
  return "";
}

pvemu::v1::Vendor VendorFromCpuidString(absl::string_view id) {
  for (const VendorName& v : kVendors) {
    if (v.cpuid == id) return v.vendor;
  }
  return pvemu::v1::VENDOR_UNSPECIFIED;
}

}  // namespace pvemu::policy
