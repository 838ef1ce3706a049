#include "vm_setup.h"

#include <errno.h>
#include <fcntl.h>
// A note for C++ VMMs: in linux-libc-dev 6.1's <linux/kvm.h>, a struct with a
// flexible array (kvm_cpuid2, kvm_msrs, kvm_msr_list, ...) has a different
// layout and ioctl number in C++ than in C: __DECLARE_FLEX_ARRAY adds an
// empty struct, whose size is 1 in C++, so KVM answers EINVAL. This runner
// uses none of them; a VMM that does must declare its own header struct.
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <string>

#include "messages.h"
#include "x86_setup.h"

namespace pvemu_vm {
namespace {

// KVM's address for the real-mode TSS (three pages). api.rst calls
// KVM_SET_TSS_ADDR "required on Intel-based hosts"; it lies above our RAM
// (at most 1 GiB) and below 4 GiB, where QEMU puts it too.
constexpr uint64_t kKvmTssAddr = 0xfffbd000;

// Opens the image and checks its size against what RAM leaves for it.
int OpenImage(const Flags& f, uint64_t ram_bytes, uint64_t* size) {
  const int fd = open(f.image.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    Fail("cannot open IMAGE %s: %s; give a flat binary (as + objcopy -O binary)", f.image.c_str(),
         std::strerror(errno));
  }
  struct stat st{};
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    Fail("IMAGE %s is not a regular file; give a flat binary (as + objcopy -O binary)",
         f.image.c_str());
  }
  if (st.st_size == 0) {
    Fail("IMAGE %s is empty: there is no code to run at 0x100000", f.image.c_str());
  }
  const uint64_t max = MaxImageBytes(ram_bytes, f.vcpus);
  if (static_cast<uint64_t>(st.st_size) > max) {
    Fail("IMAGE %s is too large: %lld bytes, but --memory=%" PRIu64 " MiB leaves %" PRIu64
         " bytes (RAM - 1 MiB - %u vCPU stacks x 64 KiB); give more --memory",
         f.image.c_str(), static_cast<long long>(st.st_size), f.memory_mib, max, f.vcpus);
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

// 1. /dev/kvm, its API version, and room for `vcpus`.
int OpenKvm(uint32_t vcpus) {
  const int kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm_fd < 0) {
    if (errno == ENOENT || errno == ENXIO || errno == ENODEV) {
      Fail("no /dev/kvm (%s): this machine offers no KVM; load kvm-intel or kvm-amd, or run "
           "inside tests/kvm/run-in-kvm-vm.sh", std::strerror(errno));
    }
    Fail("cannot open /dev/kvm: %s; add this user to the kvm group or run as root",
         std::strerror(errno));
  }
  const int api = ioctl(kvm_fd, KVM_GET_API_VERSION, 0);
  if (api != KVM_API_VERSION) {
    Fail("/dev/kvm speaks KVM API %d, not %d; this kernel's KVM is not usable", api,
         KVM_API_VERSION);
  }
  int max_vcpus = ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_NR_VCPUS);
  if (max_vcpus <= 0) max_vcpus = 4;  // api.rst: "assume 4" without the capability
  if (vcpus > static_cast<uint32_t>(max_vcpus)) {
    Fail("--vcpus=%u is above KVM_CAP_NR_VCPUS (%d) on this host; give at most %d", vcpus,
         max_vcpus, max_vcpus);
  }
  return kvm_fd;
}

// 2. pvemu: the policy, compiled for this domain and host.
pvemu_kvm* OpenPvemu(const Flags& f) {
  pvemu_kvm_options options{};
  options.size = sizeof options;
  options.domain = f.domain;
  options.policy = f.policy.empty() ? nullptr : f.policy.c_str();
  options.server = f.server.empty() ? nullptr : f.server.c_str();
  // docs/CLI.md: a daemon not reachable within 5 s at start is bad input.
  options.connect_timeout_ms = 5000;
  options.host = f.host.c_str();
  options.host_profile = f.host_profile.empty() ? nullptr : f.host_profile.c_str();
  options.capture = f.capture.empty() ? nullptr : f.capture.c_str();
  // The summary's MSR rows (--stats, -o json) need the per-MSR counts.
  options.count_msrs = f.stats || f.json ? 1 : 0;
  options.time_exits = f.stats || f.json ? 1 : 0;  // the summary's pvemu_ns_per_exit
  pvemu_kvm* pvemu = nullptr;
  if (const int rc = pvemu_kvm_open(&options, &pvemu); rc < 0) {
    Fail("pvemu_kvm_open (%s %s) failed: %s", f.policy.empty() ? "--server" : "--policy",
         f.policy.empty() ? f.server.c_str() : f.policy.c_str(), pvemu_kvm_last_error());
  }
  return pvemu;
}

// 3. The VM: RAM at guest-physical 0 ...
uint8_t* MapRam(int vm_fd, const Flags& f, uint64_t ram_bytes) {
  void* ram_map = mmap(nullptr, ram_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (ram_map == MAP_FAILED) {
    Fail("cannot map %" PRIu64 " MiB of guest RAM: %s; give less --memory", f.memory_mib,
         std::strerror(errno));
  }
  auto* ram = static_cast<uint8_t*>(ram_map);
  kvm_userspace_memory_region region{};
  region.slot = 0;
  region.guest_phys_addr = 0;
  region.memory_size = ram_bytes;
  region.userspace_addr = reinterpret_cast<uintptr_t>(ram);
  if (ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &region) < 0) {
    Fail("KVM_SET_USER_MEMORY_REGION (%" PRIu64 " MiB at 0) failed: %s", f.memory_mib,
         std::strerror(errno));
  }
  return ram;
}

// ... then KVM's TSS, pvemu's MSR exits and filter.
void SetUpVmExits(int vm_fd, pvemu_kvm* pvemu) {
  if (ioctl(vm_fd, KVM_SET_TSS_ADDR, kKvmTssAddr) < 0) {
    Fail("KVM_SET_TSS_ADDR (%s) failed: %s", Hex(kKvmTssAddr).c_str(), std::strerror(errno));
  }
  if (pvemu_kvm_setup_vm(pvemu, vm_fd) < 0) {
    Fail("pvemu_kvm_setup_vm failed: %s", pvemu_kvm_last_error());
  }
}

// 4. Guest memory: system tables below 1 MiB, the image at 1 MiB. Closes
// `image_fd`.
void LoadGuest(uint8_t* ram, int image_fd, uint64_t image_size, const std::string& image) {
  WriteSystemTables(ram);
  for (uint64_t done = 0; done < image_size;) {
    const ssize_t n = pread(image_fd, ram + kImageAddr + done, image_size - done,
                            static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Fail("cannot read IMAGE %s: %s", image.c_str(), n < 0 ? std::strerror(errno)
                                                            : "it shrank while being read");
    }
    done += static_cast<uint64_t>(n);
  }
  close(image_fd);
}

// 5. vCPU `i`: create, map kvm_run, pvemu's CPUID, then the entry state.
std::unique_ptr<Vcpu> CreateVcpu(const Vm& vm, uint32_t i, uint32_t nvcpus, size_t run_size,
                                 bool sync_regs) {
  auto cpu = std::make_unique<Vcpu>();
  cpu->index = i;
  cpu->fd = ioctl(vm.vm_fd, KVM_CREATE_VCPU, i);
  if (cpu->fd < 0) Fail("KVM_CREATE_VCPU %u failed: %s", i, std::strerror(errno));
  cpu->run_size = run_size;
  void* run = mmap(nullptr, cpu->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, cpu->fd, 0);
  if (run == MAP_FAILED) Fail("mmap of vCPU %u's kvm_run failed: %s", i, std::strerror(errno));
  cpu->run = static_cast<kvm_run*>(run);
  // KVM copies the registers into kvm_run at every exit, so that the
  // capture's records carry the guest RIP of each MSR and port access.
  if (sync_regs) cpu->run->kvm_valid_regs = KVM_SYNC_X86_REGS;
  if (pvemu_kvm_vcpu_open(vm.pvemu, vm.kvm_fd, cpu->fd, i, &cpu->pvemu) < 0) {
    Fail("pvemu_kvm_vcpu_open for vCPU %u failed: %s", i, pvemu_kvm_last_error());
  }
  std::string error;
  if (!SetEntryState(cpu->fd, i, nvcpus, vm.ram_bytes, &error)) Fail("%s", error.c_str());
  return cpu;
}

void CreateVcpus(uint32_t nvcpus, bool capture, Vm* vm) {
  const int run_size = ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
  if (run_size < static_cast<int>(sizeof(kvm_run))) {
    Fail("KVM_GET_VCPU_MMAP_SIZE gave %d: %s", run_size, std::strerror(errno));
  }
  // With a capture, registers in kvm_run where KVM offers them (x86 since
  // Linux 4.19); without, the capture's records have RIP 0.
  const int sync = ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_SYNC_REGS);
  const bool sync_regs = capture && sync > 0 && (sync & KVM_SYNC_X86_REGS) != 0;
  for (uint32_t i = 0; i < nvcpus; ++i) {
    vm->vcpus.push_back(CreateVcpu(*vm, i, nvcpus, static_cast<size_t>(run_size), sync_regs));
  }
}

}  // namespace

