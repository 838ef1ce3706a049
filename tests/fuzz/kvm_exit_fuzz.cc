// Fuzzes the KVM exit handler (Vcpu::HandleExit) as a VMM drives it: every
// field of kvm_run is the guest's or the kernel's doing, so pvemu may trust
// none of them, nor the mapping beyond the size KVM guarantees. As QEMU's
// generic-fuzz does, the input picks a mapping size, then a stream of
// operations: exits of any reason with any field values, raw writes into the
// mapping, policy swaps through DataPlane::Apply (subscribed mode's path) and
// vCPU reopens. The mapping is allocated at exactly its size, so ASan sees an
// access past it; each answer must be one pvemu_kvm.h allows, written only
// where it allows (Mapping::Exit), else abort() with a message.
#include <errno.h>
#include <linux/kvm.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dispatch/trap_counts.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_tally.h"
#include "kvm/data_plane.h"
#include "kvm/pvemu_kvm.h"
#include "policy/loader.h"

namespace {

namespace kvm = ::pvemu::kvm;

constexpr size_t kRunSize = sizeof(struct kvm_run);
// KVM_GET_VCPU_MMAP_SIZE is kvm_run's page plus a few (the PIO page, the
// coalesced MMIO ring): the input adds 0 to 3 pages' worth of bytes.
constexpr size_t kMaxExtra = 3 * 4096;
constexpr int kMaxOps = 64;
// An Apply validates and compiles a whole policy: a few per input at most.
constexpr int kMaxSwaps = 8;
constexpr uint32_t kDomain = 1;
constexpr uint32_t kVcpus = 4;

// Policy 0 is in force at the start of every input; the swap operation moves
// to one of the others. Between them: every read and write action, CONST and
// SHADOW values, writable_mask with both reserved-bit answers, host reads
// that succeed (sim profile) and fault (an AMD MSR on the Intel profile),
// every unknown_msr mode, ENFORCE and LEARN, io_port ranges that grant the
// sim host's device port 0x92, ports for the VMM's device model, and ranges
// a wider access straddles (0x510-0x511). All are expressible as a KVM filter.
constexpr const char* kPolicies[] = {
    R"pb(
      default {
        unknown_msr: UNKNOWN_GP
        msr { msr: "IA32_ENERGY_PERF_BIAS" read: PASSTHROUGH write: PASSTHROUGH allow_host_write: true }
        msr { msr: "MSR_PLATFORM_INFO" read: PASSTHROUGH write: GP }
        msr { msr: "MSR_K7_HWCR" read: PASSTHROUGH write: IGNORE }
        msr { msr: "IA32_THERM_CONTROL" read: CONST value: 0x5 write: IGNORE }
        msr { msr: "IA32_PAT" read: SHADOW write: SHADOW value: 0x0007040600070406
              writable_mask: 0x0707070707070707 on_reserved_bits: RESERVED_GP }
        msr { msr: "IA32_MISC_ENABLE" read: SHADOW write: SHADOW writable_mask: 0x400
              on_reserved_bits: RESERVED_DROP }
        msr { msr: "IA32_PERF_CTL" read: GP write: GP audit: true }
        msr { range { first: "0x40000000" last: "0x4000000f" } read: ZERO write: IGNORE }
        msr { range { first: "0x40000008" last: "0x40000009" } read: CONST value: 0x1 write: GP }
        io_port { first: 0x92 last: 0x92 }
        io_port { first: 0x3f8 last: 0x3ff }
        io_port { first: 0x510 last: 0x511 }
      }
      domain {
        domain: 1
        msr { msr: "IA32_THERM_CONTROL" host_vendor: INTEL read: SHADOW write: SHADOW }
        io_port { first: 0xcf8 last: 0xcff }
      }
    )pb",
    R"pb(
      default {
        unknown_msr: UNKNOWN_RELAXED
        msr { msr: "IA32_ENERGY_PERF_BIAS" read: CONST value: 0x6 write: GP }
        msr { msr: "IA32_PAT" read: SHADOW write: SHADOW writable_mask: 0x0707070707070707
              on_reserved_bits: RESERVED_DROP }
        msr { msr: "IA32_PERF_CTL" read: GP write: GP }
        msr { range { first: "0x40000000" last: "0x400000ff" } read: ZERO write: GP }
        io_port { first: 0x60 last: 0x64 }
        io_port { first: 0x3f8 last: 0x3f9 }
      }
      domain {
        domain: 1
        mode: LEARN
        io_port { first: 0x510 last: 0x513 }
      }
    )pb",
    R"pb(
      default {
        unknown_msr: UNKNOWN_HOST
        vpmu: true
        msr { msr: "IA32_THERM_CONTROL" read: PASSTHROUGH write: SHADOW value: 0x10 writable_mask: 0x1e }
        msr { msr: "IA32_PAT" read: ZERO write: IGNORE }
        msr { range { first: "0xc0010000" last: "0xc00100ff" } read: GP write: IGNORE }
      }
    )pb",
};
constexpr size_t kNumPolicies = std::size(kPolicies);

