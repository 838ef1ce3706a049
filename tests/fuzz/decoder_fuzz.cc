// Fuzz body for the decoder. Input: first byte selects the mode (low two
// bits), the rest are instruction bytes. Besides not crashing, checks the
// decoder's contracts and aborts on a violation:
// - never reads past len (the sanitizers see the exact-size buffer);
// - success: 1 <= length <= min(len, 15), a known mnemonic, and the same
//   result when given exactly `length` bytes; one byte fewer is a truncated
//   fetch;
// - errors: the offset is within the 15-byte window, and truncation is only
//   reported when fewer than 15 bytes were given.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "emulator/decoder.h"

namespace {

using pvemu::emulator::Decode;
using pvemu::emulator::DecodeError;
using pvemu::emulator::DecodeErrorMessage;
using pvemu::emulator::DecodeResult;
using pvemu::emulator::Mode;

void Require(bool ok) {
  if (!ok) std::abort();
}

DecodeResult DecodeCopy(const uint8_t* bytes, size_t len, Mode mode) {
  // An exact-size heap copy, so a read past `len` is a sanitizer report.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[len == 0 ? 1 : len]);
  if (len > 0) std::memcpy(copy.get(), bytes, len);
  return Decode(len == 0 ? nullptr : copy.get(), len, mode);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Mode mode = static_cast<Mode>(data[0] & 3);
  const uint8_t* bytes = data + 1;
  const size_t len = size - 1;
  const DecodeResult r = DecodeCopy(bytes, len, mode);
  Require(!DecodeErrorMessage(r.error).empty());
  if (r.ok()) {
    const size_t n = r.insn.length;
    Require(n >= 1 && n <= 15 && n <= len);
    Require(r.insn.opcode_offset < n);
    Require(!pvemu::emulator::Mnemonic(r.insn).empty());
    Require(r.insn.operand_size == 8 || r.insn.operand_size == 16 ||
            r.insn.operand_size == 32 || r.insn.operand_size == 64);
    const DecodeResult exact = DecodeCopy(bytes, n, mode);
    Require(exact.ok() && exact.insn.length == n &&
            exact.insn.kind == r.insn.kind);
    const DecodeResult shorter = DecodeCopy(bytes, n - 1, mode);
    Require(shorter.error == DecodeError::kTruncated);
  } else {
    Require(r.error_offset <= 15);
    if (r.error == DecodeError::kTruncated) {
      Require(len < 15 && r.error_offset == len);
    }
    if (r.error == DecodeError::kTooLong) Require(r.error_offset == 15);
  }
  return 0;
}