Vm SetUpVm(const Flags& f) {
  Vm vm;
  vm.ram_bytes = f.memory_mib << 20;
  uint64_t image_size = 0;
  const int image_fd = OpenImage(f, vm.ram_bytes, &image_size);
  vm.kvm_fd = OpenKvm(f.vcpus);
  vm.pvemu = OpenPvemu(f);
  vm.vm_fd = ioctl(vm.kvm_fd, KVM_CREATE_VM, 0);
  if (vm.vm_fd < 0) Fail("KVM_CREATE_VM failed: %s", std::strerror(errno));
  vm.ram = MapRam(vm.vm_fd, f, vm.ram_bytes);
  SetUpVmExits(vm.vm_fd, vm.pvemu);
  LoadGuest(vm.ram, image_fd, image_size, f.image);
  CreateVcpus(f.vcpus, !f.capture.empty(), &vm);
  return vm;
}

void TearDownVm(Vm& vm) {
  for (auto& cpu : vm.vcpus) {
    pvemu_kvm_vcpu_close(cpu->pvemu);
    munmap(cpu->run, cpu->run_size);
    close(cpu->fd);
  }
  pvemu_kvm_close(vm.pvemu);
  munmap(vm.ram, vm.ram_bytes);
  close(vm.vm_fd);
  close(vm.kvm_fd);
}

}  // namespace pvemu_vm
