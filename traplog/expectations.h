// Replay verdicts: whether an outcome matches what a trap log recorded the
// host doing (a record's v1.Expectation).
#ifndef PVEMU_TRAPLOG_EXPECTATIONS_H_
#define PVEMU_TRAPLOG_EXPECTATIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "emulator/decoder.h"
#include "emulator/trap.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::traplog {

// What a record says the host did: v1.Expectation as a plain struct, for the
// trap path (TrapLogReader::NextTrap, the struct CheckExpectation). Only the
// fields whose has_ flag is set are compared.
struct ExpectedOutcome {
  bool has_kind = false;
  pvemu::v1::Outcome::Kind kind = pvemu::v1::Outcome::KIND_UNSPECIFIED;
  bool has_vector = false;
  pvemu::v1::Vector vector = pvemu::v1::DE;  // EXCEPTION: the vector
  bool has_value = false;
  uint64_t value = 0;  // RDMSR: EDX:EAX; IN: AL/AX/EAX
  bool has_cpuid = false;
  uint32_t cpuid[4] = {};  // CPUID: eax, ebx, ecx, edx

  // Nothing to compare: the record has no expectation, or an empty one.
  bool empty() const { return !has_kind && !has_vector && !has_value && !has_cpuid; }
  friend bool operator==(const ExpectedOutcome&,
                         const ExpectedOutcome&) = default;
};

// The struct form of `expect`: has_kind is kind != KIND_UNSPECIFIED, the
// other has_ flags are the message's presence. Every v1.Expectation converts,
// enum values this schema does not name included.
ExpectedOutcome ExpectedOutcomeFromProto(const pvemu::v1::Expectation& expect);

// Compares `outcome` with what the log expected. Only set fields count:
//   kind    when not KIND_UNSPECIFIED;
//   vector  when set: the outcome must be an EXCEPTION with that vector;
//   value   when set: the outcome must be COMPLETED and the instruction's
//           result must equal it: RDMSR (0f 32) -> EDX:EAX, i.e.
//           (rdx << 32) | (rax & 0xffffffff); IN (e4/e5/ec/ed) -> RAX masked
//           to the operand width;
//   cpuid   when set: the outcome must be COMPLETED with EAX/EBX/ECX/EDX equal.
// Returns OK on a match (and clears *diff). A mismatch returns
// FailedPrecondition whose message, also stored in *diff, reads like
// "expected EXCEPTION #GP, got COMPLETED rax=0x0 rdx=0x0". An expectation that
// cannot be checked (a `value` for an instruction that reads none) is
// InvalidArgument.
//
// The instruction is emulator::Decode's reading of `record.trap` (its bytes
// and mode), so the value's width is the decoder's operand size; when the
// bytes do not decode, `outcome.instruction()` is used instead.
absl::Status CheckExpectation(const pvemu::v1::TrapRecord& record,
                              const pvemu::v1::Outcome& outcome,
                              std::string* diff);

// The same, learning the instruction from `outcome.instruction()` (mnemonic
// and operand size, as the emulator fills them in).
absl::Status CheckExpectation(const pvemu::v1::Expectation& expect,
                              const pvemu::v1::Outcome& outcome,
                              std::string* diff);

// The same on the trap-path structs, for replaying millions of records; it
// allocates nothing on a match. Learns the instruction from `trap` (its
// bytes and mode, through emulator::DecodeInto) only: there is no decoded
// instruction to fall back on when the bytes are not RDMSR, CPUID or IN.
// Otherwise its statuses and messages are the record form's for the
// equivalent messages (one implementation).
absl::Status CheckExpectation(const ExpectedOutcome& expect,
                              const emulator::Trap& trap,
                              const emulator::Outcome& outcome);
// The same, given what the trap path decoded from `trap` (Session::Handle's
// instruction and decode error), so that its bytes are not decoded again.
absl::Status CheckExpectation(const ExpectedOutcome& expect,
                              const emulator::Trap& trap,
                              const emulator::Instruction& decoded,
                              emulator::DecodeError error,
                              const emulator::Outcome& outcome);

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_EXPECTATIONS_H_
