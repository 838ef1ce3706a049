// The policy as the emulator sees it for one domain: decisions, not rules.
// The emulator never sees rules or files; dispatch/ implements this view
// on a compiled policy snapshot, emulator tests implement it with a fake.
#ifndef PVEMU_EMULATOR_DOMAIN_H_
#define PVEMU_EMULATOR_DOMAIN_H_

#include <cstdint>

#include "emulator/host.h"

namespace pvemu::emulator {

// Values equal pvemu.v1.ReadAction.Action / WriteAction.Action, so a compiled
// policy entry converts without a table. Any other value (0, "unspecified",
// never survives compilation) is treated as kGp.
enum class MsrRead : uint8_t { kPassthrough = 1, kConst = 2, kShadow = 3, kZero = 4, kGp = 5 };
enum class MsrWrite : uint8_t { kPassthrough = 1, kShadow = 2, kIgnore = 3, kGp = 4 };

// The final decision for one MSR in one domain, as compiled from the policy.
struct MsrDecision {
  MsrRead read = MsrRead::kGp;
  MsrWrite write = MsrWrite::kGp;
  // A write changing a bit outside writable_mask: true drops the whole write
  // (instruction completes), false injects #GP(0).
  bool drop_reserved = false;
  // PASSTHROUGH writes reach the host only if the rule allows it AND the
  // daemon was started with host writes enabled; otherwise they #GP.
  bool host_write_allowed = false;
  bool audit = false;
  bool unknown = false;   // from the unknown-MSR mode, not a rule
  uint64_t value = 0;     // CONST value; SHADOW initial value
  bool value_from_host = false;  // SHADOW with no initial value: host's value
  uint64_t writable_mask = ~uint64_t{0};
};

// Thread-safe for concurrent traps on different vCPUs; one vCPU traps serially.
// Nothing here allocates.
class Domain {
 public:
  virtual ~Domain() = default;

  virtual const MsrDecision& Msr(uint32_t index) const = 0;

  // The per-vCPU virtual register for a SHADOW MSR. Returns nullptr if no
  // storage exists for it (the emulator then treats the access as #GP).
  // *fresh is set when the register has never been written or read.
  virtual uint64_t* Shadow(uint32_t vcpu, uint32_t index, bool* fresh) = 0;

  // CPUID as this domain sees it (may consult the host).
  virtual CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf, Host& host) const = 0;

  // The guest TSC for a host TSC reading.
  virtual uint64_t GuestTsc(uint64_t host_tsc, const Host& host) const = 0;

  // Whether the domain may access `width` bytes at `port`.
  virtual bool PortAllowed(uint16_t port, uint8_t width) const = 0;

  virtual bool vpmu() const = 0;
};

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_DOMAIN_H_
