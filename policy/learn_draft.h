// Drafting the rules a learning domain needs (`pvemuctl suggest` on learned
// evidence): from the accesses a LEARN domain made that ENFORCE would fault
// or deny (a capture's relaxed records, or pvemud's learned list), one
// `domain { }` layer per domain whose rules make exactly those accesses
// complete as they did while learning, and nothing else:
//   - an MSR read: `read: ZERO`, an MSR write: `write: IGNORE` (one rule per
//     MSR, both halves when both were seen), as UNKNOWN_RELAXED answered;
//   - ports: io_port ranges covering every byte of each access (a 32-bit IN
//     at 0x510 needs 0x510-0x513), adjacent and overlapping spans merged.
// Accesses the policy already allowed need no rule and are never handed
// here; MSRs never touched keep their fault. The layer has no `mode` line.
// Comments say how often each access was seen and where first.
//
// Plain observations in: no emulator, no trap-log reader.
// Thread-safety: a LearnedDrafter is not thread-safe.
#ifndef PVEMU_POLICY_LEARN_DRAFT_H_
#define PVEMU_POLICY_LEARN_DRAFT_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "pvemu/v1/policy.pb.h"

namespace pvemu::policy {

// One relaxed access (or `count` of the same).
struct RelaxedAccess {
  enum class Kind { kMsrRead, kMsrWrite, kPortIn, kPortOut };
  uint32_t domain = 0;
  Kind kind = Kind::kMsrRead;
  uint32_t index = 0;  // the MSR, or the first port
  uint8_t width = 1;   // ports: bytes (1, 2 or 4)
  uint64_t count = 1;
  std::string first;   // where the first was seen: "FILE record N, rip 0x..."
};

class LearnedDrafter {
 public:
  void Add(const RelaxedAccess& access);
  bool empty() const { return seen_.empty(); }
  size_t accesses() const { return seen_.size(); }

  // One layer per domain seen, by domain id; empty policy when nothing was
  // seen. Each layer is exactly what the domain needs on top of the policy
  // it learned under.
  pvemu::v1::Policy Draft() const;

 private:
  struct Seen {
    uint64_t count = 0;
    std::string first;
  };
  // (domain, kind, index, width) -> what was seen.
  std::map<std::tuple<uint32_t, RelaxedAccess::Kind, uint32_t, uint8_t>, Seen> seen_;
};

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_LEARN_DRAFT_H_
