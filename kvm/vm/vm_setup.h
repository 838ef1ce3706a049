// pvemu-vm's VM setup, before any vCPU runs: the image, /dev/kvm, pvemu's
// data plane, the VM with its RAM, guest memory, and the vCPUs at their
// entry state (x86_setup.h). Each step follows the sequence pvemu_kvm.h
// gives a VMM.
#ifndef PVEMU_KVM_VM_VM_SETUP_H_
#define PVEMU_KVM_VM_VM_SETUP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "flags.h"
#include "pvemu_kvm.h"
#include "vcpu.h"

namespace pvemu_vm {

// What SetUpVm opened; TearDownVm closes it.
struct Vm {
  int kvm_fd = -1;  // /dev/kvm
  pvemu_kvm* pvemu = nullptr;
  int vm_fd = -1;
  uint8_t* ram = nullptr;  // guest-physical 0 in this process
  uint64_t ram_bytes = 0;
  std::vector<std::unique_ptr<Vcpu>> vcpus;
};

// Sets up the VM the flags ask for, ready to run. Bad input or a step that
// fails says why and exits with status 2 (Fail): nothing has run yet.
Vm SetUpVm(const Flags& f);

// Closes what SetUpVm opened, the vCPUs first. Their threads are joined.
void TearDownVm(Vm& vm);

}  // namespace pvemu_vm

#endif  // PVEMU_KVM_VM_VM_SETUP_H_
