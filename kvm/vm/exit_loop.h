// pvemu-vm's exit loop: one thread per vCPU runs KVM_RUN, lets pvemu answer
// the exit first (pvemu_kvm_handle_exit), hands the ports pvemu gives back
// to the device model (devices.h), and handles what is left: HLT stops the
// vCPU, anything else crashes the guest. The first end of the run (every
// vCPU halted, the exit port, a crash, the timeout) pulls every thread out
// of KVM_RUN.
#ifndef PVEMU_KVM_VM_EXIT_LOOP_H_
#define PVEMU_KVM_VM_EXIT_LOOP_H_

#include "devices.h"
#include "vm_setup.h"

namespace pvemu_vm {

// How a run ended.
struct RunResult {
  int status = 0;      // pvemu-vm's exit status (docs/CLI.md, "pvemu-vm")
  double seconds = 0;  // from starting the vCPU threads to joining them all
};

// Runs every vCPU of `vm` on its own thread until the run ends (above, or
// `timeout_s` seconds); a crash or the timeout is said on stderr. Afterwards
// each vCPU holds its exit counts and pvemu's counts.
RunResult RunVm(Vm& vm, Devices& devices, double timeout_s);

}  // namespace pvemu_vm

#endif  // PVEMU_KVM_VM_EXIT_LOOP_H_
