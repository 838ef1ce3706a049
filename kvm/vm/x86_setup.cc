#include "x86_setup.h"

#include <errno.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>

#include <cstring>

namespace pvemu_vm {
namespace {

constexpr uint64_t kGdtAddr = 0x1000;
constexpr uint64_t kTssAddr = 0x1100;
constexpr uint64_t kPml4Addr = 0x2000;
constexpr uint64_t kPdptAddr = 0x3000;
constexpr uint64_t kPdAddr = 0x4000;

constexpr uint16_t kCodeSelector = 0x08;
constexpr uint16_t kDataSelector = 0x10;
constexpr uint16_t kTssSelector = 0x18;
constexpr uint32_t kTssLimit = 0x67;  // a 64-bit TSS is 104 bytes
constexpr int kGdtEntries = 5;        // null, code, data, TSS (two slots)

// Segment descriptors (Intel SDM vol. 3, 3.4.5). Base 0, limit 4 GiB.
constexpr uint64_t kCode64Descriptor = 0x00af9b000000ffffull;  // P, DPL0, exec/read, L, G
constexpr uint64_t kDataDescriptor = 0x00cf93000000ffffull;    // P, DPL0, read/write, D/B, G

constexpr uint64_t kPtePresent = 1 << 0;
constexpr uint64_t kPteWritable = 1 << 1;
constexpr uint64_t kPteLargePage = 1 << 7;  // in a PD entry: a 2 MiB page

constexpr uint64_t kCr0Pe = 1ull << 0;
constexpr uint64_t kCr0Mp = 1ull << 1;
constexpr uint64_t kCr0Et = 1ull << 4;
constexpr uint64_t kCr0Ne = 1ull << 5;
constexpr uint64_t kCr0Pg = 1ull << 31;
constexpr uint64_t kCr4Pae = 1ull << 5;
constexpr uint64_t kEferLme = 1ull << 8;
constexpr uint64_t kEferLma = 1ull << 10;

void Put64(uint8_t* ram, uint64_t addr, uint64_t value) { std::memcpy(ram + addr, &value, 8); }

// A 64-bit busy TSS descriptor: 16 bytes, two GDT slots (SDM 7.2.3).
void PutTssDescriptor(uint8_t* ram, uint64_t addr, uint64_t base, uint32_t limit) {
  uint64_t low = (limit & 0xffff) | ((base & 0xffffff) << 16) | (0xbull << 40) /* busy TSS */ |
                 (1ull << 47) /* present */ | (uint64_t{(limit >> 16) & 0xf} << 48) |
                 (((base >> 24) & 0xff) << 56);
  Put64(ram, addr, low);
  Put64(ram, addr + 8, base >> 32);
}

kvm_segment FlatSegment(uint16_t selector, bool code) {
  kvm_segment s{};
  s.base = 0;
  s.limit = 0xffffffff;
  s.selector = selector;
  s.type = code ? 0xb : 0x3;  // exec/read/accessed : read/write/accessed
  s.present = 1;
  s.dpl = 0;
  s.db = code ? 0 : 1;  // a 64-bit code segment has L=1, D=0
  s.s = 1;
  s.l = code ? 1 : 0;
  s.g = 1;
  return s;
}

std::string IoctlError(const char* what, uint32_t index) {
  return std::string(what) + " on vCPU " + std::to_string(index) + " failed: " + std::strerror(errno);
}

}  // namespace

uint64_t MaxImageBytes(uint64_t ram_bytes, uint32_t nvcpus) {
  const uint64_t reserved = kImageAddr + uint64_t{nvcpus} * kStackBytes;
  return ram_bytes > reserved ? ram_bytes - reserved : 0;
}

void WriteSystemTables(uint8_t* ram) {
  Put64(ram, kGdtAddr + 0 * 8, 0);
  Put64(ram, kGdtAddr + kCodeSelector, kCode64Descriptor);
  Put64(ram, kGdtAddr + kDataSelector, kDataDescriptor);
  PutTssDescriptor(ram, kGdtAddr + kTssSelector, kTssAddr, kTssLimit);
  std::memset(ram + kTssAddr, 0, kTssLimit + 1);
  // No I/O permission bitmap: its offset points past the limit. Only CPL3
  // consults it, and the guest starts at CPL0.
  const uint16_t iomap_base = kTssLimit + 1;
  std::memcpy(ram + kTssAddr + 0x66, &iomap_base, 2);

  Put64(ram, kPml4Addr, kPdptAddr | kPtePresent | kPteWritable);
  Put64(ram, kPdptAddr, kPdAddr | kPtePresent | kPteWritable);
  for (uint64_t i = 0; i < 512; ++i) {
    Put64(ram, kPdAddr + i * 8, (i << 21) | kPtePresent | kPteWritable | kPteLargePage);
  }
}

namespace {

// The segments, descriptor tables and control registers of 64-bit long mode
// at CPL0 with our GDT and page tables, over KVM's reset state.
void SetLongMode(kvm_sregs& sregs) {
  sregs.cs = FlatSegment(kCodeSelector, true);
  sregs.ds = sregs.es = sregs.ss = sregs.fs = sregs.gs = FlatSegment(kDataSelector, false);

  // VM entry on VMX requires a usable TR of type "busy TSS" in long mode.
  kvm_segment tr{};
  tr.base = kTssAddr;
  tr.limit = kTssLimit;
  tr.selector = kTssSelector;
  tr.type = 0xb;
  tr.present = 1;
  sregs.tr = tr;
  kvm_segment ldt{};
  ldt.type = 0x2;
  ldt.unusable = 1;
  sregs.ldt = ldt;

  sregs.gdt.base = kGdtAddr;
  sregs.gdt.limit = kGdtEntries * 8 - 1;
  sregs.idt.base = 0;
  sregs.idt.limit = 0;  // no IDT: the guest installs its own with LIDT

  sregs.cr0 = kCr0Pe | kCr0Mp | kCr0Et | kCr0Ne | kCr0Pg;
  sregs.cr3 = kPml4Addr;
  sregs.cr4 = kCr4Pae;
  sregs.efer = kEferLme | kEferLma;
}

}  // namespace

bool SetEntryState(int vcpu_fd, uint32_t index, uint32_t nvcpus, uint64_t ram_bytes,
                   std::string* error) {
  kvm_sregs sregs{};
  // Start from KVM's reset state: it keeps the APIC base and the rest we
  // do not set.
  if (ioctl(vcpu_fd, KVM_GET_SREGS, &sregs) < 0) {
    *error = IoctlError("KVM_GET_SREGS", index);
    return false;
  }
  SetLongMode(sregs);
  if (ioctl(vcpu_fd, KVM_SET_SREGS, &sregs) < 0) {
    *error = IoctlError("KVM_SET_SREGS (long mode)", index);
    return false;
  }

  kvm_regs regs{};
  regs.rip = kImageAddr;
  regs.rsp = ram_bytes - uint64_t{index} * kStackBytes;
  regs.rdi = index;
  regs.rsi = nvcpus;
  regs.rflags = 0x2;  // bit 1 is reserved-set; IF=0
  if (ioctl(vcpu_fd, KVM_SET_REGS, &regs) < 0) {
    *error = IoctlError("KVM_SET_REGS", index);
    return false;
  }
  return true;
}

}  // namespace pvemu_vm
