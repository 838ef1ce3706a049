// One vCPU of pvemu-vm: what the VM setup creates (vm_setup.h), the exit
// loop runs on its own thread (exit_loop.h) and the output sums (output.h).
#ifndef PVEMU_KVM_VM_VCPU_H_
#define PVEMU_KVM_VM_VCPU_H_

#include <cstddef>
#include <cstdint>
#include <thread>

#include "pvemu_kvm.h"

struct kvm_run;

namespace pvemu_vm {

// Exits the runner counts itself; pvemu counts RDMSR, WRMSR and I/O.
struct ExitCounts {
  uint64_t hlt = 0;
  uint64_t mmio = 0;
  uint64_t shutdown = 0;
  uint64_t internal_error = 0;
  uint64_t fail_entry = 0;
  uint64_t other = 0;
};

struct Vcpu {
  uint32_t index = 0;
  int fd = -1;
  kvm_run* run = nullptr;
  size_t run_size = 0;
  pvemu_kvm_vcpu* pvemu = nullptr;
  std::thread thread;
  // Written by the vCPU's own thread only; read after it is joined.
  ExitCounts exits;
  // Zero until the thread copies pvemu's counts in at its end: a count the
  // library does not keep stays 0 (pvemu_kvm.h, "How the ABI grows").
  pvemu_kvm_stats stats{};
};

}  // namespace pvemu_vm

#endif  // PVEMU_KVM_VM_VCPU_H_
