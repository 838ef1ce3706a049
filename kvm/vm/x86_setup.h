// The guest's memory layout and each vCPU's entry state. The entry state,
// the image at 0x100000, RAM from guest-physical 0 and the system tables
// below 0x100000 are pvemu-vm's contract (docs/CLI.md, "pvemu-vm": IMAGE,
// Entry state), which tests outside this repository rely on; the tables'
// addresses below are this runner's choice within it.
//
//   0x000000-0x000fff  unused
//   0x001000           GDT: 0x08 64-bit code, 0x10 flat data, 0x18 a TSS
//   0x001100           the TSS (104 bytes; VMX requires a usable TR)
//   0x002000           PML4
//   0x003000           PDPT
//   0x004000           page directory: 512 writable 2 MiB pages, [0, 1 GiB)
//   0x100000           IMAGE, entered at its first byte on every vCPU
//   top of RAM         vCPU i's stack starts at top - i * 64 KiB
//
// Entry state of vCPU i: 64-bit long mode at CPL0 (CR0.PE|PG, CR4.PAE,
// EFER.LME|LMA), CS=0x08, DS=ES=SS=FS=GS=0x10, RFLAGS=0x2 (interrupts off),
// IDTR limit 0 (the guest loads its own IDT), RIP=0x100000,
// RSP=top of RAM - i * 64 KiB, RDI=i, RSI=number of vCPUs, every other
// general register 0.
#ifndef PVEMU_KVM_VM_X86_SETUP_H_
#define PVEMU_KVM_VM_X86_SETUP_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace pvemu_vm {

inline constexpr uint64_t kImageAddr = 0x100000;
inline constexpr uint64_t kStackBytes = 64 * 1024;  // per vCPU
// The page tables map [0, 1 GiB): RAM above it would hold unmapped stacks.
inline constexpr uint64_t kMaxRamBytes = 1ull << 30;

// The largest image that fits: RAM minus the first MiB minus the stacks.
// 0 when nothing fits.
uint64_t MaxImageBytes(uint64_t ram_bytes, uint32_t nvcpus);

// Writes the GDT, the TSS and the page tables into guest RAM (`ram`, mapped
// at guest-physical 0). REQUIRES: RAM of at least kImageAddr bytes.
void WriteSystemTables(uint8_t* ram);

// Sets vCPU `index`'s entry state with KVM_GET/SET_SREGS and KVM_SET_REGS.
// Call after pvemu_kvm_vcpu_open: KVM checks CR4 and EFER against the CPUID
// it was given (EFER.LME needs CPUID's long-mode bit). On failure returns
// false and sets *error to a sentence naming the ioctl and errno.
bool SetEntryState(int vcpu_fd, uint32_t index, uint32_t nvcpus, uint64_t ram_bytes,
                   std::string* error);

}  // namespace pvemu_vm

#endif  // PVEMU_KVM_VM_X86_SETUP_H_
