#include "kvm/data_plane.h"

#include <errno.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstring>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/durable_file.h"
#include "base/status_macros.h"
#include "emulator/trap.h"
#include "kvm/subscription.h"
#include "policy/shipped.h"
#include "policy/vendor_proto.h"
#include "hosts/open_host.h"
#include "x86/vendor.h"

namespace pvemu::kvm {
namespace {

using emulator::Outcome;
using emulator::OutcomeKind;
using emulator::Trap;

// <linux/kvm.h> (Linux 6.1) declares kvm_cpuid2's entries with
// __DECLARE_FLEX_ARRAY, which in C++ adds an empty struct: sizeof becomes
// 12 and `entries` moves to offset 12, while the kernel's C layout has them
// at 8. Both the ioctl numbers (they encode the size) and the buffer must
// follow the kernel, so these two ioctls use the C layout spelled out here.
struct CpuidHeader {
  uint32_t nent;
  uint32_t padding;
};
static_assert(sizeof(CpuidHeader) == 8);
constexpr unsigned long kGetSupportedCpuid = _IOWR(KVMIO, 0x05, CpuidHeader);
constexpr unsigned long kSetCpuid2 = _IOW(KVMIO, 0x90, CpuidHeader);

// A KVM_*_CPUID2 argument of `nent` entries in the kernel's layout.
class CpuidBuffer {
 public:
  explicit CpuidBuffer(uint32_t nent)
      : bytes_(sizeof(CpuidHeader) + size_t{nent} * sizeof(kvm_cpuid_entry2)) {
    header()->nent = nent;
  }
  CpuidHeader* header() { return reinterpret_cast<CpuidHeader*>(bytes_.data()); }
  kvm_cpuid_entry2* entries() {
    return reinterpret_cast<kvm_cpuid_entry2*>(bytes_.data() + sizeof(CpuidHeader));
  }
  void* arg() { return bytes_.data(); }

 private:
  std::vector<uint8_t> bytes_;
};

absl::Status IoctlError(absl::string_view what, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " failed"));
}

// The layer that sets the domain's guest_vendor explicitly, if any (unset
// means "the host's vendor": then leaf 0 is left alone).
pvemu::v1::Vendor ExplicitGuestVendor(const pvemu::v1::Policy& policy, uint32_t domain) {
  for (const pvemu::v1::Layer& layer : policy.domain()) {
    if (layer.domain() == domain && layer.guest_vendor() != pvemu::v1::VENDOR_UNSPECIFIED) {
      return layer.guest_vendor();
    }
  }
  return policy.default_().guest_vendor();
}

// Leaf `leaf` as `d` decides it over the host backend's value.
void ApplyDecision(const policy::CpuidDecision& d, const emulator::CpuidRegs& host,
                   CpuidLeaf* leaf) {
  uint32_t regs[4] = {host.eax, host.ebx, host.ecx, host.edx};
  d.Apply(regs);
  leaf->eax = regs[0], leaf->ebx = regs[1], leaf->ecx = regs[2], leaf->edx = regs[3];
}

// The vendor string of CPUID leaf 0 (EBX, EDX, ECX order).
std::string VendorString(const CpuidLeaf& leaf0) {
  char id[12];
  std::memcpy(id, &leaf0.ebx, 4);
  std::memcpy(id + 4, &leaf0.edx, 4);
  std::memcpy(id + 8, &leaf0.ecx, 4);
  return std::string(id, 12);
}

// Checks the policy for this domain as KVM will run it: valid, a filter KVM
// can express, and CPUID consistent with guest_vendor.
absl::StatusOr<enforce::MsrFilter> CheckForKvm(const pvemu::v1::Policy& policy,
                                      const policy::SourceMap& source, pvemu::v1::Vendor host_vendor,
                                      uint32_t domain, emulator::Host& host) {
  ASSIGN_OR_RETURN(std::unique_ptr<const policy::DomainSnapshot> snap,
                   policy::CompileDomain(policy, source, host_vendor, domain));
  absl::StatusOr<enforce::MsrFilter> filter = enforce::CompileMsrFilter(*snap);
  if (!filter.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("domain ", domain, ": ", filter.status().message()));
  }
  // Leaf 0 alone decides the vendor check; the host's leaf stands in for KVM's.
  const emulator::CpuidRegs h = host.Cpuid(0, 0);
  std::vector<CpuidLeaf> leaf0 = {CpuidLeaf{0, 0, 0, h.eax, h.ebx, h.ecx, h.edx}};
  RETURN_IF_ERROR(GuestCpuid(leaf0, policy, *snap, host).status());
  return *std::move(filter);
}

}  // namespace

