// Per-vCPU virtual MSRs (the SHADOW action), shared by every trap source.
//
// Lock-free: two fixed-size open-addressing tables with keys claimed by
// compare-and-swap, one for vCPUs and one per vCPU for its MSRs, so traps of
// different vCPUs never wait for each other. A register's value is a plain
// aligned word: a vCPU traps one instruction at a time (as on hardware), so
// only its own traps touch its registers. The only allocation is a vCPU's
// table, on that vCPU's first SHADOW access; everything after is
// allocation-free. Entries live as long as the store: a vCPU is a few KiB.
#ifndef PVEMU_DISPATCH_SHADOW_STORE_H_
#define PVEMU_DISPATCH_SHADOW_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace pvemu::dispatch {

class ShadowStore {
 public:
  // Capacities are powers of two: how many vCPUs in all, and how many SHADOW
  // MSRs one vCPU may have touched.
  explicit ShadowStore(uint32_t vcpu_capacity = 1 << 14, uint32_t msrs_per_vcpu = 256);
  ~ShadowStore();
  ShadowStore(const ShadowStore&) = delete;
  ShadowStore& operator=(const ShadowStore&) = delete;

  // The register for (domain, vcpu, msr), created on first use with value 0
  // and *fresh = true. nullptr when a table is full (the caller injects #GP
  // rather than invent a value).
  uint64_t* Get(uint32_t domain, uint32_t vcpu, uint32_t msr, bool* fresh) {
    // In line, the common case: the vCPU and the register both sit at their
    // first probe. Keys never change once claimed, so a matching key with a
    // table is that vCPU's table.
    const uint64_t vkey = VcpuKey(domain, vcpu);
    const VcpuSlot& v = vcpus_[Slot(vkey, vcpu_shift_) & vcpu_mask_];
    MsrSlot* const table = v.table.load(std::memory_order_acquire);
    if (table != nullptr && v.key.load(std::memory_order_relaxed) == vkey) [[likely]] {
      const uint64_t mkey = uint64_t{msr} + 1;
      MsrSlot& m = table[Slot(mkey, msr_shift_) & msr_mask_];
      if (m.key.load(std::memory_order_acquire) == mkey) [[likely]] {
        *fresh = false;
        return &m.value;
      }
    }
    return GetProbing(domain, vcpu, msr, fresh);
  }

  // Forgets every register of a domain (it was destroyed). Not for the trap
  // path; concurrent traps of that domain may still see old values.
  void ResetDomain(uint32_t domain);

 private:
  struct MsrSlot {
    std::atomic<uint64_t> key{0};  // msr + 1; 0 = empty
    uint64_t value = 0;
  };
  struct VcpuSlot {
    std::atomic<uint64_t> key{0};  // (domain << 32 | vcpu) + 1; 0 = empty
    // The vCPU's MSR table itself (msrs_per_vcpu slots), not a handle to
    // it: a SHADOW access loads one pointer fewer before its register.
    std::atomic<MsrSlot*> table{nullptr};
  };

  // Get past the first probes, and every first use, out of line.
  uint64_t* GetProbing(uint32_t domain, uint32_t vcpu, uint32_t msr, bool* fresh);
  MsrSlot* FindOrCreateVcpu(uint32_t domain, uint32_t vcpu);

  // Fibonacci hashing: one multiply; the top bits of the product spread
  // sequential ids (vCPU numbers, neighbouring MSRs) over the whole table.
  static uint32_t Slot(uint64_t key, int shift) {
    return static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> shift);
  }
  // Keys are stored +1 so that zero means "empty" even for domain 0 vCPU 0
  // or MSR 0. Domain 0xffffffff with vCPU 0xffffffff would wrap to the
  // empty marker; neither Xen (domids < 0x7ff0) nor a Linux pid gets there.
  static uint64_t VcpuKey(uint32_t domain, uint32_t vcpu) {
    return ((uint64_t{domain} << 32) | vcpu) + 1;
  }

  const uint32_t vcpu_mask_;
  const uint32_t msr_mask_;
  const int vcpu_shift_;  // 64 - log2(capacity): Slot() keeps the top bits
  const int msr_shift_;
  std::unique_ptr<VcpuSlot[]> vcpus_;
};

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_SHADOW_STORE_H_
