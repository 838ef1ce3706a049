// Instruction semantics: one trapped, decoded instruction in, one complete
// Outcome out (DESIGN.md, "Instruction semantics"). Nothing here allocates,
// takes a lock or keeps state; thread-safety is that of the Domain and Host.
// emulator/emulate_inl.h holds the same semantics as templates, for trap
// paths that know their concrete Domain type (dispatch/).
//
// Contracts every path keeps:
// - EXCEPTION and UNHANDLED outcomes carry the trap's registers unchanged.
// - COMPLETED advances RIP by the decoded length (wrapping at 16 or 32 bits
//   outside 64-bit mode) and clears RFLAGS.RF, as a retired instruction does.
//   RFLAGS.TF single-step traps are left to the hypervisor.
//
// Choices where the emulator cannot know the CPU state (documented so the
// replay corpus and the hypervisor side agree):
// - CPL > 0 (outside real mode) makes every privileged instruction #GP(0).
//   CPUID, RDTSC and RDTSCP are allowed at any CPL: CPUID traps only through
//   CPUID faulting, and CR4.TSD is not known. RDPMC stays #GP(0) at CPL > 0
//   (CR4.PCE is not known).
// - CLI, STI, IN, OUT, INS, OUTS are allowed when CPL <= IOPL (RFLAGS bits
//   12-13); otherwise #GP(0) (the TSS I/O bitmap is not known). Real mode has
//   no checks.
// - Passthrough MSR accesses use trap.vcpu as the physical CPU number: the
//   host backends map vCPUs to where they run.
// - IN/OUT: there is no device model, so an allowed port reads all ones and
//   drops writes exactly like a port outside the domain's ranges.
// - WRMSR writable_mask: a write must give every bit outside the mask its
//   current value (SDM: reserved bits keep their value). "Current" is the
//   shadow for SHADOW, the host's value for PASSTHROUGH (0 if the host cannot
//   read it: a write-only MSR), and what RDMSR would return for IGNORE.
// - RDPMC with vPMU on, INS/OUTS, HLT, CLI, STI, CLTS, LMSW, INVLPG, WBINVD,
//   WBNOINVD, INVD, MOV CR/DR, XSETBV, SWAPGS: UNHANDLED after the privilege
//   check; the hypervisor owns that state.
#ifndef PVEMU_EMULATOR_EMULATE_H_
#define PVEMU_EMULATOR_EMULATE_H_

#include "emulator/trap.h"
#include "emulator/decoder.h"
#include "emulator/domain.h"
#include "emulator/host.h"
#include "emulator/instruction.h"

namespace pvemu::emulator {

// The MSR RDTSCP reads into ECX.
inline constexpr uint32_t kMsrTscAux = 0xc0000103;

// Applies `insn` (decoded from trap.insn in trap.mode) to the trap's
// registers under the domain's policy.
Outcome Emulate(const Trap& trap, const Instruction& insn, Domain& domain,
                Host& host);

// Decodes trap.insn and emulates it. Decode errors with an exception (#UD,
// #GP for more than 15 bytes) become EXCEPTION outcomes; a truncated fetch or
// a non-privileged instruction becomes UNHANDLED. `decoded_out` (may be null)
// receives the instruction when decoding succeeded; `error_out` (may be null)
// receives the decode error (kOk on success).
Outcome DecodeAndEmulate(const Trap& trap, Domain& domain, Host& host,
                         Instruction* decoded_out,
                         DecodeError* error_out = nullptr);

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_EMULATE_H_