absl::StatusOr<std::vector<CpuidLeaf>> GuestCpuid(const std::vector<CpuidLeaf>& supported,
                                                  const pvemu::v1::Policy& policy,
                                                  const policy::DomainSnapshot& domain,
                                                  emulator::Host& host) {
  std::vector<CpuidLeaf> out = supported;
  auto find = [&](uint32_t function, uint32_t index) -> CpuidLeaf* {
    for (CpuidLeaf& l : out) {
      if (l.function == function &&
          ((l.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX) == 0 || l.index == index)) {
        return &l;
      }
    }
    return nullptr;
  };
  for (CpuidLeaf& leaf : out) {
    const policy::CpuidDecision* d = domain.Cpuid(leaf.function, leaf.index);
    if (d != nullptr) ApplyDecision(*d, host.Cpuid(leaf.function, leaf.index), &leaf);
  }
  // Leaves the policy sets that KVM does not list (a hypervisor leaf, say).
  auto add_missing = [&](const pvemu::v1::Layer& layer) {
    for (const pvemu::v1::CpuidEntry& e : layer.cpuid()) {
      const uint32_t index = e.has_subleaf() ? e.subleaf() : 0;
      if (find(e.leaf(), index) != nullptr) continue;
      const policy::CpuidDecision* d = domain.Cpuid(e.leaf(), index);
      if (d == nullptr) continue;  // a condition-free layer entry always compiles; be safe
      CpuidLeaf leaf;
      leaf.function = e.leaf();
      leaf.index = index;
      leaf.flags = e.has_subleaf() ? KVM_CPUID_FLAG_SIGNIFCANT_INDEX : 0;
      ApplyDecision(*d, host.Cpuid(e.leaf(), index), &leaf);
      out.push_back(leaf);
    }
  };
  add_missing(policy.default_());
  for (const pvemu::v1::Layer& layer : policy.domain()) {
    if (layer.domain() == domain.domain()) add_missing(layer);
  }

  const pvemu::v1::Vendor vendor = ExplicitGuestVendor(policy, domain.domain());
  CpuidLeaf* leaf0 = find(0, 0);
  if (vendor != pvemu::v1::VENDOR_UNSPECIFIED && leaf0 != nullptr) {
    const std::string want(x86::VendorCpuidString(policy::FromProto(vendor)));
    const policy::CpuidDecision* d = domain.Cpuid(0, 0);
    if (d != nullptr && VendorString(*leaf0) != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "domain ", domain.domain(), ": the CPUID rule for leaf 0 at ", d->origin,
          " gives vendor \"", VendorString(*leaf0), "\" but guest_vendor is ",
          pvemu::v1::Vendor_Name(vendor), " (\"", want,
          "\"); drop the rule's EBX/ECX/EDX or make them match: guest_vendor sets leaf 0's "
          "vendor string"));
    }
    std::memcpy(&leaf0->ebx, want.data(), 4);
    std::memcpy(&leaf0->edx, want.data() + 4, 4);
    std::memcpy(&leaf0->ecx, want.data() + 8, 4);
  }
  return out;
}

// --- Vcpu ---------------------------------------------------------------------

Vcpu::Vcpu(DataPlane* plane, uint32_t index, size_t run_size, int vcpu_fd)
    : plane_(plane), index_(index), run_size_(run_size), vcpu_fd_(vcpu_fd),
      time_exits_(plane->options_.time_exits), session_(plane->dispatcher_->NewSession()) {
  trap_.domain = plane->domain();
  trap_.vcpu = index_;
  trap_.mode = emulator::Mode::k64;
  trap_.cpl = 0;
  if (vcpu_fd_ >= 0) session_->SetRipSource(&Vcpu::GuestRip, this);
  plane_->Register(this);
}

