// What a domain's policy does with one MSR access, for `pvemuctl explain` and
// the Explain RPC. Thread-safety: pure functions of an immutable snapshot.
#ifndef PVEMU_POLICY_EXPLAIN_H_
#define PVEMU_POLICY_EXPLAIN_H_

#include <cstdint>
#include <optional>
#include <string>

#include "policy/compile.h"
#include "pvemu/v1/service.pb.h"

namespace pvemu::policy {

struct Explanation {
  uint32_t domain = 0;
  uint32_t msr = 0;
  std::string name;    // catalog name, or ""
  bool write = false;  // access: "write" if true, else "read"
  // "PASSTHROUGH", "CONST", "SHADOW", "ZERO", "GP" or "IGNORE": for a write
  // that changes bits outside writable_mask this is the resulting GP/IGNORE.
  std::string action;
  // The value read (CONST, ZERO) or the register's new value after a write
  // (SHADOW/PASSTHROUGH), when known without a host.
  std::optional<uint64_t> value;
  std::string layer;    // "default", "domain", "unknown-msr" or "vpmu-off"
  std::string source;   // "FILE:LINE" of the deciding rule
  std::string comment;  // the deciding rule's comment
  bool unknown = false;  // no rule names this MSR
  std::string detail;    // one sentence for people
  // Set when an I/O port was explained (msr and name are then unused).
  std::optional<uint16_t> port;
  uint8_t width = 0;  // the port access's bytes
  // LEARN mode: the action the guest gets while learning when it differs
  // from `action`, the enforcing one ("ZERO", "IGNORE", "DEVICE"); "" if not.
  std::string learning_action;
  const char* access() const { return write ? "write" : "read"; }
};

// Explains a read (no write_value) or a write of `*write_value`, as ENFORCE
// answers it; in a LEARN domain, learning_action and detail also say how the
// access is answered while learning.
Explanation ExplainMsr(const Snapshot& snapshot, uint32_t domain, uint32_t msr,
                       std::optional<uint64_t> write_value = std::nullopt);
// As ENFORCE answers it, whatever the domain's mode (no learning note).
Explanation ExplainEnforcedMsr(const Snapshot& snapshot, uint32_t domain, uint32_t msr,
                               std::optional<uint64_t> write_value = std::nullopt);

// Explains an IN (no write_value) or OUT of `width` bytes (1, 2 or 4) at
// `port`, as the trap path decides it (DomainSnapshot::PortAllowed): action
// "DEVICE" when the domain's io_port ranges grant every byte (the access goes
// to a device the host models there, else to the trap source's device
// model), "FLOAT" when not (IN reads all ones, OUT is dropped; value says
// what IN reads). layer/source name the granting range.
Explanation ExplainPort(const Snapshot& snapshot, uint32_t domain, uint16_t port, uint8_t width,
                        std::optional<uint64_t> write_value = std::nullopt);

// The Explain answer for an explanation of `snapshot`: the daemon's Explain
// RPC and pvemuctl's offline explain both print these fields.
void ExplanationToProto(const Explanation& e, const Snapshot& snapshot,
                        v1::ExplainResponse* response);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_EXPLAIN_H_
