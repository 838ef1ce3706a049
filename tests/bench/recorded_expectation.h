// The expectation a trap log records for an outcome, for the benchmarks
// and tests that write logs replay must check: the kind, the vector of an
// exception, the value RDMSR or IN read, the registers CPUID returned (more
// than pvemud's capture records, which keeps RDMSR's value only).
#ifndef PVEMU_TESTS_BENCH_RECORDED_EXPECTATION_H_
#define PVEMU_TESTS_BENCH_RECORDED_EXPECTATION_H_

#include <cstdint>

#include "emulator/decoder.h"
#include "emulator/trap.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::bench {

inline void SetExpectation(const emulator::Trap& trap, const emulator::Outcome& out,
                           const emulator::Instruction& insn, emulator::DecodeError error,
                           v1::Expectation* expect) {
  expect->set_kind(static_cast<v1::Outcome::Kind>(out.kind));
  if (out.kind == emulator::OutcomeKind::kException) {
    expect->set_vector(static_cast<v1::Vector>(out.vector));
    return;
  }
  if (out.kind != emulator::OutcomeKind::kCompleted || error != emulator::DecodeError::kOk) return;
  const emulator::Regs after = out.RegsAfter(trap.regs);
  const uint64_t* r = after.gpr;
  switch (insn.kind) {
    case emulator::InsnKind::kRdmsr:
      expect->set_value((r[emulator::kRdx] << 32) | (r[emulator::kRax] & 0xffffffffu));
      break;
    case emulator::InsnKind::kIn:
      expect->set_value(r[emulator::kRax] &
                        (insn.operand_size == 32 ? 0xffffffffu : (1u << insn.operand_size) - 1));
      break;
    case emulator::InsnKind::kCpuid:
      expect->mutable_cpuid()->set_eax(static_cast<uint32_t>(r[emulator::kRax]));
      expect->mutable_cpuid()->set_ebx(static_cast<uint32_t>(r[emulator::kRbx]));
      expect->mutable_cpuid()->set_ecx(static_cast<uint32_t>(r[emulator::kRcx]));
      expect->mutable_cpuid()->set_edx(static_cast<uint32_t>(r[emulator::kRdx]));
      break;
    default:
      break;
  }
}

}  // namespace pvemu::bench

#endif  // PVEMU_TESTS_BENCH_RECORDED_EXPECTATION_H_