uint64_t Vcpu::GuestRip(void* vcpu) {
  // Called on the vCPU's own thread during its exit, while it is not in
  // KVM_RUN. An MSR or I/O exit leaves RIP at the instruction: KVM moves
  // past it only when the vCPU runs again.
  struct kvm_regs regs;
  if (ioctl(static_cast<Vcpu*>(vcpu)->vcpu_fd_, KVM_GET_REGS, &regs) != 0) return 0;
  return regs.rip;
}

Vcpu::~Vcpu() { plane_->Unregister(this); }

pvemu_kvm_stats Vcpu::stats() const {
  pvemu_kvm_stats s{};
  s.rdmsr = counters_.rdmsr.load(std::memory_order_relaxed);
  s.wrmsr = counters_.wrmsr.load(std::memory_order_relaxed);
  s.io = counters_.io.load(std::memory_order_relaxed);
  s.completed = counters_.completed.load(std::memory_order_relaxed);
  s.exceptions = counters_.exceptions.load(std::memory_order_relaxed);
  s.device = counters_.device.load(std::memory_order_relaxed);
  s.pvemu_ns = static_cast<uint64_t>(
      static_cast<double>(counters_.ticks.load(std::memory_order_relaxed)) *
      plane_->NanosPerTick());
  return s;
}

// The guest RIP when the VMM asked KVM to copy the registers into kvm_run
// at every exit (KVM_CAP_SYNC_REGS, kvm_valid_regs): free then, and the
// capture's records carry it; else 0 (first-access records read it apart,
// Vcpu::GuestRip).
static inline uint64_t ExitRip(const struct kvm_run& run) {
  return (run.kvm_valid_regs & KVM_SYNC_X86_REGS) != 0 ? run.s.regs.regs.rip : 0;
}

// Sets two adjacent registers of a trap with one 16-byte store. The
// emulator copies the register file in 16-byte loads at once, and a load
// that spans two narrower recent stores cannot take its data from them: it
// waits for them to reach the cache (a store-forwarding stall, a dozen
// cycles each, a quarter of the exit's decision before this).
static inline void SetPair(uint64_t* pair, uint64_t low, uint64_t high) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(pair),
                   _mm_set_epi64x(static_cast<long long>(high), static_cast<long long>(low)));
}

// Single-writer counters: a relaxed load and store, no locked instruction.
static inline void Bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

