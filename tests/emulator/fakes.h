// A fake Host and a fake Domain for emulator tests and the emulator fuzz
// target: every hook's result is a field the test sets, and every call is
// recorded. Not for the trap path (they allocate on first use of an MSR).
#ifndef PVEMU_TESTS_EMULATOR_FAKES_H_
#define PVEMU_TESTS_EMULATOR_FAKES_H_

#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/string_view.h"
#include "emulator/domain.h"
#include "emulator/host.h"

namespace pvemu::emulator::testing {

class FakeHost : public Host {
 public:
  pvemu::v1::Vendor vendor() const override { return pvemu::v1::INTEL; }
  absl::string_view description() const override { return "fake host"; }
  uint64_t tsc_khz() const override { return 2'000'000; }

  // MSRs present in `msrs` read their value; others fault. Writes fault
  // when `write_ok` is false, else land in `msrs`.
  bool ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) override {
    ++reads;
    last_cpu = cpu;
    auto it = msrs.find(index);
    if (it == msrs.end()) return false;
    *value = it->second;
    return true;
  }
  bool WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) override {
    ++writes;
    last_cpu = cpu;
    if (!write_ok) return false;
    msrs[index] = value;
    return true;
  }
  CpuidRegs Cpuid(uint32_t, uint32_t) override { return cpuid; }
  // Ports in `ports` are devices: IN reads the value, OUT stores it.
  bool PortIo(uint16_t port, uint8_t, bool write, uint32_t* value) override {
    auto it = ports.find(port);
    if (it == ports.end()) return false;
    if (write) {
      it->second = *value;
    } else {
      *value = it->second;
    }
    return true;
  }

  std::map<uint32_t, uint64_t> msrs;
  std::map<uint16_t, uint32_t> ports;
  bool write_ok = true;
  CpuidRegs cpuid;
  int reads = 0;
  int writes = 0;
  uint32_t last_cpu = ~0u;
};

class FakeDomain : public Domain {
 public:
  // `msr_decisions[index]`, else `default_decision`.
  const MsrDecision& Msr(uint32_t index) const override {
    auto it = msr_decisions.find(index);
    return it == msr_decisions.end() ? default_decision : it->second;
  }
  uint64_t* Shadow(uint32_t vcpu, uint32_t index, bool* fresh) override {
    if (!shadow_storage) return nullptr;
    const auto key = std::make_pair(vcpu, index);
    *fresh = touched.insert(key).second;
    return &shadows[key];  // std::map: the pointer stays valid
  }
  CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf, Host&) const override {
    last_leaf = leaf;
    last_subleaf = subleaf;
    return cpuid;
  }
  uint64_t GuestTsc(uint64_t host_tsc, const Host&) const override {
    return host_tsc + tsc_offset;
  }
  bool PortAllowed(uint16_t port, uint8_t width) const override {
    last_port = port;
    last_width = width;
    return ports_allowed;
  }
  bool vpmu() const override { return vpmu_on; }

  MsrDecision default_decision;
  std::map<uint32_t, MsrDecision> msr_decisions;
  bool shadow_storage = true;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> shadows;
  std::set<std::pair<uint32_t, uint32_t>> touched;
  CpuidRegs cpuid;
  uint64_t tsc_offset = 0;
  bool ports_allowed = false;  // a domain with no io_port ranges
  bool vpmu_on = false;
  mutable uint32_t last_leaf = ~0u, last_subleaf = ~0u;
  mutable uint16_t last_port = 0;
  mutable uint8_t last_width = 0;
};

}  // namespace pvemu::emulator::testing

#endif  // PVEMU_TESTS_EMULATOR_FAKES_H_
