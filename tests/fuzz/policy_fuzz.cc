// Fuzz body for the policy loader: bytes -> text-format parse -> validation ->
// compilation for every vendor -> a few lookups. Must not crash or hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include "policy/compile.h"
#include "policy/explain.h"
#include "policy/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // big inputs only slow the search down
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<pvemu::policy::LoadedPolicy> loaded =
      pvemu::policy::ParsePolicy(text, "fuzz.textproto");
  if (!loaded.ok()) return 0;
  for (pvemu::v1::Vendor v : {pvemu::v1::INTEL, pvemu::v1::AMD, pvemu::v1::HYGON}) {
    auto snap = pvemu::policy::CompilePolicy(loaded->policy, loaded->source, v, 1);
    if (!snap.ok()) __builtin_trap();  // validated policies must compile
    for (uint32_t dom : {0u, 1u, 7u}) {
      const pvemu::policy::DomainSnapshot& d = (*snap)->ForDomain(dom);
      for (uint32_t msr : {0x0u, 0x1b0u, 0x19au, 0xc0010061u, 0xffffffffu}) {
        (void)d.Lookup(msr);
        (void)pvemu::policy::ExplainMsr(**snap, dom, msr, 0x1234);
      }
      (void)d.PortAllowed(0xfffe, 4);
      (void)d.Cpuid(0, 0);
    }
  }
  return 0;
}