int Vcpu::HandleExit(struct kvm_run* run) {
  // Timing is asked for (time_exits): two TSC reads cost about a fifth of
  // the decision, so an exit that is not timed pays one predicted branch.
  if (!time_exits_) [[likely]] return Dispatch(run);
  const uint64_t start = __rdtsc();
  const int result = Dispatch(run);
  if (result != PVEMU_KVM_NOT_MINE) Bump(counters_.ticks, __rdtsc() - start);
  return result;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline int Vcpu::Dispatch(struct kvm_run* run) {
  switch (run->exit_reason) {
    case KVM_EXIT_X86_RDMSR:
      return HandleMsr(run, false);
    case KVM_EXIT_X86_WRMSR:
      return HandleMsr(run, true);
    case KVM_EXIT_IO:
      return HandleIo(run);
    default:
      return PVEMU_KVM_NOT_MINE;
  }
}

int Vcpu::HandleMsr(struct kvm_run* run, bool write) {
  Bump(write ? counters_.wrmsr : counters_.rdmsr);
  // INVAL: KVM knows the MSR and rejects the access (a reserved bit, say);
  // hardware gives #GP, whatever unknown_msr says. KVM sets one reason bit;
  // a reason with INVAL among others is answered as INVAL, the safe side.
  if ((run->msr.reason & KVM_MSR_EXIT_REASON_INVAL) != 0) {
    run->msr.error = 1;
    Bump(counters_.exceptions);
    return PVEMU_KVM_HANDLED;
  }
  // The exit names the MSR and carries the written value, which is all the
  // instruction reads: its trap is the vCPU's (set up once, KVM exits only
  // for CPL0 accesses in long mode; it injects #GP itself at CPL > 0) with
  // the instruction and the registers it reads set, without fetching any.
  Trap& trap = trap_;
  trap.insn_len = 2;
  trap.insn[0] = 0x0f;
  trap.insn[1] = write ? 0x30 : 0x32;
  static_assert(emulator::kRax == 0 && emulator::kRcx == 1 && emulator::kRdx == 2);
  SetPair(&trap.regs.rip, ExitRip(*run), emulator::Regs{}.rflags);
  SetPair(&trap.regs.gpr[emulator::kRax], write ? run->msr.data & 0xffffffffu : 0,
          run->msr.index);
  SetPair(&trap.regs.gpr[emulator::kRdx], write ? run->msr.data >> 32 : 0, 0);
  const Outcome out = session_->Handle(trap);
  if (out.kind == OutcomeKind::kCompleted) {
    run->msr.error = 0;
    if (!write) {
      run->msr.data = (out.GprAfter(emulator::kRdx, trap.regs) << 32) |
                      (out.GprAfter(emulator::kRax, trap.regs) & 0xffffffffu);
    }
    Bump(counters_.completed);
  } else {
    // #GP, or an access the emulator does not take: the guest sees #GP(0),
    // which KVM injects; RIP stays at the instruction.
    run->msr.error = 1;
    Bump(counters_.exceptions);
  }
  return PVEMU_KVM_HANDLED;
}

int Vcpu::HandleIo(struct kvm_run* run) {
  Bump(counters_.io);
  const uint8_t size = run->io.size;
  // Every field is the kernel's to set, and a VMM's bug or a corrupted
  // mapping must not become a write outside it: data_offset is 64 bits, so
  // the bound is checked without a sum that could wrap.
  const uint64_t offset = run->io.data_offset;
  if ((size != 1 && size != 2 && size != 4) ||
      (run->io.direction != KVM_EXIT_IO_IN && run->io.direction != KVM_EXIT_IO_OUT) ||
      offset < sizeof(struct kvm_run) || offset > run_size_ ||
      uint64_t{size} * run->io.count > run_size_ - offset) {
    return -EINVAL;
  }
  uint8_t* data = reinterpret_cast<uint8_t*>(run) + offset;
  const bool out_dir = run->io.direction == KVM_EXIT_IO_OUT;
  // IN/OUT with the port in DX: the one encoding for every port and width
  // (0x66 makes the 16-bit form).
  Trap& trap = trap_;
  uint8_t n = 0;
  if (size == 2) trap.insn[n++] = 0x66;
  trap.insn[n++] = static_cast<uint8_t>((out_dir ? 0xee : 0xec) | (size == 1 ? 0 : 1));
  trap.insn_len = n;
  SetPair(&trap.regs.rip, ExitRip(*run), emulator::Regs{}.rflags);
  SetPair(&trap.regs.gpr[emulator::kRax], 0, 0);
  SetPair(&trap.regs.gpr[emulator::kRdx], run->io.port, 0);
  // A string instruction (count > 1) is decided element by element, as the
  // CPU performs it.
  for (uint32_t i = 0; i < run->io.count; ++i) {
    uint8_t* element = data + size_t{i} * size;
    if (out_dir) {
      uint32_t value = 0;
      std::memcpy(&value, element, size);
      SetPair(&trap.regs.gpr[emulator::kRax], value, 0);
    }
    // Every element under the first one's policy generation: an edit that
    // lands mid-instruction takes effect at the next exit, so the elements
    // are decided alike and a DEVICE answer is known at the first.
    const Outcome out = i == 0 ? session_->Handle(trap) : session_->HandleNextElement(trap);
    if (out.kind == OutcomeKind::kDeviceIo) {
      // Inside the domain's io_port ranges with no device the host models:
      // the VMM's device model takes the whole access (nothing is written).
      Bump(counters_.device);
      return PVEMU_KVM_DEVICE;
    }
    if (out.kind != OutcomeKind::kCompleted) {
      // Unreachable at CPL0 (the IOPL check passes); answered as a floating
      // bus, never left half done.
      if (!out_dir) std::memset(element, 0xff, size);
      continue;
    }
    if (!out_dir) {
      const uint32_t value = static_cast<uint32_t>(out.GprAfter(emulator::kRax, trap.regs));
      std::memcpy(element, &value, size);
    }
  }
  Bump(counters_.completed);
  return PVEMU_KVM_HANDLED;
}

// --- DataPlane ------------------------------------------------------------------

DataPlane::DataPlane(const DataPlaneOptions& options)
    : options_(options), tsc_at_open_(__rdtsc()), time_at_open_(absl::Now()) {}

DataPlane::~DataPlane() {
  subscription_.reset();  // stops the thread that calls Apply
  if (capture_ != nullptr) {
    // The VMM closes its vCPUs first, so no exit is in flight: the log is
    // complete. A failure to write it can only be dropped here (the C ABI's
    // close returns nothing); the file is then absent, never half-written.
    dispatcher_->RemoveObserver(capture_.get());
    (void)capture_->Close();
  }
}

double DataPlane::NanosPerTick() const {
  const uint64_t ticks = __rdtsc() - tsc_at_open_;
  const double ns = absl::ToDoubleNanoseconds(absl::Now() - time_at_open_);
  return ticks == 0 ? 0.0 : ns / static_cast<double>(ticks);
}

absl::StatusOr<std::unique_ptr<DataPlane>> DataPlane::Open(const DataPlaneOptions& options) {
  if (options.policy.empty() == options.server.empty()) {
    return absl::InvalidArgumentError(
        "give exactly one of a policy (a file or a shipped policy's name) and a server "
        "(pvemud's socket)");
  }
  std::unique_ptr<DataPlane> plane(new DataPlane(options));
  hosts::HostOptions host_options;
  host_options.profile = options.host_profile;
  if (options.host != "sim" && !options.host_profile.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a host profile is for the sim host; host is \"", options.host, "\""));
  }
  if (options.host == "xen") {
    return absl::InvalidArgumentError("the KVM data plane runs on host \"sim\" or \"linux\"");
  }
  ASSIGN_OR_RETURN(plane->host_, hosts::OpenHost(options.host, host_options));
  const pvemu::v1::Vendor vendor = plane->host_->vendor();

  if (!options.policy.empty()) {
    ASSIGN_OR_RETURN(policy::LoadedPolicy loaded, policy::LoadPolicyByNameOrFile(options.policy));
    ASSIGN_OR_RETURN(plane->filter_, CheckForKvm(loaded.policy, loaded.source, vendor,
                                                 options.domain, *plane->host_));
    ASSIGN_OR_RETURN(plane->store_,
                     policy::Store::FromPolicy(loaded.policy, loaded.source, vendor));
    plane->generation_.store(plane->store_->generation(), std::memory_order_release);
  } else {
    // The first generation arrives before Start returns; later ones call
    // Apply from the subscription's thread.
    ASSIGN_OR_RETURN(SubscribedPolicy first,
                     PolicySubscription::FetchFirst(options.server, options.domain,
                                                    options.connect_timeout));
    ASSIGN_OR_RETURN(plane->filter_, CheckForKvm(first.policy, first.source, vendor,
                                                 options.domain, *plane->host_));
    ASSIGN_OR_RETURN(plane->store_, policy::Store::FromPolicy(first.policy, first.source, vendor));
    plane->generation_.store(first.generation, std::memory_order_release);
  }
  dispatch::DispatchOptions dispatch_options;
  dispatch_options.count_by_domain_and_msr = options.count_msrs;
  if (!options.server.empty()) {
    // Subscribed, pvemud shows this VM as it shows its own traps: counts per
    // domain, instruction and MSR, and the first-access and learning lines,
    // which go to pvemud's log (FillReport) rather than the VMM's stderr.
    dispatch_options.count_by_domain_and_msr = true;
    DataPlane* raw = plane.get();
    dispatch_options.log = [raw](absl::string_view line) {
      absl::MutexLock lock(&raw->log_mu_);
      // The line that says the log stopped is never among those dropped.
      if (raw->log_.size() < kMaxLogLines ||
          absl::StartsWith(line, dispatch::DispatchOptions::kFirstAccessLogStopped)) {
        raw->log_.emplace_back(line);
      } else {
        ++raw->log_dropped_;
      }
    };
  }
  plane->dispatcher_ = std::make_unique<dispatch::Dispatcher>(*plane->store_, *plane->host_,
                                                              nullptr, dispatch_options);
  if (!options.capture.empty()) {
    // Every exit decided, with the answer the guest got (and the relaxed
    // bit of a learning domain), for `pvemuctl replay` and `suggest`.
    ASSIGN_OR_RETURN(plane->capture_, dispatch::TrapCapture::Open(options.capture));
    RETURN_IF_ERROR(plane->dispatcher_->AddObserver(plane->capture_.get()));
  }
  if (!options.server.empty()) {
    // Audited traps travel to the daemon's watchers; standalone, nobody
    // watches and the trap path keeps its observer-free branch.
    plane->audit_ring_ = std::make_unique<AuditRing>();
    RETURN_IF_ERROR(plane->dispatcher_->AddObserver(plane->audit_ring_.get()));
    plane->audit_ring_->Activate();
    plane->subscription_ = PolicySubscription::Start(plane.get(), options.server, options.domain);
    // Open returns once pvemud holds this VM as attached, so that an edit
    // made from then on is checked against its KVM filter. A daemon gone in
    // between costs the wait and nothing else: the VM runs on the first
    // policy and the stream reconnects.
    (void)plane->subscription_->WaitFollowing(options.connect_timeout);
  }
  return plane;
}

