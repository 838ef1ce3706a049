#include "hosts/native_cpuid.h"

#include <cpuid.h>

#include <cstring>

#include "policy/vendor_proto.h"
#include "x86/vendor.h"

namespace pvemu::hosts {

emulator::CpuidRegs NativeCpuid(uint32_t leaf, uint32_t subleaf) {
  emulator::CpuidRegs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

pvemu::v1::Vendor VendorFromLeaf0(const emulator::CpuidRegs& leaf0) {
  // The id string is EBX, EDX, ECX in that order ("Genu" "ineI" "ntel").
  char id[12];
  std::memcpy(id + 0, &leaf0.ebx, 4);
  std::memcpy(id + 4, &leaf0.edx, 4);
  std::memcpy(id + 8, &leaf0.ecx, 4);
  return policy::ToProto(x86::VendorFromCpuidString(absl::string_view(id, sizeof(id))));
}

void SetLeaf0VendorString(absl::string_view id, emulator::CpuidRegs* leaf0) {
  char buf[12] = {};
  std::memcpy(buf, id.data(), id.size() < sizeof(buf) ? id.size() : sizeof(buf));
  std::memcpy(&leaf0->ebx, buf + 0, 4);
  std::memcpy(&leaf0->edx, buf + 4, 4);
  std::memcpy(&leaf0->ecx, buf + 8, 4);
}

}  // namespace pvemu::hosts
