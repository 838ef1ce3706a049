// CPUID on the CPU the calling thread runs on, shared by the linux and xen
// backends.
#ifndef PVEMU_HOSTS_NATIVE_CPUID_H_
#define PVEMU_HOSTS_NATIVE_CPUID_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "emulator/host.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::hosts {

// Executes CPUID(leaf, subleaf). Allocates nothing, thread-safe.
emulator::CpuidRegs NativeCpuid(uint32_t leaf, uint32_t subleaf);

// The vendor named by CPUID leaf 0 registers (EBX, EDX, ECX), or
// VENDOR_UNSPECIFIED for strings no known vendor uses.
pvemu::v1::Vendor VendorFromLeaf0(const emulator::CpuidRegs& leaf0);

// Fills EBX, EDX, ECX of leaf 0 with a 12-byte vendor id string.
void SetLeaf0VendorString(absl::string_view id, emulator::CpuidRegs* leaf0);

}  // namespace pvemu::hosts

#endif  // PVEMU_HOSTS_NATIVE_CPUID_H_
