#include "dispatch/shadow_store.h"

namespace pvemu::dispatch {
namespace {

// The shift that keeps log2(capacity) top bits of a product (at least one,
// so the shift stays below 64; callers mask the slot anyway).
int ShiftFor(uint32_t capacity) {
  int bits = 1;
  while ((uint32_t{1} << bits) < capacity) ++bits;
  return 64 - bits;
}

}  // namespace

ShadowStore::ShadowStore(uint32_t vcpu_capacity, uint32_t msrs_per_vcpu)
    : vcpu_mask_(vcpu_capacity - 1),
      msr_mask_(msrs_per_vcpu - 1),
      vcpu_shift_(ShiftFor(vcpu_capacity)),
      msr_shift_(ShiftFor(msrs_per_vcpu)),
      vcpus_(new VcpuSlot[vcpu_capacity]) {}

ShadowStore::~ShadowStore() {
  for (uint32_t i = 0; i <= vcpu_mask_; ++i) delete[] vcpus_[i].table.load();
}

ShadowStore::MsrSlot* ShadowStore::FindOrCreateVcpu(uint32_t domain, uint32_t vcpu) {
  const uint64_t key = VcpuKey(domain, vcpu);
  uint32_t i = Slot(key, vcpu_shift_) & vcpu_mask_;
  for (uint32_t probes = 0; probes <= vcpu_mask_; ++probes, i = (i + 1) & vcpu_mask_) {
    VcpuSlot& slot = vcpus_[i];
    uint64_t seen = slot.key.load(std::memory_order_acquire);
    if (seen == 0) {
      uint64_t expected = 0;
      if (slot.key.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
        seen = key;
      } else {
        seen = expected;  // someone claimed it first; is it ours?
      }
    }
    if (seen != key) continue;
    MsrSlot* table = slot.table.load(std::memory_order_acquire);
    if (table != nullptr) return table;
    // First SHADOW access of this vCPU: the one allocation on this path.
    auto* fresh = new MsrSlot[msr_mask_ + 1];
    MsrSlot* expected = nullptr;
    if (slot.table.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) {
      return fresh;
    }
    delete[] fresh;
    return expected;
  }
  return nullptr;
}

uint64_t* ShadowStore::GetProbing(uint32_t domain, uint32_t vcpu, uint32_t msr, bool* fresh) {
  *fresh = false;
  MsrSlot* table = FindOrCreateVcpu(domain, vcpu);
  if (table == nullptr) return nullptr;
  const uint64_t key = uint64_t{msr} + 1;
  uint32_t i = Slot(key, msr_shift_) & msr_mask_;
  for (uint32_t probes = 0; probes <= msr_mask_; ++probes, i = (i + 1) & msr_mask_) {
    MsrSlot& slot = table[i];
    uint64_t seen = slot.key.load(std::memory_order_acquire);
    if (seen == key) return &slot.value;
    if (seen != 0) continue;
    uint64_t expected = 0;
    if (slot.key.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
      *fresh = true;
      return &slot.value;
    }
    if (expected == key) return &slot.value;
  }
  return nullptr;
}

void ShadowStore::ResetDomain(uint32_t domain) {
  for (uint32_t i = 0; i <= vcpu_mask_; ++i) {
    VcpuSlot& slot = vcpus_[i];
    uint64_t key = slot.key.load(std::memory_order_acquire);
    if (key == 0 || ((key - 1) >> 32) != domain) continue;
    MsrSlot* table = slot.table.load(std::memory_order_acquire);
    if (table == nullptr) continue;
    for (uint32_t m = 0; m <= msr_mask_; ++m) {
      table[m].value = 0;
      table[m].key.store(0, std::memory_order_release);
    }
  }
}

}  // namespace pvemu::dispatch