absl::Status DataPlane::InstallFilter(const enforce::MsrFilter& filter) {
  if (vm_fd_ < 0) return absl::OkStatus();  // installed by SetupVm
  struct kvm_msr_filter kf;
  std::memset(&kf, 0, sizeof kf);
  kf.flags = KVM_MSR_FILTER_DEFAULT_ALLOW;
  static_assert(enforce::kMaxFilterRanges == KVM_MSR_FILTER_MAX_RANGES);
  for (size_t i = 0; i < filter.ranges.size(); ++i) {
    const enforce::FilterRange& r = filter.ranges[i];
    kf.ranges[i].flags = KVM_MSR_FILTER_READ | KVM_MSR_FILTER_WRITE;
    kf.ranges[i].nmsrs = r.nmsrs;
    kf.ranges[i].base = r.base;
    // KVM copies the bitmap during the ioctl; it never writes it.
    kf.ranges[i].bitmap = const_cast<uint8_t*>(r.bitmap.data());
  }
  if (ioctl(vm_fd_, KVM_X86_SET_MSR_FILTER, &kf) != 0) {
    return IoctlError(absl::StrCat("KVM_X86_SET_MSR_FILTER (", filter.ranges.size(), " ranges)"),
                      errno);
  }
  return absl::OkStatus();
}

