// x86::Vendor <-> pvemu.v1.Vendor. The two enums share their numbers, so a
// conversion is a cast; the asserts below keep it that way.
#ifndef PVEMU_POLICY_VENDOR_PROTO_H_
#define PVEMU_POLICY_VENDOR_PROTO_H_

#include "pvemu/v1/policy.pb.h"
#include "x86/vendor.h"

namespace pvemu::policy {

static_assert(static_cast<int>(x86::Vendor::kUnspecified) == v1::VENDOR_UNSPECIFIED);
static_assert(static_cast<int>(x86::Vendor::kIntel) == v1::INTEL);
static_assert(static_cast<int>(x86::Vendor::kAmd) == v1::AMD);
static_assert(static_cast<int>(x86::Vendor::kHygon) == v1::HYGON);
static_assert(static_cast<int>(x86::Vendor::kCentaur) == v1::CENTAUR);
static_assert(static_cast<int>(x86::Vendor::kZhaoxin) == v1::ZHAOXIN);
static_assert(v1::Vendor_MAX == v1::ZHAOXIN, "a new pvemu.v1.Vendor needs an x86::Vendor");

inline v1::Vendor ToProto(x86::Vendor vendor) { return static_cast<v1::Vendor>(vendor); }
// Numbers the schema does not define (a newer peer's) map to kUnspecified.
inline x86::Vendor FromProto(v1::Vendor vendor) {
  return v1::Vendor_IsValid(vendor) ? static_cast<x86::Vendor>(vendor) : x86::Vendor::kUnspecified;
}

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_VENDOR_PROTO_H_
