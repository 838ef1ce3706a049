// The MSR catalog: names <-> indices for architectural and model-specific MSRs
// of Intel and AMD, as the Intel SDM, the AMD APM, Xen and Linux name them. One
// data table (catalog.cc); lookups are case-insensitive. Everything here is
// immutable after first use and safe to call from any thread.
#ifndef PVEMU_X86_MSR_CATALOG_H_
#define PVEMU_X86_MSR_CATALOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "x86/vendor.h"

namespace pvemu::x86 {

// Vendor bits of MsrInfo::vendors.
inline constexpr uint32_t kVendorIntel = 1u << 0;
inline constexpr uint32_t kVendorAmd = 1u << 1;
inline constexpr uint32_t kVendorHygon = 1u << 2;
inline constexpr uint32_t kVendorCentaur = 1u << 3;
inline constexpr uint32_t kVendorZhaoxin = 1u << 4;

// The bit of one vendor; 0 for Vendor::kUnspecified.
uint32_t VendorBit(Vendor vendor);

// Bits of MsrInfo::headers: which operating system's msr-index.h defines
// the row's name (Linux arch/x86/include/asm/msr-index.h, Xen
// xen/arch/x86/include/asm/msr-index.h). 0 for names taken from the Intel SDM,
// the AMD APM/BKDGs/PPRs or other sources.
inline constexpr uint32_t kNameFromLinux = 1u << 0;
inline constexpr uint32_t kNameFromXen = 1u << 1;

// One catalog row. An index may have several rows (aliases: "IA32_EFER" and
// "MSR_EFER"); the first is canonical: the SDM/APM name where there is one,
// else the Linux or Xen name.
struct MsrInfo {
  uint32_t index;
  absl::string_view name;
  uint32_t vendors;      // kVendor* bits of the CPUs that implement it
  uint32_t headers = 0;  // kNameFrom* bits: where the name comes from
};

// Every row, in table order.
absl::Span<const MsrInfo> MsrCatalog();

// Every row of an index, canonical first; empty for an unknown index.
std::vector<const MsrInfo*> MsrRows(uint32_t index);

// The canonical row of an index, or nullptr.
const MsrInfo* FindMsr(uint32_t index);

// Whether the catalog says CPUs of `vendor` implement `index` (false for
// indices the catalog does not know).
bool MsrExistsOn(uint32_t index, Vendor vendor);

// Index of a catalog name ("IA32_ENERGY_PERF_BIAS", any case).
std::optional<uint32_t> MsrIndexByName(absl::string_view name);

// The catalog name of an index, or "" if the catalog has none.
absl::string_view MsrName(uint32_t index);

// "IA32_ENERGY_PERF_BIAS (0x1b0)", or "0x1b0" for an index without a name.
std::string MsrDisplay(uint32_t index);

// The catalog name closest to `word` by edit distance (case-insensitive).
absl::string_view NearestMsrName(absl::string_view word);

// A name or a number ("0x1b0", "432"). InvalidArgument otherwise, naming the
// nearest catalog name when the word looks like a misspelt one.
absl::StatusOr<uint32_t> ParseMsr(absl::string_view name_or_number);

}  // namespace pvemu::x86

#endif  // PVEMU_X86_MSR_CATALOG_H_
