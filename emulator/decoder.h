// The x86 decoder for the privileged instructions a PV guest traps on.
//
// Decode() recognises exactly the instructions in InsnKind (instruction.h) in
// real, 16-, 32- and 64-bit mode, with any legacy prefixes, REX, and the
// ModRM/SIB/displacement forms of LMSW and INVLPG. Everything else is
// reported as kNotPrivileged: pvemu does not emulate it.
//
// The decoder runs on the trap path: it never allocates, never reads past
// `len` (nor past 15 bytes), and is thread-safe (it has no state).
//
// Decisions where the SDM leaves a choice (documented in decoder.cc):
// - LOCK on any recognised instruction is #UD, including LOCK MOV CR0, which
//   AMD CPUs with AltMovCr8 treat as MOV CR8: the decoder does not know the
//   vendor, and PV guests access the TPR through the hypervisor.
// - F3 0F 09 is WBNOINVD (SDM); CPUs without it run it as WBINVD, and both
//   are privileged.
#ifndef PVEMU_EMULATOR_DECODER_H_
#define PVEMU_EMULATOR_DECODER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "emulator/trap.h"
#include "emulator/instruction.h"

namespace pvemu::v1 {
class Instruction;
}  // namespace pvemu::v1

namespace pvemu::emulator {

enum class DecodeError : uint8_t {
  kOk = 0,
  // The bytes end before the instruction does. No exception: the trap source
  // fetched too little (the CPU itself would have had the whole instruction).
  kTruncated,
  // Prefixes plus instruction exceed 15 bytes: #GP(0).
  kTooLong,
  // A LOCK prefix (F0) on an instruction that does not accept it: #UD.
  kLockPrefix,
  // The instruction does not exist in this mode (SWAPGS outside 64-bit): #UD.
  kInvalidInMode,
  // MOV to or from CR1, CR5-CR7, CR9-CR15, or DR8-DR15 (REX.R): #UD.
  kInvalidRegister,
  // A 66/F2/F3 prefix on an instruction the SDM marks NP (XSETBV): #UD.
  kInvalidPrefix,
  // Not one of the privileged instructions pvemu emulates. No exception.
  kNotPrivileged,
};

struct DecodeResult {
  DecodeError error = DecodeError::kOk;
  // Errors: the byte offset at which decoding failed (the missing byte for
  // kTruncated, the 16th byte for kTooLong, the opcode otherwise).
  uint8_t error_offset = 0;
  Instruction insn;  // meaningful only when ok()

  bool ok() const { return error == DecodeError::kOk; }
};

// Decodes the instruction at bytes[0..len) in `mode`. Reads at most
// min(len, 15) bytes.
DecodeResult Decode(const uint8_t* bytes, size_t len, Mode mode);

// The same for the trap path: writes the instruction into *insn on success
// (a default Instruction{} otherwise, never half of one) and the failing
// byte offset into *error_offset on error, so the caller's Instruction is
// filled in place rather than copied out of a returned DecodeResult.
DecodeError DecodeInto(const uint8_t* bytes, size_t len, Mode mode,
                       Instruction* insn, uint8_t* error_offset);

// A sentence saying what is wrong, Zydis-style: "The instruction exceeded the
// maximum length of 15 bytes."
absl::string_view DecodeErrorMessage(DecodeError error);

// The exception a CPU raises for this decode error. Returns false for errors
// that have none (kOk, kTruncated, kNotPrivileged).
bool DecodeErrorVector(DecodeError error, Vector* vector);

// The Intel SDM mnemonic in lower case as disassemblers print it ("rdmsr",
// "in", "insd", "mov" for MOV CR/DR).
absl::string_view Mnemonic(const Instruction& insn);
absl::string_view KindMnemonic(InsnKind kind);

// For callers off the trap path (pvemuctl decode, the server's detail
// strings): OK for a successful decode, otherwise InvalidArgument (OutOfRange
// for kTruncated) naming the error, the byte offset and what to do.
absl::Status DecodeStatus(const DecodeResult& result);

// Fills the descriptive message (mnemonic, length, sizes, operands).
void InstructionToProto(const Instruction& insn, pvemu::v1::Instruction* msg);

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_DECODER_H_
