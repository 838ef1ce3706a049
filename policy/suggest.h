// Drafting a policy from what a host was seen doing (`pvemuctl suggest`):
// the caller reads its captures (trap logs) and hands over every RDMSR and
// WRMSR it finds as an MsrAccess; the draft gives each domain seen a layer
// with one rule per MSR that reproduces what the host did. A draft is for
// people to review before they apply it.
//
// Plain observations in, so this library needs neither the emulator nor
// the trap-log reader (DESIGN.md: policy never includes the emulator).
//
// Thread-safety: a PolicyDrafter is not; DraftPolicy has no shared state.
#ifndef PVEMU_POLICY_SUGGEST_H_
#define PVEMU_POLICY_SUGGEST_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/types/span.h"
#include "pvemu/v1/policy.pb.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::policy {

// One RDMSR or WRMSR and how the host answered it.
struct MsrAccess {
  enum class Outcome {
    kUnknown,    // the capture does not say
    kCompleted,  // the access completed
    kException,  // the host raised an exception
  };
  uint32_t domain = 0;
  uint32_t msr = 0;
  bool write = false;
  Outcome outcome = Outcome::kUnknown;
  std::optional<pvemu::v1::Vector> vector;  // kException: the vector, if known
  std::optional<uint64_t> value;            // a read: the value returned, if known
  std::string source;                       // where it was seen: "FILE:LINE"
};

// What was seen of the reads (or the writes) of one MSR in one domain.
struct AccessSummary {
  uint64_t count = 0;
  std::string first_source;
  // The host's answers with how often each came: "#GP" (an exception),
  // "read 0x5" (a read's value), "completed", "unknown" (no answer logged).
  std::map<std::string, uint64_t> answers;
  bool faulted = false;                // the host answered #GP at least once
  std::optional<uint64_t> last_value;  // reads: the last value returned
};

// The rule drafted for one MSR in one domain, and what it was drafted from.
struct DraftedRule {
  uint32_t domain = 0;
  uint32_t msr = 0;
  std::optional<AccessSummary> reads;   // unset: never read
  std::optional<AccessSummary> writes;  // unset: never written
  // `msr` by catalog name (else "0x..."); read: GP if the host ever faulted
  // a read, else CONST with the last value read when known and not 0, else
  // ZERO; write: GP if the host ever faulted a write, else IGNORE; a
  // half never seen is left unset. `comment` says what was seen.
  pvemu::v1::MsrRule rule;
};

// Collects accesses one at a time (memory grows with the distinct MSRs, not
// with the log) and drafts from what it has.
class PolicyDrafter {
 public:
  void Add(const MsrAccess& access);

  // One rule per (domain, MSR) seen, by domain then MSR.
  std::vector<DraftedRule> Rules() const;

  // A domain layer per domain seen, by domain id, holding that domain's
  // rules; no default layer (the draft is an overlay). Nothing seen: an
  // empty policy. The draft always validates (ValidatePolicy).
  pvemu::v1::Policy Draft() const;

 private:
  // (domain, msr, write) -> what was seen.
  std::map<std::tuple<uint32_t, uint32_t, bool>, AccessSummary> seen_;
};

// The policy a PolicyDrafter drafts from `accesses`.
pvemu::v1::Policy DraftPolicy(absl::Span<const MsrAccess> accesses);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_SUGGEST_H_
