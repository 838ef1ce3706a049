// LinuxHost: the `linux` host backend, for a bare-metal or KVM host. Physical
// MSRs through the msr driver (/dev/cpu/N/msr: pread/pwrite of 8 bytes at
// offset = MSR index), CPUID through the cpuid instruction.
#ifndef PVEMU_HOSTS_LINUX_HOST_H_
#define PVEMU_HOSTS_LINUX_HOST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "emulator/host.h"
#include "hosts/host_base.h"

namespace pvemu::hosts {

struct LinuxHostOptions {
  // Holds one directory per CPU ("0", "1", ...) with an `msr` device each.
  // Tests point it at a directory of regular files.
  std::string dev_cpu_dir = "/dev/cpu";
  // Where the TSC frequency estimate comes from ("cpu MHz" of the first CPU).
  std::string cpuinfo_path = "/proc/cpuinfo";
};

// Thread-safe: every method may be called concurrently. The msr devices are
// opened once, by Create; ReadMsr and WriteMsr are one pread/pwrite on a
// shared descriptor (positional I/O needs no lock) and allocate nothing.
class LinuxHost final : public HostBase {
 public:
  // Opens <dev_cpu_dir>/N/msr read-write for every CPU directory N.
  // FailedPrecondition when <dev_cpu_dir>/0/msr does not exist (the msr
  // module is not loaded); PermissionDenied when opening it is refused
  // (needs root / CAP_SYS_RAWIO). A CPU directory without a usable msr
  // device is kept, and its accesses fault.
  static absl::StatusOr<std::unique_ptr<LinuxHost>> Create(
      const LinuxHostOptions& options = {});

  ~LinuxHost() override;
  LinuxHost(const LinuxHost&) = delete;
  LinuxHost& operator=(const LinuxHost&) = delete;

  // emulator::Host. The vendor (HostBase) comes from CPUID leaf 0; tsc_khz
  // from /proc/cpuinfo ("cpu MHz" of the first processor), 0 if absent. An
  // estimate: exact only with a constant TSC and no frequency scaling.
  // False when the CPU has no open msr device, the access faults (EIO from
  // the driver: #GP on the host), or fewer than 8 bytes come back.
  bool ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) override;
  bool WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) override;
  // CPUID on whichever CPU the calling thread runs on.
  emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) override;

  // One more than the highest CPU number found.
  uint32_t cpus() const { return static_cast<uint32_t>(fds_.size()); }

 private:
  LinuxHost() = default;

  // fds_[cpu]: the open msr device, or -1.
  std::vector<int> fds_;
};

// Parses the TSC estimate (kHz) out of /proc/cpuinfo text: the first
// "cpu MHz : 3312.000" line. 0 when there is none. Exposed for tests.
uint64_t TscKhzFromCpuinfo(absl::string_view cpuinfo);

}  // namespace pvemu::hosts

#endif  // PVEMU_HOSTS_LINUX_HOST_H_
