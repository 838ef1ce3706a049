// The MSR catalog: names <-> indices for architectural and model-specific MSRs
// of Intel and AMD, as the Intel SDM, the AMD APM and Linux name them. One data
// table (catalog.cc); lookups are case-insensitive.
#ifndef PVEMU_POLICY_CATALOG_H_
#define PVEMU_POLICY_CATALOG_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pvemu::policy {

// Index of a catalog name ("IA32_ENERGY_PERF_BIAS", any case).
std::optional<uint32_t> MsrIndexByName(absl::string_view name);

// The catalog name of an index, or "" if the catalog has none.
absl::string_view MsrName(uint32_t index);

// A name or a number ("0x1b0", "432"). InvalidArgument otherwise, naming the
// nearest catalog name when the word looks like a misspelt one.
absl::StatusOr<uint32_t> ParseMsr(absl::string_view name_or_number);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_CATALOG_H_