absl::Status DataPlane::SetupVm(int vm_fd) {
  absl::MutexLock lock(&mu_);
  if (vm_fd_ >= 0) return absl::FailedPreconditionError("the VM is already set up");
  if (ioctl(vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_X86_USER_SPACE_MSR) <= 0 ||
      ioctl(vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_X86_MSR_FILTER) <= 0) {
    return absl::UnimplementedError(
        "this KVM has no user-space MSR exits (KVM_CAP_X86_USER_SPACE_MSR and "
        "KVM_CAP_X86_MSR_FILTER, Linux 5.10 or later)");
  }
  struct kvm_enable_cap cap;
  std::memset(&cap, 0, sizeof cap);
  cap.cap = KVM_CAP_X86_USER_SPACE_MSR;
  cap.args[0] = KVM_MSR_EXIT_REASON_FILTER | KVM_MSR_EXIT_REASON_UNKNOWN |
                KVM_MSR_EXIT_REASON_INVAL;
  if (ioctl(vm_fd, KVM_ENABLE_CAP, &cap) != 0) {
    return IoctlError("KVM_ENABLE_CAP(KVM_CAP_X86_USER_SPACE_MSR)", errno);
  }
  vm_fd_ = vm_fd;
  absl::Status status = InstallFilter(filter_);
  if (!status.ok()) vm_fd_ = -1;
  return status;
}

