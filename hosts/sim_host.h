// SimHost: the embedded `sim` host backend. A host profile (host.proto,
// HostProfile) describes the machine: vendor, CPU count, TSC frequency, the
// MSRs it implements with their values, and its CPUID leaves.
#ifndef PVEMU_HOSTS_SIM_HOST_H_
#define PVEMU_HOSTS_SIM_HOST_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "emulator/host.h"
#include "hosts/host_base.h"
#include "pvemu/v1/host.pb.h"

namespace pvemu::hosts {

// Thread-safe and lock-free: every method may be called concurrently. The
// MSR and CPUID tables are built once by Create and never change shape;
// MSR values and injected faults are atomics, so ReadMsr, WriteMsr, Cpuid and
// InjectFault take no lock and allocate nothing.
//
// Semantics:
// - every listed MSR starts with its profile value on every CPU;
// - writes to `writable` MSRs are stored per CPU; writes to others fault;
// - MSRs the profile does not list, or lists with `faults: true`, fault;
// - CPUID: an entry with the exact subleaf beats one without a subleaf;
//   unlisted leaves read as zeros; leaf 0 always carries the vendor string
//   (derived from `vendor` when the profile has no leaf 0), and leaf 1 EAX
//   is derived from family/model/stepping when the profile has no leaf 1.
class SimHost final : public HostBase {
 public:
  // Most CPUs a profile may declare (each listed MSR costs 8 bytes a CPU).
  static constexpr uint32_t kMaxCpus = 4096;

  // Validates `profile` and builds the tables. `source_name` (a file name,
  // or "<shipped>") starts every error message, followed by the profile's
  // name and the offending entry: InvalidArgument when the vendor is unset,
  // cpus is 0 or above kMaxCpus, an MSR does not resolve
  // (x86::ParseMsr), an MSR or CPUID leaf/subleaf is listed twice, or
  // CPUID leaf 0 names another vendor than `vendor`.
  static absl::StatusOr<std::unique_ptr<SimHost>> Create(
      const pvemu::v1::HostProfile& profile, absl::string_view source_name);

  SimHost(const SimHost&) = delete;
  SimHost& operator=(const SimHost&) = delete;

  // emulator::Host. The description (HostBase) reads "sim: Intel Xeon E-2136".
  bool ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) override;
  bool WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) override;
  emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) override;
  // The profile's `port` devices: IN reads the listed value, OUT is
  // discarded; other ports have no device here.
  bool PortIo(uint16_t port, uint8_t width, bool write, uint32_t* value) override;

  uint32_t cpus() const { return cpus_; }

  // Test hook (and the daemon's fault tests): while `on`, reads and writes
  // of `msr` fault on every CPU. No effect on MSRs the profile does not
  // list, which fault anyway.
  void InjectFault(uint32_t msr, bool on);

 private:
  struct Msr {
    uint32_t index;
    bool faults;    // the profile says accesses fault
    bool writable;  // the profile accepts writes
  };
  struct CpuidLeaf {
    uint32_t leaf;
    bool has_subleaf;
    uint32_t subleaf;
    emulator::CpuidRegs regs;
  };

  SimHost() = default;

  // The phases of Create after the vendor and CPU count are checked; `where`
  // starts every error message.
  absl::Status BuildMsrTable(const pvemu::v1::HostProfile& profile, absl::string_view where);
  absl::Status BuildCpuidTable(const pvemu::v1::HostProfile& profile,
                               absl::string_view vendor_id, absl::string_view where);
  // Validates and indexes the profile's port devices.
  absl::Status BuildPortTable(const pvemu::v1::HostProfile& profile, absl::string_view where);

  // Position of `index` in msrs_, or -1.
  int FindMsr(uint32_t index) const;

  uint32_t cpus_ = 0;
  // Sorted by index; msr_position_ maps an index to its position (one hash
  // probe per access rather than a binary search on the trap path).
  std::vector<Msr> msrs_;
  absl::flat_hash_map<uint32_t, uint32_t> msr_position_;
  // values_[i * cpus_ + cpu] is MSR msrs_[i] on `cpu`.
  std::unique_ptr<std::atomic<uint64_t>[]> values_;
  // injected_[i]: InjectFault is on for msrs_[i].
  std::unique_ptr<std::atomic<bool>[]> injected_;
  // Sorted by (leaf, has_subleaf, subleaf); cpuid_first_ maps a leaf to the
  // position of its first entry.
  std::vector<CpuidLeaf> cpuid_;
  absl::flat_hash_map<uint32_t, uint32_t> cpuid_first_;
  // Port devices: port -> the value IN reads. Immutable after Create.
  absl::flat_hash_map<uint16_t, uint32_t> ports_;
};

}  // namespace pvemu::hosts

#endif  // PVEMU_HOSTS_SIM_HOST_H_
