#include "hosts/sim_host.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "policy/vendor_proto.h"
#include "x86/msr_catalog.h"
#include "x86/vendor.h"
#include "base/status_macros.h"
#include "hosts/native_cpuid.h"

namespace pvemu::hosts {
namespace {

// CPUID.1:EAX for a display family/model/stepping (Intel SDM vol. 2,
// "CPUID—Returns Processor Identification"; the AMD APM encodes it alike).
absl::StatusOr<uint32_t> Signature(uint32_t family, uint32_t model,
                                   uint32_t stepping) {
  if (family > 0xf + 0xff) {
    return absl::InvalidArgumentError(
        absl::StrFormat("family %#x does not fit CPUID (at most 0x10e)", family));
  }
  uint32_t base_family = family < 0xf ? family : 0xf;
  uint32_t ext_family = family < 0xf ? 0 : family - 0xf;
  // Only families 6 and 15 (and up) use the extended model field.
  bool ext_model_ok = base_family == 0x6 || base_family == 0xf;
  if (model > (ext_model_ok ? 0xffu : 0xfu)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model %#x does not fit CPUID for family %#x", model, family));
  }
  if (stepping > 0xf) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stepping %#x does not fit CPUID (at most 0xf)", stepping));
  }
  return stepping | (model & 0xf) << 4 | base_family << 8 |
         (model >> 4) << 16 | ext_family << 20;
}

std::string LeafText(uint32_t leaf, bool has_subleaf, uint32_t subleaf) {
  return has_subleaf ? absl::StrFormat("leaf %#x subleaf %u", leaf, subleaf)
                     : absl::StrFormat("leaf %#x (any subleaf)", leaf);
}

// An error about the profile: `where` names the file and the profile.
template <typename... Parts>
absl::Status ProfileError(absl::string_view where, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", parts...));
}

// The profile's vendor and CPU count; on success the vendor's CPUID string.
absl::StatusOr<absl::string_view> CheckVendorAndCpus(
    const pvemu::v1::HostProfile& profile, absl::string_view where) {
  if (profile.vendor() == pvemu::v1::VENDOR_UNSPECIFIED) {
    return ProfileError(where, "sets no vendor; add e.g. 'vendor: INTEL' "
                               "(INTEL, AMD, HYGON, CENTAUR or ZHAOXIN)");
  }
  absl::string_view vendor_id = x86::VendorCpuidString(policy::FromProto(profile.vendor()));
  if (vendor_id.empty()) {
    return ProfileError(where, "vendor ", static_cast<int>(profile.vendor()),
                        " is not a known vendor");
  }
  if (profile.cpus() < 1) {
    return ProfileError(where, "cpus is 0; a host has at least 1 CPU (e.g. 'cpus: 12')");
  }
  if (profile.cpus() > SimHost::kMaxCpus) {
    return ProfileError(where, "cpus is ", profile.cpus(), "; at most ", SimHost::kMaxCpus,
                        " are supported");
  }
  return vendor_id;
}

// One profile MSR, resolved.
struct ListedMsr {
  uint32_t index;
  int entry;  // position in profile.msr()
};

// The profile's MSRs resolved and sorted by index; an MSR listed twice is an
// error.
absl::StatusOr<std::vector<ListedMsr>> ResolveMsrs(const pvemu::v1::HostProfile& profile,
                                                   absl::string_view where) {
  std::vector<ListedMsr> listed;
  listed.reserve(profile.msr_size());
  for (int i = 0; i < profile.msr_size(); ++i) {
    const pvemu::v1::HostMsr& msr = profile.msr(i);
    absl::StatusOr<uint32_t> index = x86::ParseMsr(msr.msr());
    if (!index.ok()) {
      return ProfileError(where, "msr[", i, "] '", msr.msr(), "': ", index.status().message());
    }
    listed.push_back({*index, i});
  }
  std::stable_sort(listed.begin(), listed.end(),
                   [](const ListedMsr& a, const ListedMsr& b) { return a.index < b.index; });
  for (size_t i = 1; i < listed.size(); ++i) {
    if (listed[i].index == listed[i - 1].index) {
      const ListedMsr& first = listed[i - 1];
      const ListedMsr& again = listed[i];
      return ProfileError(where, "msr[", again.entry, "] '", profile.msr(again.entry).msr(),
                          "' lists MSR ", absl::StrFormat("%#x", again.index),
                          " again (already msr[", first.entry, "] '",
                          profile.msr(first.entry).msr(), "')");
    }
  }
  return listed;
}

// The profile's CPUID entries: no leaf/subleaf twice, and a leaf 0 names
// the profile's vendor.
absl::Status CheckCpuidEntries(const pvemu::v1::HostProfile& profile,
                               absl::string_view vendor_id, absl::string_view where) {
  for (int i = 0; i < profile.cpuid_size(); ++i) {
    const pvemu::v1::HostCpuid& entry = profile.cpuid(i);
    for (int j = 0; j < i; ++j) {
      const pvemu::v1::HostCpuid& other = profile.cpuid(j);
      if (other.leaf() == entry.leaf() && other.has_subleaf() == entry.has_subleaf() &&
          (!entry.has_subleaf() || other.subleaf() == entry.subleaf())) {
        return ProfileError(where, "cpuid[", i, "] repeats ",
                            LeafText(entry.leaf(), entry.has_subleaf(), entry.subleaf()),
                            " (already cpuid[", j, "])");
      }
    }
    if (entry.leaf() != 0) continue;
    const emulator::CpuidRegs regs{entry.regs().eax(), entry.regs().ebx(),
                                   entry.regs().ecx(), entry.regs().edx()};
    if (VendorFromLeaf0(regs) != profile.vendor()) {
      emulator::CpuidRegs expected;
      SetLeaf0VendorString(vendor_id, &expected);
      return ProfileError(where, "cpuid[", i, "] leaf 0 does not name the vendor '",
                          vendor_id, "' (want ebx ",
                          absl::StrFormat("%#x edx %#x ecx %#x", expected.ebx,
                                          expected.edx, expected.ecx),
                          "); drop the entry to derive it from 'vendor'");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SimHost>> SimHost::Create(
    const pvemu::v1::HostProfile& profile, absl::string_view source_name) {
  const std::string where =
      absl::StrCat(source_name, ": host profile '", profile.name(), "'");
  ASSIGN_OR_RETURN(absl::string_view vendor_id, CheckVendorAndCpus(profile, where));
  auto host = std::unique_ptr<SimHost>(new SimHost());
  host->vendor_ = profile.vendor();
  host->description_ = absl::StrCat(
      "sim: ", profile.name().empty() ? source_name : profile.name());
  host->tsc_khz_ = profile.tsc_khz();
  host->cpus_ = profile.cpus();
  RETURN_IF_ERROR(host->BuildMsrTable(profile, where));
  RETURN_IF_ERROR(host->BuildCpuidTable(profile, vendor_id, where));
  RETURN_IF_ERROR(host->BuildPortTable(profile, where));
  return host;
}

absl::Status SimHost::BuildMsrTable(const pvemu::v1::HostProfile& profile,
                                    absl::string_view where) {
  ASSIGN_OR_RETURN(const std::vector<ListedMsr> listed, ResolveMsrs(profile, where));
  const size_t n = listed.size();
  msrs_.reserve(n);
  values_ = std::make_unique<std::atomic<uint64_t>[]>(n * cpus_);
  injected_ = std::make_unique<std::atomic<bool>[]>(n);
  for (size_t i = 0; i < n; ++i) {
    const pvemu::v1::HostMsr& msr = profile.msr(listed[i].entry);
    msrs_.push_back({listed[i].index, msr.faults(), msr.writable()});
    msr_position_.emplace(listed[i].index, static_cast<uint32_t>(i));
    for (uint32_t cpu = 0; cpu < cpus_; ++cpu) {
      values_[i * cpus_ + cpu].store(msr.value(), std::memory_order_relaxed);
    }
    injected_[i].store(false, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status SimHost::BuildCpuidTable(const pvemu::v1::HostProfile& profile,
                                      absl::string_view vendor_id, absl::string_view where) {
  RETURN_IF_ERROR(CheckCpuidEntries(profile, vendor_id, where));
  bool have_leaf0 = false;
  bool have_leaf1 = false;
  uint32_t max_basic_leaf = 0;
  for (const pvemu::v1::HostCpuid& entry : profile.cpuid()) {
    cpuid_.push_back(CpuidLeaf{entry.leaf(), entry.has_subleaf(), entry.subleaf(),
                               {entry.regs().eax(), entry.regs().ebx(), entry.regs().ecx(),
                                entry.regs().edx()}});
    have_leaf0 |= entry.leaf() == 0;
    have_leaf1 |= entry.leaf() == 1;
    if (entry.leaf() < 0x80000000u) max_basic_leaf = std::max(max_basic_leaf, entry.leaf());
  }
  // Derive leaves 0 and 1 when missing.
  if (!have_leaf0) {
    CpuidLeaf leaf0{0, false, 0, {}};
    // Without a profile leaf 1 the derived one below is the highest.
    leaf0.regs.eax = std::max<uint32_t>(max_basic_leaf, profile.family() ? 1 : 0);
    SetLeaf0VendorString(vendor_id, &leaf0.regs);
    cpuid_.push_back(leaf0);
  }
  if (!have_leaf1 && profile.family() != 0) {
    absl::StatusOr<uint32_t> eax =
        Signature(profile.family(), profile.model(), profile.stepping());
    if (!eax.ok()) return ProfileError(where, eax.status().message());
    CpuidLeaf leaf1{1, false, 0, {}};
    leaf1.regs.eax = *eax;
    cpuid_.push_back(leaf1);
  }
  std::sort(cpuid_.begin(), cpuid_.end(), [](const CpuidLeaf& a, const CpuidLeaf& b) {
    return std::tie(a.leaf, a.has_subleaf, a.subleaf) <
           std::tie(b.leaf, b.has_subleaf, b.subleaf);
  });
  for (size_t i = cpuid_.size(); i-- > 0;) {
    cpuid_first_[cpuid_[i].leaf] = static_cast<uint32_t>(i);
  }
  return absl::OkStatus();
}

absl::Status SimHost::BuildPortTable(const pvemu::v1::HostProfile& profile, absl::string_view where) {
  for (int i = 0; i < profile.port_size(); ++i) {
    const pvemu::v1::HostPort& p = profile.port(i);
    if (p.port() > 0xffff) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: port[%d] is %#x; I/O ports are 0..0xffff", where, i, p.port()));
    }
    if (!ports_.emplace(static_cast<uint16_t>(p.port()), p.value()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: port %#x is listed twice; keep one entry per port", where, p.port()));
    }
  }
  return absl::OkStatus();
}

bool SimHost::PortIo(uint16_t port, uint8_t width, bool write, uint32_t* value) {
  auto it = ports_.find(port);
  if (it == ports_.end()) return false;
  if (!write) {
    *value = width >= 4 ? it->second : it->second & ((1u << (8 * width)) - 1);
  }
  return true;  // a write is accepted and discarded
}

int SimHost::FindMsr(uint32_t index) const {
  auto it = msr_position_.find(index);
  return it == msr_position_.end() ? -1 : static_cast<int>(it->second);
}

bool SimHost::ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) {
  if (cpu >= cpus_) return false;
  int i = FindMsr(index);
  if (i < 0 || msrs_[i].faults ||
      injected_[i].load(std::memory_order_relaxed)) {
    return false;
  }
  *value = values_[static_cast<size_t>(i) * cpus_ + cpu].load(
      std::memory_order_relaxed);
  return true;
}

bool SimHost::WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) {
  if (cpu >= cpus_) return false;
  int i = FindMsr(index);
  if (i < 0 || msrs_[i].faults || !msrs_[i].writable ||
      injected_[i].load(std::memory_order_relaxed)) {
    return false;
  }
  // Relaxed is enough: like a real MSR, each value stands alone and orders
  // nothing else.
  values_[static_cast<size_t>(i) * cpus_ + cpu].store(
      value, std::memory_order_relaxed);
  return true;
}

emulator::CpuidRegs SimHost::Cpuid(uint32_t leaf, uint32_t subleaf) {
  // Entries of one leaf are adjacent: first the one without a subleaf, then
  // the subleaves in order.
  auto first = cpuid_first_.find(leaf);
  if (first == cpuid_first_.end()) return emulator::CpuidRegs{};
  auto it = cpuid_.begin() + first->second;
  const CpuidLeaf* any_subleaf = nullptr;
  for (; it != cpuid_.end() && it->leaf == leaf; ++it) {
    if (!it->has_subleaf) {
      any_subleaf = &*it;
    } else if (it->subleaf == subleaf) {
      return it->regs;
    }
  }
  return any_subleaf != nullptr ? any_subleaf->regs : emulator::CpuidRegs{};
}

void SimHost::InjectFault(uint32_t msr, bool on) {
  int i = FindMsr(msr);
  if (i >= 0) injected_[i].store(on, std::memory_order_relaxed);
}

}  // namespace pvemu::hosts
