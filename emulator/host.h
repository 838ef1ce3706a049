// The physical host, as the emulator needs it for passthrough accesses.
// Implementations live in hosts/: sim (a profile), linux (/dev/cpu/N/msr),
// xen (libxenctrl). Tests use a fake.
#ifndef PVEMU_EMULATOR_HOST_H_
#define PVEMU_EMULATOR_HOST_H_

#include <cstdint>
#include "absl/strings/string_view.h"

#include "pvemu/v1/policy.pb.h"

namespace pvemu::emulator {

struct CpuidRegs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// Thread-safe: called concurrently from every trap source. Methods on the
// trap path (ReadMsr, WriteMsr, Cpuid) must not allocate.
class Host {
 public:
  virtual ~Host() = default;

  virtual pvemu::v1::Vendor vendor() const = 0;
  // For people: "sim: Intel Xeon E-2136", "xen 4.17", "linux".
  virtual absl::string_view description() const = 0;
  // The host TSC frequency in kHz (0 if unknown).
  virtual uint64_t tsc_khz() const = 0;

  // Reads MSR `index` on physical CPU `cpu` into *value. Returns false when
  // the access faults on the host (unimplemented MSR, refused by Xen, no msr
  // driver); *value is then untouched. The caller injects #GP(0).
  virtual bool ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) = 0;
  // Writes MSR `index`. Returns false when the host refuses or faults.
  virtual bool WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) = 0;
  // Host CPUID for leaf/subleaf.
  virtual CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) = 0;

  // A device the host itself models at I/O port `port` (the sim host's
  // profile ports). IN: sets *value (the low `width` bytes count) and returns
  // true; OUT: takes *value and returns true. false: no device here, the
  // access goes to the trap source's device model. Real hosts model none.
  virtual bool PortIo(uint16_t port, uint8_t width, bool write, uint32_t* value) {
    (void)port, (void)width, (void)write, (void)value;
    return false;
  }
};

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_HOST_H_
