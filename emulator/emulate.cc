#include "emulator/emulate.h"

#include "emulator/emulate_inl.h"

namespace pvemu::emulator {

Outcome Emulate(const Trap& trap, const Instruction& insn, Domain& domain,
                Host& host) {
  Outcome out;
  internal::EmulateInto(trap, insn, domain, host, &out);
  return out;
}

Outcome DecodeAndEmulate(const Trap& trap, Domain& domain, Host& host,
                         Instruction* decoded_out, DecodeError* error_out) {
  return DecodeAndEmulateWith(trap, domain, host, decoded_out, error_out);
}

}  // namespace pvemu::emulator