[[noreturn]] __attribute__((format(printf, 1, 2))) void Fail(const char* format, ...) {
  std::fputs("kvm_exit_fuzz: ", stderr);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

using Input = pvemu::fuzz::FuzzInput;

struct Target {
  std::unique_ptr<kvm::DataPlane> plane;
  std::vector<pvemu::policy::LoadedPolicy> policies;
  size_t current = 0;       // index into kPolicies of the policy in force
  uint64_t generation = 0;  // the last one applied
};

Target& GetTarget() {
  static Target* target = [] {
    auto* t = new Target;
    for (size_t i = 0; i < kNumPolicies; ++i) {
      absl::StatusOr<pvemu::policy::LoadedPolicy> loaded =
          pvemu::policy::ParsePolicy(kPolicies[i], "kvm_exit_fuzz.textproto");
      if (!loaded.ok()) Fail("policy %zu: %s", i, std::string(loaded.status().message()).c_str());
      t->policies.push_back(*std::move(loaded));
    }
    // Standalone Open reads a policy file: policy 0, gone again once loaded.
    std::string dir = (std::filesystem::temp_directory_path() / "pvemu-kvm-fuzz.XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) Fail("mkdtemp %s: %s", dir.c_str(), std::strerror(errno));
    const std::string path = dir + "/policy.textproto";
    if (!(std::ofstream(path) << kPolicies[0])) Fail("cannot write %s", path.c_str());
    kvm::DataPlaneOptions options;
    options.domain = kDomain;
    options.policy = path;
    options.host = "sim";       // PASSTHROUGH reads a profile, never a real MSR
    options.count_msrs = true;  // the per-MSR counting a subscribed plane always does
    absl::StatusOr<std::unique_ptr<kvm::DataPlane>> plane = kvm::DataPlane::Open(options);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    if (!plane.ok()) Fail("open: %s", std::string(plane.status().message()).c_str());
    t->plane = *std::move(plane);
    t->generation = t->plane->generation();
    // The policy verdicts the inputs reached, from the plane's own counts.
    pvemu::fuzz::TheTally().AtExit([t](pvemu::fuzz::Tally& tally) {
      absl::StatusOr<std::vector<pvemu::dispatch::MsrCount>> counts = t->plane->MsrCounts();
      if (!counts.ok()) return;
      for (const pvemu::dispatch::MsrCount& c : *counts) {
        tally.Add(absl::StrCat("verdict: ", c.write ? "wrmsr " : "rdmsr ",
                               pvemu::dispatch::MsrActionName(c.action)),
                  c.count);
      }
    });
    return t;
  }();
  return *target;
}

// Subscribed mode's swap path: a new policy at a new generation, between exits.
void Swap(Target& t, size_t which) {
  const pvemu::policy::LoadedPolicy& p = t.policies[which];
  const uint64_t generation = ++t.generation;
  const absl::Status status = t.plane->Apply(p.policy, p.source, generation);
  if (!status.ok()) {
    Fail("Apply of policy %zu as generation %llu: %s", which,
         static_cast<unsigned long long>(generation), std::string(status.message()).c_str());
  }
  if (t.plane->generation() != generation) {
    Fail("Apply returned OK but the generation is %llu, not %llu",
         static_cast<unsigned long long>(t.plane->generation()),
         static_cast<unsigned long long>(generation));
  }
  t.current = which;
}

// The counts a vCPU must report for the results it gave.
struct Expected {
  uint64_t rdmsr = 0, wrmsr = 0, io = 0, completed = 0, exceptions = 0, device = 0;
};

void CheckStats(const kvm::Vcpu& vcpu, const Expected& e) {
  const pvemu_kvm_stats s = vcpu.stats();
  const struct {
    const char* name;
    uint64_t got, want;
  } counts[] = {
      {"rdmsr", s.rdmsr, e.rdmsr},
      {"wrmsr", s.wrmsr, e.wrmsr},
      {"io", s.io, e.io},
      {"completed", s.completed, e.completed},
      {"exceptions", s.exceptions, e.exceptions},
      {"device", s.device, e.device},
  };
  for (const auto& c : counts) {
    if (c.got != c.want) {
      Fail("vCPU stats: %s is %llu, the exits' results say %llu", c.name,
           static_cast<unsigned long long>(c.got), static_cast<unsigned long long>(c.want));
    }
  }
}

// One input's fake kvm_run mapping, its vCPU and what they must show.
class Mapping {
 public:
  Mapping(Target& t, size_t size, uint8_t fill)
      : t_(t), size_(size), map_(new uint8_t[size]), before_(size) {
    std::memset(map_.get(), fill, size_);
    vcpu_ = t_.plane->NewVcpu(0, size_);
  }
  ~Mapping() { CheckStats(*vcpu_, expected_); }

  struct kvm_run* run() { return reinterpret_cast<struct kvm_run*>(map_.get()); }
  size_t size() const { return size_; }
  uint8_t* bytes() { return map_.get(); }

  void Reopen(uint32_t index) {
    CheckStats(*vcpu_, expected_);
    vcpu_.reset();
    vcpu_ = t_.plane->NewVcpu(index, size_);
    expected_ = Expected{};
  }

  // Hands the exit now in the mapping to the vCPU and checks its answer:
  // - a result pvemu_kvm.h names; -EINVAL (the only negative one) exactly
  //   for an I/O exit of a size other than 1, 2, 4 or with data outside the
  //   mapping past struct kvm_run;
  // - an MSR exit is HANDLED with msr.error 0 or 1 (1 for reason INVAL), and
  //   writes nothing but msr.error and, for RDMSR, msr.data;
  // - NOT_MINE, -EINVAL, DEVICE and OUT leave the whole mapping as it was;
  //   IN writes only its data, [data_offset, data_offset + size * count);
  // - the vCPU's counts (checked when it goes) match these results.
  void Exit(int op) {
    std::memcpy(before_.data(), map_.get(), size_);
    const struct kvm_run& was = *reinterpret_cast<const struct kvm_run*>(before_.data());
    const int r = vcpu_->HandleExit(run());
    if (r != PVEMU_KVM_HANDLED && r != PVEMU_KVM_DEVICE && r != PVEMU_KVM_NOT_MINE &&
        r != -EINVAL) {
      Fail("op %d: exit reason %u returned %d", op, was.exit_reason, r);
    }
    if (pvemu::fuzz::TheTally().on()) Tally(was, r);
    switch (was.exit_reason) {
      case KVM_EXIT_X86_RDMSR:
      case KVM_EXIT_X86_WRMSR:
        CheckMsr(op, was, r);
        break;
      case KVM_EXIT_IO:
        CheckIo(op, was, r);
        break;
      default:
        if (r != PVEMU_KVM_NOT_MINE) {
          Fail("op %d: exit reason %u is not pvemu's, but it returned %d", op, was.exit_reason, r);
        }
        Unchanged(op, "a NOT_MINE exit", 0, size_);
        break;
    }
  }

 private:
  // The exit's kind and pvemu's answer, for PVEMU_FUZZ_TALLY.
  void Tally(const struct kvm_run& was, int r) {
    std::string kind;
    switch (was.exit_reason) {
      case KVM_EXIT_X86_RDMSR:
      case KVM_EXIT_X86_WRMSR:
        kind = absl::StrCat(was.exit_reason == KVM_EXIT_X86_RDMSR ? "rdmsr" : "wrmsr",
                            " reason ", was.msr.reason == KVM_MSR_EXIT_REASON_INVAL   ? "INVAL"
                                        : was.msr.reason == KVM_MSR_EXIT_REASON_UNKNOWN ? "UNKNOWN"
                                        : was.msr.reason == KVM_MSR_EXIT_REASON_FILTER  ? "FILTER"
                                                                                        : "undefined",
                            " -> ", run()->msr.error == 0 ? "completed" : "#GP");
        break;
      case KVM_EXIT_IO:
        kind = absl::StrCat(was.io.direction == KVM_EXIT_IO_IN    ? "in"
                            : was.io.direction == KVM_EXIT_IO_OUT ? "out"
                                                                  : "io direction undefined",
                            was.io.count > 1 ? " string" : "", " -> ",
                            r == PVEMU_KVM_DEVICE    ? "the VMM's device model"
                            : r == PVEMU_KVM_HANDLED ? "answered"
                            : r == -EINVAL           ? "refused, malformed (-EINVAL)"
                                                     : "other");
        break;
      default:
        kind = absl::StrCat("exit reason not pvemu's -> ",
                            r == PVEMU_KVM_NOT_MINE ? "NOT_MINE" : "other");
    }
    pvemu::fuzz::TheTally().Add(kind);
  }

  // Aborts if a byte in [from, to) of the mapping changed during the exit.
  void Unchanged(int op, const char* what, size_t from, size_t to) {
    to = std::min(to, size_);
    if (from >= to || std::memcmp(&map_[from], &before_[from], to - from) == 0) return;
    for (size_t i = from; i < to; ++i) {
      if (map_[i] != before_[i]) {
        Fail("op %d: %s changed byte %zu of the %zu-byte mapping (0x%02x -> 0x%02x)", op, what, i,
             size_, before_[i], map_[i]);
      }
    }
  }

  void CheckMsr(int op, const struct kvm_run& was, int r) {
    const bool write = was.exit_reason == KVM_EXIT_X86_WRMSR;
    const char* what = write ? "a WRMSR exit" : "an RDMSR exit";
    if (r != PVEMU_KVM_HANDLED) Fail("op %d: %s returned %d, not HANDLED", op, what, r);
    const uint8_t error = run()->msr.error;
    if (error > 1) Fail("op %d: %s left msr.error %u (0 or 1 only)", op, what, error);
    if (was.msr.reason == KVM_MSR_EXIT_REASON_INVAL && error != 1) {
      Fail("op %d: %s with reason INVAL (MSR 0x%x) got msr.error %u, not #GP", op, what,
           was.msr.index, error);
    }
    // pvemu answers in msr.error, and an RDMSR in msr.data; nothing else.
    const size_t error_at = offsetof(struct kvm_run, msr.error);
    const size_t data_at = offsetof(struct kvm_run, msr.data);
    Unchanged(op, what, 0, error_at);
    if (write) {
      Unchanged(op, what, error_at + 1, size_);
    } else {
      Unchanged(op, what, error_at + 1, data_at);
      Unchanged(op, what, data_at + sizeof(uint64_t), size_);
    }
    ++(write ? expected_.wrmsr : expected_.rdmsr);
    ++(error == 0 ? expected_.completed : expected_.exceptions);
  }

  void CheckIo(int op, const struct kvm_run& was, int r) {
    ++expected_.io;
    const uint8_t size = was.io.size;
    const uint64_t offset = was.io.data_offset;
    const uint64_t count = was.io.count;
    // What KVM can have made: a 1-, 2- or 4-byte access whose data lies in
    // the mapping past struct kvm_run (no overflow: offset <= size_ first).
    const bool width_ok = size == 1 || size == 2 || size == 4;
    const bool direction_ok =
        was.io.direction == KVM_EXIT_IO_IN || was.io.direction == KVM_EXIT_IO_OUT;
    const bool inside =
        offset >= kRunSize && offset <= size_ && uint64_t{size} * count <= size_ - offset;
    if (!width_ok || !direction_ok || !inside) {
      if (r != -EINVAL) {
        Fail("op %d: I/O exit direction %u size %u count %llu data_offset 0x%llx in a %zu-byte "
             "mapping returned %d, not -EINVAL",
             op, was.io.direction, size, static_cast<unsigned long long>(count),
             static_cast<unsigned long long>(offset), size_, r);
      }
      Unchanged(op, "a refused I/O exit", 0, size_);
      return;
    }
    switch (r) {
      case PVEMU_KVM_DEVICE:
        // The VMM's device model takes the whole access: not a byte written.
        Unchanged(op, "a DEVICE I/O exit", 0, size_);
        ++expected_.device;
        return;
      case PVEMU_KVM_HANDLED:
        if (was.io.direction == KVM_EXIT_IO_OUT) {
          Unchanged(op, "an OUT exit", 0, size_);
        } else {
          const size_t end = static_cast<size_t>(offset + uint64_t{size} * count);
          Unchanged(op, "an IN exit", 0, static_cast<size_t>(offset));
          Unchanged(op, "an IN exit", end, size_);
        }
        ++expected_.completed;
        return;
      default:
        Fail("op %d: a well-formed I/O exit (size %u count %llu data_offset 0x%llx) returned %d",
             op, size, static_cast<unsigned long long>(count),
             static_cast<unsigned long long>(offset), r);
    }
  }

  Target& t_;
  const size_t size_;
  std::unique_ptr<uint8_t[]> map_;  // exactly size_ bytes: ASan's redzone right after
  std::vector<uint8_t> before_;
  std::unique_ptr<kvm::Vcpu> vcpu_;
  Expected expected_;
};

}  // namespace

// Input: u16 extra mapping bytes (mod 3 pages + 1), u8 fill byte, then up to
// 64 operations, each a kind byte (mod 8) and its fields, little-endian:
//   0 RDMSR  index:u32 reason:u32 data:u64 error:u8 (msr.error before the exit)
//   1 WRMSR  the same
//   2 IO     direction:u8 size:u8 port:u16 count:u32 data_offset:u64
//   3 IO     direction:u8 size:u8 port:u16 count:u16 offset:u16
//            (data_offset = sizeof(kvm_run) + offset mod (extra + 1))
//   4 EXIT   exit_reason:u32 (any value; the union is left as it is)
//   5 POKE   at:u16 (mod size) n:u8 then n bytes, clipped to the mapping
//   6 SWAP   b:u8: Apply the policy 1 + (b & 1) after the current one
//   7 VCPU   index:u8 (mod 4): a new Vcpu in place of the current one
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Target& t = GetTarget();
  if (t.current != 0) Swap(t, 0);
  Input in(data, size);
  const size_t extra = in.U16() % (kMaxExtra + 1);
  Mapping m(t, kRunSize + extra, in.U8());
  int swaps = 0;
  for (int op = 0; op < kMaxOps && !in.empty(); ++op) {
    struct kvm_run* run = m.run();
    const uint8_t kind = in.U8() % 8;
    switch (kind) {
      case 0:
      case 1:
        run->exit_reason = kind == 0 ? KVM_EXIT_X86_RDMSR : KVM_EXIT_X86_WRMSR;
        run->msr.index = in.U32();
        run->msr.reason = in.U32();  // undefined bits and combinations included
        run->msr.data = in.U64();
        run->msr.error = in.U8();
        m.Exit(op);
        break;
      case 2:
        run->exit_reason = KVM_EXIT_IO;
        run->io.direction = in.U8();
        run->io.size = in.U8();
        run->io.port = in.U16();
        run->io.count = in.U32();
        run->io.data_offset = in.U64();
        m.Exit(op);
        break;
      case 3:
        // The same exit with its data placed in the mapping, as KVM places it.
        run->exit_reason = KVM_EXIT_IO;
        run->io.direction = in.U8();
        run->io.size = in.U8();
        run->io.port = in.U16();
        run->io.count = in.U16();
        run->io.data_offset = kRunSize + in.U16() % (extra + 1);
        m.Exit(op);
        break;
      case 4:
        run->exit_reason = in.U32();
        m.Exit(op);
        break;
      case 5: {
        const size_t at = in.U16() % m.size();
        const size_t n = in.U8();
        for (size_t i = 0; i < n; ++i) {
          const uint8_t b = in.U8();
          if (at + i < m.size()) m.bytes()[at + i] = b;
        }
        break;
      }
      case 6: {
        const uint8_t b = in.U8();
        if (swaps++ < kMaxSwaps) Swap(t, (t.current + 1 + (b & 1)) % kNumPolicies);
        break;
      }
      default:
        m.Reopen(in.U8() % kVcpus);
        break;
    }
  }
  return 0;
}