absl::StatusOr<std::unique_ptr<Vcpu>> DataPlane::OpenVcpu(int kvm_fd, int vcpu_fd,
                                                          uint32_t index) {
  const int run_size = ioctl(kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
  if (run_size < 0) return IoctlError("KVM_GET_VCPU_MMAP_SIZE on the /dev/kvm descriptor", errno);
  if (run_size < static_cast<int>(sizeof(struct kvm_run))) {
    // Not an errno: the answer itself is impossible (found by capi_fuzz).
    return absl::InvalidArgumentError(absl::StrFormat(
        "KVM_GET_VCPU_MMAP_SIZE on the /dev/kvm descriptor gave %d bytes, fewer than struct "
        "kvm_run's %zu: is it a /dev/kvm descriptor?",
        run_size, sizeof(struct kvm_run)));
  }
  // KVM's supported leaves: retry with a larger table while it says E2BIG.
  std::vector<CpuidLeaf> supported;
  for (uint32_t nent = 128; supported.empty(); nent *= 2) {
    CpuidBuffer buf(nent);
    if (ioctl(kvm_fd, kGetSupportedCpuid, buf.arg()) != 0) {
      if (errno == E2BIG && nent < 4096) continue;
      return IoctlError("KVM_GET_SUPPORTED_CPUID", errno);
    }
    for (uint32_t i = 0; i < buf.header()->nent; ++i) {
      const kvm_cpuid_entry2& e = buf.entries()[i];
      supported.push_back({e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx});
    }
    if (supported.empty()) return absl::InternalError("KVM_GET_SUPPORTED_CPUID listed no leaf");
  }
  const std::shared_ptr<const policy::Snapshot> snap = store_->Current();
  ASSIGN_OR_RETURN(std::vector<CpuidLeaf> leaves,
                   GuestCpuid(supported, snap->policy(), snap->ForDomain(options_.domain),
                              *host_));
  CpuidBuffer buf(static_cast<uint32_t>(leaves.size()));
  for (size_t i = 0; i < leaves.size(); ++i) {
    const CpuidLeaf& l = leaves[i];
    kvm_cpuid_entry2& e = buf.entries()[i];
    std::memset(&e, 0, sizeof e);
    e.function = l.function, e.index = l.index, e.flags = l.flags;
    e.eax = l.eax, e.ebx = l.ebx, e.ecx = l.ecx, e.edx = l.edx;
  }
  if (ioctl(vcpu_fd, kSetCpuid2, buf.arg()) != 0) {
    return IoctlError(absl::StrCat("KVM_SET_CPUID2 on vCPU ", index,
                                   " (KVM refuses CPUID changes after the first KVM_RUN)"),
                      errno);
  }
  return NewVcpu(index, static_cast<size_t>(run_size), vcpu_fd);
}

std::unique_ptr<Vcpu> DataPlane::NewVcpu(uint32_t index, size_t run_size, int vcpu_fd) {
  return std::unique_ptr<Vcpu>(new Vcpu(this, index, run_size, vcpu_fd));
}

absl::Status DataPlane::Apply(const pvemu::v1::Policy& policy, const policy::SourceMap& source,
                              uint64_t generation) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(enforce::MsrFilter filter,
                   CheckForKvm(policy, source, host_->vendor(), options_.domain, *host_));
  // When the exiting set changes, in three steps, so that every access gets
  // one generation's answer whole: first only what both generations make
  // exit does (an MSR only the old policy names goes back to KVM, the new
  // generation's answer, before the new policy could decide it by its
  // unknown_msr); then the policy swaps; then what only the new policy names
  // starts to exit (until then it stays with KVM, the old answer).
  const bool changed = !filter.SameExits(filter_);
  if (changed && vm_fd_ >= 0) {
    RETURN_IF_ERROR(InstallFilter(enforce::IntersectExits(filter_, filter)));
    // KVM hands a new filter to a vCPU in guest mode by a request it takes
    // at its next entry, and the ioctl does not wait for that: a vCPU may
    // still exit by the old filter for a few microseconds, and those exits
    // must find the old policy. A millisecond covers it (an edit takes that
    // long anyway); an exit handled after it is the one left, see
    // docs/DESIGN.md, "The KVM data plane".
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::Status applied = store_->ApplyPolicy(policy, source, policy::EditOptions{}).status();
  if (!applied.ok()) {
    if (changed) (void)InstallFilter(filter_);  // back to the old generation whole
    return applied;
  }
  if (changed) RETURN_IF_ERROR(InstallFilter(filter));
  filter_ = std::move(filter);
  generation_.store(generation, std::memory_order_release);
  return absl::OkStatus();
}

void DataPlane::Register(Vcpu* vcpu) {
  absl::MutexLock lock(&vcpus_mu_);
  vcpus_.push_back(vcpu);
}

static void Add(const pvemu_kvm_stats& s, pvemu_kvm_stats* sum) {
  sum->rdmsr += s.rdmsr;
  sum->wrmsr += s.wrmsr;
  sum->io += s.io;
  sum->completed += s.completed;
  sum->exceptions += s.exceptions;
  sum->device += s.device;
  sum->pvemu_ns += s.pvemu_ns;
}

void DataPlane::Unregister(Vcpu* vcpu) {
  absl::MutexLock lock(&vcpus_mu_);
  Add(vcpu->stats(), &closed_);
  vcpus_.erase(std::find(vcpus_.begin(), vcpus_.end(), vcpu));
}

void DataPlane::FillReport(v1::KvmTrapBatch* batch) {
  batch->set_cumulative(true);
  const dispatch::Dispatcher::Counts counts = dispatcher_->CountsByKey();
  for (const dispatch::KindCount& k : counts.kinds) {
    v1::KvmKindCount* out = batch->add_kinds();
    out->set_instruction(std::string(dispatch::InstructionLabel(k.insn)));
    out->set_outcome(std::string(dispatch::OutcomeLabel(k.outcome)));
    out->set_count(k.count);
  }
  for (const dispatch::MsrCount& m : counts.msrs) {
    v1::KvmMsrCount* out = batch->add_msrs();
    out->set_msr(m.msr.value_or(0));
    out->set_msr_other(!m.msr.has_value());
    out->set_write(m.write);
    out->set_action(std::string(dispatch::MsrActionName(m.action)));
    out->set_count(m.count);
  }
  for (const dispatch::LearnedAccess& a : dispatcher_->Learned()) {
    dispatch::LearnedToProto(a, batch->add_learned());
  }
  absl::MutexLock lock(&log_mu_);
  for (std::string& line : log_) batch->add_log(std::move(line));
  log_.clear();
  if (log_dropped_ != 0) {
    batch->add_log(absl::StrCat(log_dropped_, " more lines not sent (more than ", kMaxLogLines,
                                " between two reports)"));
    log_dropped_ = 0;
  }
}

absl::StatusOr<std::vector<dispatch::MsrCount>> DataPlane::MsrCounts() const {
  if (!dispatcher_->counting_by_domain_and_msr()) {
    return absl::UnimplementedError(
        "this handle does not count MSR accesses: open it with options.count_msrs = 1");
  }
  return dispatcher_->CountsByKey().msrs;
}

DataPlane::Totals DataPlane::totals() const {
  absl::MutexLock lock(&vcpus_mu_);
  Totals t;
  t.vcpus = static_cast<uint32_t>(vcpus_.size());
  t.stats = closed_;
  for (const Vcpu* v : vcpus_) Add(v->stats(), &t.stats);
  return t;
}

enforce::MsrFilter DataPlane::filter() const {
  absl::MutexLock lock(&mu_);
  return filter_;
}

}  // namespace pvemu::kvm
