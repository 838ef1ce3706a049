// pvemu-vm's summary of a run: the exits it counted, pvemu's counts and
// outcomes, and pvemu's time per exit; printed as text on stderr (--stats)
// or as one JSON object on stdout's last line (-o json). Both formats are
// part of pvemu-vm's contract (docs/CLI.md, "pvemu-vm": Output).
#ifndef PVEMU_KVM_VM_OUTPUT_H_
#define PVEMU_KVM_VM_OUTPUT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "pvemu_kvm.h"
#include "vcpu.h"

namespace pvemu_vm {

struct Summary {
  int exit_status = 0;
  uint32_t vcpus = 0;
  uint64_t generation = 0;
  double seconds = 0;
  ExitCounts exits;
  pvemu_kvm_stats pvemu{};  // the sum of the vCPUs' counts
  // Per (MSR, access, action), from pvemu_kvm_msr_counts (--stats, -o json).
  std::vector<pvemu_kvm_msr_count> msrs;

  double PvemuNsPerExit() const {
    const uint64_t n = pvemu.rdmsr + pvemu.wrmsr + pvemu.io;
    return n ? static_cast<double>(pvemu.pvemu_ns) / static_cast<double>(n) : 0.0;
  }
};

// Sums the counts of every vCPU, after their threads are joined, and reads
// the MSR rows of `pvemu`.
Summary Summarize(int status, pvemu_kvm* pvemu, double seconds,
                  const std::vector<std::unique_ptr<Vcpu>>& vcpus);

// --stats: the summary as text on stderr.
void PrintStatsText(const Summary& s);

// -o json: the summary as one JSON object on its own last line of stdout;
// `last_console_byte` (Devices::last_console_byte) says whether the guest's
// console output left that line open.
void PrintStatsJson(const Summary& s, int last_console_byte);

}  // namespace pvemu_vm

#endif  // PVEMU_KVM_VM_OUTPUT_H_
