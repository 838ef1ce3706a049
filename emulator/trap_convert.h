// Conversions between the trap-path structs (emulator/trap.h) and the
// pvemu.v1 messages that travel over gRPC and live in trap logs.
#ifndef PVEMU_EMULATOR_TRAP_CONVERT_H_
#define PVEMU_EMULATOR_TRAP_CONVERT_H_

#include "absl/status/statusor.h"
#include "emulator/trap.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::emulator {

// Fails with InvalidArgument if the message cannot be a trap: more than 15
// instruction bytes, CPL above 3.
absl::StatusOr<Trap> TrapFromProto(const pvemu::v1::Trap& msg);
void TrapToProto(const Trap& trap, pvemu::v1::Trap* msg);

Mode ModeFromProto(pvemu::v1::CpuMode mode);
pvemu::v1::CpuMode ModeToProto(Mode mode);

void RegsFromProto(const pvemu::v1::Registers& msg, Regs* regs);
void RegsToProto(const Regs& regs, pvemu::v1::Registers* msg);

// Fills kind, regs (all of them after the instruction: the trap's with the
// outcome's writes applied), exception of `msg` (not the decoded
// instruction).
void OutcomeToProto(const Trap& trap, const Outcome& outcome, pvemu::v1::Outcome* msg);

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_TRAP_CONVERT_H_
