// Fuzzes the C ABI (kvm/pvemu_kvm.h) as a VMM calls it: random sequences of
// pvemu_kvm_* calls with NULLs, sizes from older, newer or careless callers,
// wrong descriptors and malformed exits. KVM is a stand-in: this binary's
// ioctl() interposes libc's process-wide, answers the KVM ioctls on a few fake
// descriptors as the input says, and forwards any other descriptor to the
// kernel. Results must match the header's contract, else abort(). Left out:
// what the contract forbids (use after close, a handle closed before its
// vCPUs), and to stay hermetic a server, host "linux" and a capture that opens.
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "pvemu_kvm.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

[[noreturn]] __attribute__((format(printf, 1, 2))) void Die(const char* format,
                                                            ...) {
  std::fputs("capi_fuzz: ", stderr);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

// Off by default: the library maps an ioctl's errno through absl::StatusCode,
// which keeps only some of them (EFAULT comes back as EINVAL, EPERM as
// EACCES, ...), where pvemu_kvm_setup_vm promises "their errno".
#ifdef PVEMU_CAPI_FUZZ_STRICT_ERRNO
constexpr bool kStrictErrno = true;
#else
constexpr bool kStrictErrno = false;
#endif

// ---------------------------------------------------------------------------
// The stand-in for KVM.

// Above any descriptor the kernel hands out (fs.nr_open is at most
// 1073741816), so that no real file is ever taken for one of them.
constexpr int kFdBase = 1 << 30;
constexpr int kKvmFd = kFdBase;        // /dev/kvm
constexpr int kVmFd = kFdBase + 1;     // from KVM_CREATE_VM
constexpr int kVcpuFd0 = kFdBase + 2;  // from KVM_CREATE_VCPU, kVcpuFds of them
constexpr int kVcpuFds = 4;
constexpr int kClosedFd = kVcpuFd0 + kVcpuFds;  // EBADF
constexpr int kFdEnd = kClosedFd + 1;

enum class FdKind { kKvm, kVm, kVcpu, kClosed };

FdKind KindOf(int fd) {
  if (fd == kKvmFd) return FdKind::kKvm;
  if (fd == kVmFd) return FdKind::kVm;
  if (fd == kClosedFd) return FdKind::kClosed;
  return FdKind::kVcpu;
}

// The kernel's layout of struct kvm_cpuid2 (in C++ <linux/kvm.h> gives it 12
// bytes): the ioctl numbers encode it, so KVM answers these numbers only.
struct CpuidHeader {
  uint32_t nent;
  uint32_t padding;
};
constexpr unsigned long kGetSupportedCpuid = _IOWR(KVMIO, 0x05, CpuidHeader);
constexpr unsigned long kSetCpuid2 = _IOW(KVMIO, 0x90, CpuidHeader);
constexpr uint32_t kMaxCpuidEntries = 256;  // KVM_MAX_CPUID_ENTRIES
constexpr uint64_t kMsrExitReasons = KVM_MSR_EXIT_REASON_FILTER |
                                     KVM_MSR_EXIT_REASON_UNKNOWN |
                                     KVM_MSR_EXIT_REASON_INVAL;

// The ioctls answered, in the order the STUB operation numbers them.
enum StubIoctl {
  kMmapSize,
  kSupportedCpuid,
  kSetCpuid,
  kCheckExtension,
  kEnableCap,
  kSetMsrFilter,
  kGetRegs,
  kNumStubIoctls,
};

// A real descriptor that is not KVM's: the kernel answers ENOTTY.
int g_devnull = -1;

struct Stub {
  // What KVM answers, as the input steers it.
  int err[kNumStubIoctls] = {};  // 0: success, else the errno
  int mmap_size = 3 * 4096;
  uint32_t cpuid_nent = 40;  // leaves KVM_GET_SUPPORTED_CPUID lists
  uint8_t cpuid_seed = 0;
  bool user_space_msr = true, msr_filter = true;
  uint64_t rip = 0x1000;
  // What the library did during the call in progress.
  int calls = 0;
  unsigned long last_request = 0;
  int last_rc = 0;
  int last_errno = 0;
  bool extension_missing = false;  // a KVM_CHECK_EXTENSION said no or failed
  int last_mmap_size = 0;
  int regs_fd = -1;  // the vCPU descriptor of the exit being handled
  std::vector<kvm_cpuid_entry2>
      supported;                      // the last KVM_GET_SUPPORTED_CPUID answer
  std::vector<kvm_cpuid_entry2> set;  // the last KVM_SET_CPUID2 that succeeded
};
Stub g_stub;

void ResetStubAnswers() {
  for (int& e : g_stub.err) e = 0;
  g_stub.mmap_size = 3 * 4096;
  g_stub.cpuid_nent = 40;
  g_stub.cpuid_seed = 0;
  g_stub.user_space_msr = g_stub.msr_filter = true;
  g_stub.rip = 0x1000;
  g_stub.regs_fd = -1;
}

// Before each library call whose ioctls the checks read.
void ResetStubTrace() {
  g_stub.calls = 0;
  g_stub.last_request = 0;
  g_stub.last_rc = 0;
  g_stub.last_errno = 0;
  g_stub.extension_missing = false;
  g_stub.last_mmap_size = 0;
  g_stub.set.clear();
}

void Record(unsigned long request, int rc, int err) {
  ++g_stub.calls;
  g_stub.last_request = request;
  g_stub.last_rc = rc;
  g_stub.last_errno = rc < 0 ? err : 0;
  if (request == KVM_CHECK_EXTENSION && rc <= 0)
    g_stub.extension_missing = true;
}

// KVM's leaves: distinct functions, leaf 0 (a vendor string) first unless
// the seed leaves it out, and values from the seed.
void FillSupported() {
  static constexpr uint32_t kLeaves[] = {
      0,          1,          7,          0xa,        0xd,
      0x40000000, 0x40000001, 0x80000000, 0x80000001, 0x80000008};
  static constexpr const char* kVendors[] = {"GenuineIntel", "AuthenticAMD",
                                             "HygonGenuine"};
  const bool skip_leaf0 = (g_stub.cpuid_seed & 1) != 0;
  const uint32_t* leaves = kLeaves + (skip_leaf0 ? 1 : 0);
  const uint32_t n_leaves =
      static_cast<uint32_t>(std::size(kLeaves)) - (skip_leaf0 ? 1 : 0);
  uint32_t x = 0x9e3779b9u * (uint32_t{g_stub.cpuid_seed} + 1);
  g_stub.supported.assign(g_stub.cpuid_nent, kvm_cpuid_entry2{});
  for (uint32_t i = 0; i < g_stub.cpuid_nent; ++i) {
    kvm_cpuid_entry2& e = g_stub.supported[i];
    e.function = i < n_leaves ? leaves[i] : 0x100 + i;
    if (e.function == 7 || e.function == 0xd)
      e.flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX;
    uint32_t* regs[] = {&e.eax, &e.ebx, &e.ecx, &e.edx};
    for (uint32_t* r : regs) {
      x = x * 1664525u + 1013904223u;
      *r = x;
    }
    if (e.function == 0) {
      const char* id = kVendors[(g_stub.cpuid_seed >> 1) % std::size(kVendors)];
      e.eax = 0xd;
      std::memcpy(&e.ebx, id, 4);
      std::memcpy(&e.edx, id + 4, 4);
      std::memcpy(&e.ecx, id + 8, 4);
    }
  }
}

// KVM's answer to `request` on the fake descriptor `fd`: its value, or -1
// and *err. What KVM would refuse because the library built it wrong aborts.
int Answer(int fd, unsigned long request, unsigned long arg, int* err) {
  const FdKind kind = KindOf(fd);
  if (kind == FdKind::kClosed) {
    *err = EBADF;
    return -1;
  }
  auto fails = [&](StubIoctl which) {
    *err = g_stub.err[which];
    return *err != 0;
  };
  switch (request) {
    case KVM_GET_VCPU_MMAP_SIZE:
      if (kind != FdKind::kKvm) break;
      if (fails(kMmapSize)) return -1;
      g_stub.last_mmap_size = g_stub.mmap_size;
      return g_stub.mmap_size;  // errno untouched, as on any success
    case kGetSupportedCpuid: {
      if (kind != FdKind::kKvm) break;
      if (fails(kSupportedCpuid)) return -1;
      auto* header = reinterpret_cast<CpuidHeader*>(arg);
      FillSupported();
      if (header->nent < g_stub.supported.size()) {
        *err = E2BIG;  // as KVM: the caller retries with a larger table
        return -1;
      }
      if (!g_stub.supported.empty()) {
        std::memcpy(reinterpret_cast<char*>(arg) + sizeof(CpuidHeader),
                    g_stub.supported.data(),
                    g_stub.supported.size() * sizeof(kvm_cpuid_entry2));
      }
      header->nent = static_cast<uint32_t>(g_stub.supported.size());
      return 0;
    }
    case kSetCpuid2: {
      if (kind != FdKind::kVcpu) break;
      const auto* header = reinterpret_cast<const CpuidHeader*>(arg);
      if (header->nent > kMaxCpuidEntries) {
        *err = E2BIG;
        return -1;
      }
      // KVM copies every entry the header counts (ASan: all must be there).
      const auto* entries = reinterpret_cast<const kvm_cpuid_entry2*>(
          reinterpret_cast<const char*>(arg) + sizeof(CpuidHeader));
      std::vector<kvm_cpuid_entry2> set(entries, entries + header->nent);
      if (fails(kSetCpuid)) return -1;
      g_stub.set = std::move(set);
      return 0;
    }
    case KVM_CHECK_EXTENSION: {
      if (kind != FdKind::kKvm && kind != FdKind::kVm) break;
      if (fails(kCheckExtension)) return -1;
      const uint32_t cap = static_cast<uint32_t>(arg);
      if (cap == KVM_CAP_X86_USER_SPACE_MSR)
        return g_stub.user_space_msr ? 1 : 0;
      if (cap == KVM_CAP_X86_MSR_FILTER) return g_stub.msr_filter ? 1 : 0;
      return 0;
    }
    case KVM_ENABLE_CAP: {
      if (kind == FdKind::kVcpu) {
        *err = EINVAL;  // no vCPU capability of this name
        return -1;
      }
      if (kind != FdKind::kVm) break;
      const auto* cap = reinterpret_cast<const kvm_enable_cap*>(arg);
      if (cap->cap != KVM_CAP_X86_USER_SPACE_MSR) {
        *err = EINVAL;
        return -1;
      }
      // pvemu_kvm_setup_vm: "with the reasons FILTER, UNKNOWN and INVAL".
      if (cap->flags != 0 || cap->args[0] != kMsrExitReasons) {
        Die("KVM_ENABLE_CAP(KVM_CAP_X86_USER_SPACE_MSR) flags %#x args[0] "
            "%#llx, want 0 and %#llx",
            cap->flags, static_cast<unsigned long long>(cap->args[0]),
            static_cast<unsigned long long>(kMsrExitReasons));
      }
      if (fails(kEnableCap)) return -1;
      return 0;
    }
    case KVM_X86_SET_MSR_FILTER: {
      if (kind != FdKind::kVm) break;
      const auto* filter = reinterpret_cast<const kvm_msr_filter*>(arg);
      if ((filter->flags & ~uint32_t{KVM_MSR_FILTER_DEFAULT_DENY}) != 0) {
        Die("KVM_X86_SET_MSR_FILTER flags %#x: KVM refuses them",
            filter->flags);
      }
      unsigned sum = 0;
      for (int i = 0; i < KVM_MSR_FILTER_MAX_RANGES; ++i) {
        const kvm_msr_filter_range& r = filter->ranges[i];
        if (r.nmsrs == 0) continue;
        const uint32_t access = KVM_MSR_FILTER_READ | KVM_MSR_FILTER_WRITE;
        // KVM copies BITS_TO_LONGS(nmsrs) longs of each bitmap.
        const uint64_t bytes = (uint64_t{r.nmsrs} + 63) / 64 * 8;
        if (r.flags == 0 || (r.flags & ~access) != 0 ||
            bytes > KVM_MSR_FILTER_MAX_BITMAP_SIZE || r.bitmap == nullptr) {
          Die("KVM_X86_SET_MSR_FILTER range %d (flags %#x, base %#x, nmsrs "
              "%#x): KVM refuses it",
              i, r.flags, r.base, r.nmsrs);
        }
        for (uint64_t b = 0; b < bytes; ++b) sum += r.bitmap[b];
      }
      volatile unsigned sink = sum;
      (void)sink;
      if (fails(kSetMsrFilter)) return -1;
      return 0;
    }
    case KVM_GET_REGS: {
      if (kind != FdKind::kVcpu) break;
      // pvemu_kvm_vcpu_open: the RIP is read on `vcpu_fd`, from the thread
      // handling that vCPU's exit.
      if (fd != g_stub.regs_fd) {
        Die("KVM_GET_REGS on descriptor %d; the exit being handled is "
            "descriptor %d's",
            fd, g_stub.regs_fd);
      }
      if (fails(kGetRegs)) return -1;
      kvm_regs regs;
      std::memset(&regs, 0, sizeof regs);
      regs.rip = g_stub.rip;
      std::memcpy(reinterpret_cast<void*>(arg), &regs, sizeof regs);
      return 0;
    }
    default:
      break;
  }
  *err = ENOTTY;
  return -1;
}

}  // namespace

// Interposes libc's ioctl for the whole process, the library's calls included.
extern "C" int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list args;
  va_start(args, request);
  const unsigned long arg = va_arg(args, unsigned long);
  va_end(args);
  if (fd >= kFdBase && fd < kFdEnd) {
    int err = 0;
    const int rc = Answer(fd, request, arg, &err);
    Record(request, rc, err);
    if (rc < 0) errno = err;
    return rc;
  }
  const long rc = syscall(SYS_ioctl, fd, request, arg);
  if (g_devnull >= 0 && fd == g_devnull)
    Record(request, static_cast<int>(rc), errno);
  return static_cast<int>(rc);
}

namespace {

// ---------------------------------------------------------------------------
// Policies and paths, written once into a directory of our own.

// MSR 0x123456xx are test MSRs no CPU has; the sim host profiles model one
// port device, 0x92 (reads 0x02).
constexpr const char* kEnforcePolicy = R"pb(
  default {
    unknown_msr: UNKNOWN_GP
    io_port { first: 0x3f8 last: 0x3ff }
    io_port { first: 0x90 last: 0x93 }
    msr { msr: "0x12345600" read: CONST value: 0x5 write: GP }
    msr { msr: "0x12345601" read: ZERO write: IGNORE }
    msr { msr: "0x12345602" read: GP write: GP }
    msr { msr: "0x12345604" read: SHADOW write: SHADOW value: 0x1000 }
  }
  domain {
    domain: 1
    io_port { first: 0x510 last: 0x513 }
    msr {
      msr: "0x12345603"
      read: CONST
      value: 0x0123456789abcdef
      write: IGNORE
    }
  }
)pb";
constexpr const char* kLearnPolicy = R"pb(
  default {
    unknown_msr: UNKNOWN_GP
    io_port { first: 0x3f8 last: 0x3ff }
    msr { msr: "0x12345600" read: CONST value: 0x5 write: GP }
    msr { msr: "0x12345602" read: GP write: GP }
  }
  domain { domain: 1 mode: LEARN }
)pb";
constexpr const char* kRelaxedPolicy = R"pb(
  default {
    unknown_msr: UNKNOWN_RELAXED
    io_port { first: 0x70 last: 0x71 }
  }
)pb";
constexpr const char* kCpuidPolicy = R"pb(
  default {
    unknown_msr: UNKNOWN_GP
    guest_vendor: HYGON
    cpuid {
      leaf: 0x40000000
      source: CONST
      set { eax: 0x40000001 ebx: 0x6d657670 ecx: 0x65742d75 edx: 0x21737473 }
    }
    cpuid {
      leaf: 0x40000001
      source: CONST
      set { eax: 0x00c0ffee ebx: 0x1 ecx: 0x2 edx: 0x3 }
    }
    cpuid {
      leaf: 0x80000008
      source: HOST
      clear { eax: 0xff00 }
    }
  }
)pb";
constexpr const char* kInvalidPolicy =
    "default { unknown_msr: UNKNOWN_GP no_such_field: 1 }\n";
// 17 filter ranges, one more than KVM allows (tests/kvm/policies).
constexpr const char* kFilter17Policy = R"pb(
  default {
    unknown_msr: UNKNOWN_GP
    vpmu: true
    msr { msr: "0xf000010" read: CONST value: 0x1 }
    msr { msr: "0x1e000010" read: CONST value: 0x2 }
    msr { msr: "0x2d000010" read: CONST value: 0x3 }
    msr { msr: "0x3c000010" read: CONST value: 0x4 }
    msr { msr: "0x4b000010" read: CONST value: 0x5 }
    msr { msr: "0x5a000010" read: CONST value: 0x6 }
    msr { msr: "0x69000010" read: CONST value: 0x7 }
    msr { msr: "0x78000010" read: CONST value: 0x8 }
    msr { msr: "0x87000010" read: CONST value: 0x9 }
    msr { msr: "0x96000010" read: CONST value: 0xa }
    msr { msr: "0xa5000010" read: CONST value: 0xb }
    msr { msr: "0xb4000010" read: CONST value: 0xc }
    msr { msr: "0xc3000010" read: CONST value: 0xd }
    msr { msr: "0xd2000010" read: CONST value: 0xe }
    msr { msr: "0xe1000010" read: CONST value: 0xf }
    msr { msr: "0xf0000010" read: CONST value: 0x10 }
    msr { msr: "0xff000010" read: CONST value: 0x11 }
  }
)pb";
// Leaf 0 says GenuineIntel, guest_vendor says AMD.
constexpr const char* kVendorConflictPolicy = R"pb(
  default {
    guest_vendor: AMD
    cpuid {
      leaf: 0
      source: CONST
      set { eax: 0xd ebx: 0x756e6547 ecx: 0x6c65746e edx: 0x49656e69 }
    }
  }
)pb";
constexpr const char* kBadProfile = "this is not a host profile {\n";

struct File {
  const char* name;
  const char* text;
};
constexpr File kFiles[] = {
    {"enforce.textproto", kEnforcePolicy},
    {"learn.textproto", kLearnPolicy},
    {"relaxed.textproto", kRelaxedPolicy},
    {"cpuid.textproto", kCpuidPolicy},
    {"invalid.textproto", kInvalidPolicy},
    {"filter-17-ranges.textproto", kFilter17Policy},
    {"vendor-conflict.textproto", kVendorConflictPolicy},
    {"bad-profile.textproto", kBadProfile},
};

std::string& Dir() {
  static std::string* dir = new std::string;
  return *dir;
}

void RemoveOurFiles() {
  std::error_code ec;
  for (const File& f : kFiles)
    std::filesystem::remove(Dir() + "/" + f.name, ec);
  std::filesystem::remove(Dir(),
                          ec);  // only if empty: nothing of anyone else's
}

void Setup() {
  static const bool done = [] {
    std::string dir =
        (std::filesystem::temp_directory_path() / "pvemu-capi-fuzz.XXXXXX")
            .string();
    if (mkdtemp(dir.data()) == nullptr)
      Die("mkdtemp %s: %s", dir.c_str(), std::strerror(errno));
    Dir() = dir;
    for (const File& f : kFiles) {
      std::ofstream out(dir + "/" + f.name, std::ios::binary);
      out << f.text;
      if (!out) Die("cannot write %s/%s", dir.c_str(), f.name);
    }
    std::atexit(RemoveOurFiles);
    g_devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (g_devnull < 0) Die("open /dev/null: %s", std::strerror(errno));
    return true;
  }();
  (void)done;
}

enum class PolicyId { kNone, kEnforce, kLearn, kRelaxed, kCpuid, kOther };

// What an open with one option alone gives: 0 (opens), an errno, or kEither
// (the header does not say; the comment says what the code gives).
constexpr int kEither = -1;

struct PolicyChoice {
  const char* name;  // nullptr: NULL
  bool file;         // a path under our directory
  PolicyId id;
  int result;
};
constexpr PolicyChoice kPolicyChoices[] = {
    {nullptr, false, PolicyId::kNone, EINVAL},  // neither policy nor server
    {"", false, PolicyId::kNone, EINVAL},
    {"kvm", false, PolicyId::kOther, kEither},  // shipped
    {"kvm-ignore-msrs", false, PolicyId::kOther, kEither},
    {"default", false, PolicyId::kOther, kEither},
    {"no-such-policy", false, PolicyId::kOther, EINVAL},
    {"enforce.textproto", true, PolicyId::kEnforce, 0},
    {"learn.textproto", true, PolicyId::kLearn, 0},
    {"relaxed.textproto", true, PolicyId::kRelaxed, 0},
    {"cpuid.textproto", true, PolicyId::kCpuid, kEither},
    {"invalid.textproto", true, PolicyId::kOther, EINVAL},
    {"missing.textproto", true, PolicyId::kOther, ENOENT},
    {"", true, PolicyId::kOther, EINVAL},  // our directory: not a file
    // ENOTDIR: -ECONNREFUSED (base/textproto.cc maps it to Unavailable).
    {"enforce.textproto/x.textproto", true, PolicyId::kOther, kEither},
    {"filter-17-ranges.textproto", true, PolicyId::kOther, EINVAL},
    {"vendor-conflict.textproto", true, PolicyId::kOther, EINVAL},
};

struct StringChoice {
  const char* name;
  bool file;
  int result;
};
// Never "linux": real MSRs.
constexpr StringChoice kHosts[] = {
    {nullptr, false, 0},    {"", false, 0},           {"sim", false, 0},
    {"xen", false, EINVAL}, {"bogus", false, EINVAL},
};
constexpr StringChoice kProfiles[] = {
    {nullptr, false, 0},
    {"", false, 0},
    {"intel-xeon-e-2136", false, 0},
    {"amd-epyc-7443p", false, 0},
    {"no-such-profile", false, EINVAL},
    {"missing-profile.textproto", true, ENOENT},
    {"bad-profile.textproto", true, EINVAL},
};
// Never one that opens (a capture writes and fsyncs a file at every close).
constexpr StringChoice kCaptures[] = {
    {nullptr, false, 0},
    {"", false, 0},
    // A missing directory: -EBUSY (base::ErrnoToStatus: ENOENT is
    // FailedPrecondition).
    {"no-such-dir/capture.traps", true, kEither},
    {"capture.log", true, EINVAL},  // neither .traps nor .textproto
};
// Only beside a policy: never a connection.
constexpr const char* kServers[] = {nullptr, "",
                                    "unix:/nonexistent/pvemu.sock"};

// ---------------------------------------------------------------------------
// The input and the state of one run.
using Input = pvemu::fuzz::FuzzInput;

struct Counts {
  uint64_t rdmsr = 0, wrmsr = 0, io = 0, completed = 0, exceptions = 0,
           device = 0;
  void Add(const Counts& c) {
    rdmsr += c.rdmsr, wrmsr += c.wrmsr, io += c.io;
    completed += c.completed, exceptions += c.exceptions, device += c.device;
  }
};

constexpr int kHandles = 3;
constexpr int kVcpus = 4;
constexpr int kMaxOps = 64;

struct Handle {
  pvemu_kvm* kvm = nullptr;
  PolicyId policy = PolicyId::kNone;
  uint32_t domain = 0;
  bool counts_msrs = false;
  bool vm_set_up = false;
  uint64_t generation = 0;
  Counts totals;             // every vCPU's exits, open or closed
  uint64_t msr_decided = 0;  // MSR exits that reached the policy (not INVAL)
  int filter_len = -1;       // pvemu_kvm_filter_text's length, once known
};

struct Vcpu {
  pvemu_kvm_vcpu* vcpu = nullptr;
  int handle = -1;
  int fd = -1;
  unsigned char* run = nullptr;  // the "mapping", exactly run_size bytes
  size_t run_size = 0;
  Counts counts;
};

struct State {
  Handle handles[kHandles];
  Vcpu vcpus[kVcpus];
  std::string last_error;  // what pvemu_kvm_last_error() must say
};

pvemu_kvm* const kKvmSentinel =
    reinterpret_cast<pvemu_kvm*>(uintptr_t{0x5e471e10});
pvemu_kvm_vcpu* const kVcpuSentinel =
    reinterpret_cast<pvemu_kvm_vcpu*>(uintptr_t{0x5e471e20});

// pvemu_kvm_last_error(): a failing call's message, non-empty, and kept until
// the next failing call.
void After(State& s, const char* call, int rc) {
  const char* message = pvemu_kvm_last_error();
  if (message == nullptr) Die("%s: pvemu_kvm_last_error() is NULL", call);
  if (rc < 0) {
    if (*message == 0)
      Die("%s returned %d with an empty pvemu_kvm_last_error()", call, rc);
    s.last_error = message;
  } else if (s.last_error != message) {
    Die("%s succeeded (%d) but pvemu_kvm_last_error() changed from \"%s\" to "
        "\"%s\"",
        call, rc, s.last_error.c_str(), message);
  }
}

void ExpectErrno(const char* call, int rc, int err) {
  if (rc != -err)
    Die("%s returned %d, want -%d (%s)", call, rc, err, std::strerror(err));
}

void ExpectFailure(const char* call, int rc) {
  if (rc >= 0) Die("%s returned %d, want a negative errno", call, rc);
}

// An ioctl's errno that survives the library's trip through absl::StatusCode.
bool RoundTrips(int err) {
  switch (err) {
    case EINVAL:
    case ENOENT:
    case EACCES:
    case EOPNOTSUPP:
    case ETIMEDOUT:
    case ECONNREFUSED:
    case ENOMEM:
    case EEXIST:
    case EBUSY:
    case ERANGE:
    case EIO:
      return true;
    default:
      return false;
  }
}

void CloseVcpu(State& s, int slot) {
  Vcpu& v = s.vcpus[slot];
  errno = 0;
  pvemu_kvm_vcpu_close(v.vcpu);  // NULL for an empty slot: a no-op
  After(s, "pvemu_kvm_vcpu_close", 0);
  std::free(v.run);
  v = Vcpu{};
}

// A handle's vCPUs first, as pvemu_kvm_close requires.
void CloseHandle(State& s, int slot) {
  for (int v = 0; v < kVcpus; ++v) {
    if (s.vcpus[v].vcpu != nullptr && s.vcpus[v].handle == slot)
      CloseVcpu(s, v);
  }
  errno = 0;
  pvemu_kvm_close(s.handles[slot].kvm);  // NULL for an empty slot: a no-op
  After(s, "pvemu_kvm_close", 0);
  s.handles[slot] = Handle{};
}

pvemu_kvm* HandleArg(State& s, uint8_t b) {
  const int slot = b % (kHandles + 1);
  return slot < kHandles ? s.handles[slot].kvm : nullptr;
}

int PickFd(uint8_t b) {
  switch (b % 11) {
    case 0:
      return kKvmFd;
    case 1:
      return kVmFd;
    case 2:
    case 3:
    case 4:
    case 5:
      return kVcpuFd0 + (b % 11 - 2);
    case 6:
      return kClosedFd;
    case 7:
      return g_devnull;
    case 8:
      return -1;
    case 9:
      return INT_MIN;
    default:
      return -2;
  }
}

// ---------------------------------------------------------------------------
// pvemu_kvm_open

void OpOpen(State& s, Input& in) {
  const int slot = in.U8() % kHandles;
  const uint8_t flags = in.U8();
  const uint8_t size_sel = in.U8();
  const uint8_t domain_sel = in.U8();
  const PolicyChoice& policy =
      kPolicyChoices[in.U8() % std::size(kPolicyChoices)];
  const uint8_t server_sel = in.U8();
  const StringChoice& host = kHosts[in.U8() % std::size(kHosts)];
  const StringChoice& profile = kProfiles[in.U8() % std::size(kProfiles)];
  const StringChoice& capture = kCaptures[in.U8() % std::size(kCaptures)];
  const uint8_t timeout = in.U8();
  const uint8_t extra = in.U8();

  constexpr uint32_t kFull = sizeof(pvemu_kvm_options);
  constexpr uint32_t kFirst =
      offsetof(pvemu_kvm_options, host_profile) + sizeof(char*);
  constexpr uint32_t kWithCapture =
      offsetof(pvemu_kvm_options, capture) + sizeof(char*);
  constexpr uint32_t kWithCount =
      offsetof(pvemu_kvm_options, count_msrs) + sizeof(uint32_t);
  static constexpr uint32_t kSizes[] = {
      kFull,       kFull,      kFull,     kFull + 8, kFirst, kWithCapture,
      kWithCount,  kFirst - 1, 0,         4,         4096,   4097,
      0xffffffffu, kFirst + 4, kFull + 1, 0};
  uint32_t size = kSizes[size_sel % 16];
  if (size_sel % 16 == 15) size = in.U32();
  static constexpr uint32_t kDomains[] = {0, 1, 1, 2, 7, 0};
  uint32_t domain = kDomains[domain_sel % 6];
  if (domain_sel % 6 == 5) domain = in.U32();

  auto path = [&](const char* name, bool file) -> std::string {
    return file ? Dir() + "/" + name : std::string(name == nullptr ? "" : name);
  };
  const std::string policy_s = path(policy.name, policy.file);
  const std::string host_s = path(host.name, host.file);
  const std::string profile_s = path(profile.name, profile.file);
  const std::string capture_s = path(capture.name, capture.file);
  const bool policy_set = !policy_s.empty();
  const char* server = kServers[server_sel % 3];
  if (!policy_set && server != nullptr && *server != 0)
    server = "";  // no network, ever

  pvemu_kvm_options o;
  std::memset(&o, 0, sizeof o);
  o.size = size;
  o.domain = domain;
  o.policy =
      policy.name == nullptr && !policy.file ? nullptr : policy_s.c_str();
  o.server = server;
  o.connect_timeout_ms = timeout;
  o.host = host.name == nullptr ? nullptr : host_s.c_str();
  o.host_profile = profile.name == nullptr ? nullptr : profile_s.c_str();
  o.capture = capture.name == nullptr ? nullptr : capture_s.c_str();
  o.count_msrs = (flags & 4) != 0 ? 1 : (flags & 16) != 0 ? 0x100 : 0;

  // The caller's struct is exactly as large as its size says (ASan sees a
  // read past it); a size that was never set goes with this header's struct.
  const size_t alloc = size < 4 ? 4 : size <= 4096 ? size : kFull;
  auto* block = static_cast<unsigned char*>(std::calloc(1, alloc));
  std::memcpy(block, &o, alloc < kFull ? alloc : kFull);
  if ((flags & 32) != 0) {
    // The padding after connect_timeout_ms and after count_msrs: no field.
    for (size_t i = offsetof(pvemu_kvm_options, connect_timeout_ms) + 4;
         i < offsetof(pvemu_kvm_options, host) && i < alloc; ++i) {
      block[i] = 0xff;
    }
    for (size_t i = kWithCount; i < kFull && i < alloc; ++i) block[i] = 0xff;
  }
  bool newer_field_set = false;
  if ((flags & 8) != 0 && alloc > kFull) {
    block[kFull + extra % (alloc - kFull)] =
        static_cast<unsigned char>(extra | 1);
    newer_field_set = true;
  }
  std::memcpy(block, &size, sizeof size);
  const bool null_options = (flags & 1) != 0;
  const bool null_out = (flags & 2) != 0;

  CloseHandle(s, slot);  // the slot's handle, if any: then a fresh one
  pvemu_kvm* kvm = kKvmSentinel;
  errno = 0;
  const int rc = pvemu_kvm_open(
      null_options ? nullptr : reinterpret_cast<pvemu_kvm_options*>(block),
      null_out ? nullptr : &kvm);
  std::free(block);
  After(s, "pvemu_kvm_open", rc);
  if (rc < 0 && !null_out && kvm != nullptr && kvm != kKvmSentinel) {
    Die("pvemu_kvm_open returned %d but left a handle in *out", rc);
  }

  // The argument checks come first, then the options.
  if (null_options || null_out || size < kFirst || size > 4096) {
    return ExpectErrno("pvemu_kvm_open (bad arguments or options->size)", rc,
                       EINVAL);
  }
  if (newer_field_set)
    return ExpectErrno("pvemu_kvm_open (a newer field set)", rc, E2BIG);
  std::vector<int> errs;  // what a certain failure may return
  bool either = false;    // a choice the header does not settle
  auto option = [&](int result) {
    if (result == kEither) either = true;
    if (result > 0) errs.push_back(result);
  };
  const bool server_set = server != nullptr && *server != 0;
  if (policy_set == server_set) {
    option(EINVAL);  // exactly one of policy and server
  } else {
    option(policy.result);
  }
  option(host.result);
  option(profile.result);
  if (size >= kWithCapture) option(capture.result);
  if (!errs.empty()) {
    ExpectFailure("pvemu_kvm_open (bad options)", rc);
    if (!either) {
      bool listed = false;
      for (int e : errs) listed = listed || rc == -e;
      if (!listed)
        Die("pvemu_kvm_open returned %d (%s), not one of the options' errors",
            rc, pvemu_kvm_last_error());
    }
    return;
  }
  if (!either && rc != 0) {
    Die("pvemu_kvm_open of valid options (policy %s, host %s, profile %s) "
        "returned %d: %s",
        policy_s.c_str(), host_s.c_str(), profile_s.c_str(), rc,
        pvemu_kvm_last_error());
  }
  if (rc < 0) return;
  if (rc != 0) Die("pvemu_kvm_open returned %d", rc);
  if (null_out || kvm == nullptr || kvm == kKvmSentinel)
    Die("pvemu_kvm_open returned 0 without a handle");
  Handle& h = s.handles[slot];
  h.kvm = kvm;
  h.policy = policy.id;
  h.domain = domain;
  h.counts_msrs = size >= kWithCount && o.count_msrs != 0;
  h.generation = pvemu_kvm_generation(kvm);
  After(s, "pvemu_kvm_generation", 0);
}

// ---------------------------------------------------------------------------
// pvemu_kvm_setup_vm, pvemu_kvm_vcpu_open

void OpSetupVm(State& s, Input& in) {
  const uint8_t slot_b = in.U8();
  const int fd = PickFd(in.U8());
  pvemu_kvm* kvm = HandleArg(s, slot_b);
  ResetStubTrace();
  errno = 0;
  const int rc = pvemu_kvm_setup_vm(kvm, fd);
  After(s, "pvemu_kvm_setup_vm", rc);
  if (kvm == nullptr || fd < 0)
    return ExpectErrno("pvemu_kvm_setup_vm (NULL or fd < 0)", rc, EINVAL);
  Handle& h = s.handles[slot_b % (kHandles + 1)];
  if (h.vm_set_up) {
    // The header does not say; the code refuses a second VM with -EBUSY.
    return ExpectFailure("pvemu_kvm_setup_vm (set up already)", rc);
  }
  if (g_stub.extension_missing) {
    return ExpectErrno(
        "pvemu_kvm_setup_vm (no KVM_CAP_X86_USER_SPACE_MSR or MSR_FILTER)", rc,
        EOPNOTSUPP);
  }
  if (g_stub.calls > 0 && g_stub.last_rc < 0) {
    const int err = g_stub.last_errno;
    if (kStrictErrno || RoundTrips(err)) {
      return ExpectErrno("pvemu_kvm_setup_vm (an ioctl failed: its errno)", rc,
                         err);
    }
    return ExpectFailure("pvemu_kvm_setup_vm (an ioctl failed)", rc);
  }
  if (rc != 0)
    Die("pvemu_kvm_setup_vm returned %d though KVM said yes to all: %s", rc,
        pvemu_kvm_last_error());
  if (g_stub.last_request != KVM_X86_SET_MSR_FILTER) {
    Die("pvemu_kvm_setup_vm succeeded without installing the MSR filter (last "
        "ioctl %#lx)",
        g_stub.last_request);
  }
  h.vm_set_up = true;
}

const kvm_cpuid_entry2* FindLeaf(const std::vector<kvm_cpuid_entry2>& v,
                                 uint32_t function) {
  for (const kvm_cpuid_entry2& e : v) {
    if (e.function == function) return &e;
  }
  return nullptr;
}

// "Leaves the policy does not set are KVM's", and what cpuid.textproto sets.
void CheckSetCpuid(PolicyId policy) {
  const std::vector<kvm_cpuid_entry2>& supported = g_stub.supported;
  const std::vector<kvm_cpuid_entry2>& set = g_stub.set;
  for (const kvm_cpuid_entry2& a : supported) {
    bool found = false;
    for (const kvm_cpuid_entry2& b : set) {
      if (b.function == a.function && b.index == a.index &&
          b.flags == a.flags) {
        found = true;
        break;
      }
    }
    if (!found)
      Die("KVM_SET_CPUID2 left out KVM's leaf %#x.%u", a.function, a.index);
  }
  if (policy != PolicyId::kCpuid) return;
  const kvm_cpuid_entry2* h0 = FindLeaf(set, 0x40000000);
  const kvm_cpuid_entry2* h1 = FindLeaf(set, 0x40000001);
  if (h0 == nullptr || h0->eax != 0x40000001 || h0->ebx != 0x6d657670 ||
      h0->ecx != 0x65742d75 || h0->edx != 0x21737473) {
    Die("KVM_SET_CPUID2 lacks the policy's leaf 0x40000000");
  }
  if (h1 == nullptr || h1->eax != 0x00c0ffee || h1->ebx != 1 || h1->ecx != 2 ||
      h1->edx != 3) {
    Die("KVM_SET_CPUID2 lacks the policy's leaf 0x40000001");
  }
  if (FindLeaf(supported, 0) != nullptr) {
    const kvm_cpuid_entry2* leaf0 = FindLeaf(set, 0);
    char id[13] = {};
    if (leaf0 != nullptr) {
      std::memcpy(id, &leaf0->ebx, 4);
      std::memcpy(id + 4, &leaf0->edx, 4);
      std::memcpy(id + 8, &leaf0->ecx, 4);
    }
    if (std::strcmp(id, "HygonGenuine") != 0) {
      Die("guest_vendor HYGON, but KVM_SET_CPUID2 leaf 0 says \"%s\"", id);
    }
  }
}

void OpVcpuOpen(State& s, Input& in) {
  const int slot = in.U8() % kVcpus;
  const uint8_t handle_b = in.U8();
  const int kvm_fd = PickFd(in.U8());
  const int vcpu_fd = PickFd(in.U8());
  const uint8_t index_sel = in.U8();
  const uint8_t flags = in.U8();
  const uint32_t index = index_sel % 5 < 4 ? index_sel % 5 : in.U32();
  const bool null_out = (flags & 1) != 0;
  pvemu_kvm* kvm = HandleArg(s, handle_b);

  CloseVcpu(s, slot);
  ResetStubTrace();
  pvemu_kvm_vcpu* vcpu = kVcpuSentinel;
  errno = 0;
  const int rc = pvemu_kvm_vcpu_open(kvm, kvm_fd, vcpu_fd, index,
                                     null_out ? nullptr : &vcpu);
  After(s, "pvemu_kvm_vcpu_open", rc);
  if (rc < 0 && !null_out && vcpu != nullptr && vcpu != kVcpuSentinel) {
    Die("pvemu_kvm_vcpu_open returned %d but left a vCPU in *out", rc);
  }
  if (kvm == nullptr || null_out || kvm_fd < 0 || vcpu_fd < 0) {
    return ExpectErrno("pvemu_kvm_vcpu_open (NULL or a descriptor < 0)", rc,
                       EINVAL);
  }
  // It succeeds exactly when its last ioctl, KVM_SET_CPUID2, did.
  const bool cpuid_set = g_stub.calls > 0 &&
                         g_stub.last_request == kSetCpuid2 &&
                         g_stub.last_rc == 0;
  if (!cpuid_set)
    return ExpectFailure("pvemu_kvm_vcpu_open (KVM refused something)", rc);
  if (rc != 0)
    Die("pvemu_kvm_vcpu_open returned %d after KVM_SET_CPUID2 succeeded: %s",
        rc, pvemu_kvm_last_error());
  if (vcpu == nullptr || vcpu == kVcpuSentinel)
    Die("pvemu_kvm_vcpu_open returned 0 without a vCPU");
  if (g_stub.last_mmap_size < static_cast<int>(sizeof(kvm_run))) {
    Die("pvemu_kvm_vcpu_open accepted a kvm_run mapping of %d bytes",
        g_stub.last_mmap_size);
  }
  const int h = handle_b % (kHandles + 1);
  CheckSetCpuid(s.handles[h].policy);
  Vcpu& v = s.vcpus[slot];
  v.vcpu = vcpu;
  v.handle = h;
  v.fd = vcpu_fd;
  v.run_size = static_cast<size_t>(g_stub.last_mmap_size);
  v.run = static_cast<unsigned char*>(std::malloc(v.run_size));
  if (v.run == nullptr) Die("out of memory");
}

// ---------------------------------------------------------------------------
// pvemu_kvm_handle_exit

struct MsrAnswer {
  bool known = false;  // whether the policy's answer is known here
  bool gp = false;
  bool has_value = false;  // reads: the value is known too
  uint64_t value = 0;
};

MsrAnswer Answered(bool gp, bool has_value = false, uint64_t value = 0) {
  return MsrAnswer{true, gp, has_value, value};
}

// The answer of the policies above for the test MSRs.
MsrAnswer ExpectedMsr(PolicyId policy, uint32_t domain, uint32_t msr,
                      bool write, uint32_t reason) {
  // KVM knows the MSR and refuses the access: #GP, whatever the policy.
  if (reason == KVM_MSR_EXIT_REASON_INVAL) return Answered(true);
  if (reason != KVM_MSR_EXIT_REASON_FILTER &&
      reason != KVM_MSR_EXIT_REASON_UNKNOWN)
    return {};
  const bool test_msr =
      (msr >= 0x12345600 && msr <= 0x12345604) || msr == 0x123456ff;
  if (!test_msr) return {};
  // A GP answer, or in a learning domain what UNKNOWN_RELAXED answers.
  auto gp = [&](bool learning) {
    return learning ? Answered(false, !write, 0) : Answered(true);
  };
  switch (policy) {
    case PolicyId::kEnforce:
      switch (msr) {
        case 0x12345600:
          return write ? gp(false) : Answered(false, true, 5);
        case 0x12345601:
          return Answered(false, !write, 0);
        case 0x12345602:
          return gp(false);
        case 0x12345603:
          if (domain != 1) return gp(false);
          return Answered(false, !write, 0x0123456789abcdefull);
        case 0x12345604:
          return Answered(false);  // SHADOW: its value is the vCPU's
        default:
          return gp(false);
      }
    case PolicyId::kLearn: {
      const bool learning = domain == 1;
      if (msr == 0x12345600)
        return write ? gp(learning) : Answered(false, true, 5);
      return gp(learning);
    }
    case PolicyId::kRelaxed:
      return Answered(false, !write, 0);
    case PolicyId::kCpuid:
      return gp(false);
    default:
      return {};
  }
}

struct PortRange {
  uint32_t first, last;
};

// Whether the domain's io_port ranges grant every byte of the access.
bool PortGranted(PolicyId policy, uint32_t domain, uint32_t port,
                 uint32_t size) {
  std::vector<PortRange> ranges;
  switch (policy) {
    case PolicyId::kEnforce:
      ranges = {{0x3f8, 0x3ff}, {0x90, 0x93}};
      if (domain == 1) ranges.push_back({0x510, 0x513});
      break;
    case PolicyId::kLearn:
      if (domain == 1) return port + size <= 0x10000;  // LEARN: as if granted
      ranges = {{0x3f8, 0x3ff}};
      break;
    case PolicyId::kRelaxed:
      ranges = {{0x70, 0x71}};
      break;
    default:
      break;
  }
  for (uint32_t p = port; p < port + size; ++p) {
    bool in = false;
    for (const PortRange& r : ranges) in = in || (p >= r.first && p <= r.last);
    if (!in) return false;
  }
  return true;
}

bool KnownPolicy(PolicyId p) {
  return p == PolicyId::kEnforce || p == PolicyId::kLearn ||
         p == PolicyId::kRelaxed;
}

// Bytes of the mapping the library may change: [begin, end) ranges.
struct Span {
  uint64_t begin, end;
};

void CheckUnchanged(const char* what, const unsigned char* before,
                    const unsigned char* after, size_t size,
                    const std::vector<Span>& writable) {
  for (size_t i = 0; i < size; ++i) {
    if (before[i] == after[i]) continue;
    bool ok = false;
    for (const Span& w : writable) ok = ok || (i >= w.begin && i < w.end);
    if (!ok) {
      Die("%s: the library changed byte %zu of the kvm_run mapping (%#x -> "
          "%#x)",
          what, i, unsigned{before[i]}, unsigned{after[i]});
    }
  }
}

void OpExit(State& s, Input& in) {
  const int slot = in.U8() % (kVcpus + 1);
  const uint8_t flags = in.U8();
  const uint8_t pattern = in.U8();
  const uint8_t reason_sel = in.U8();
  Vcpu* v =
      slot < kVcpus && s.vcpus[slot].vcpu != nullptr ? &s.vcpus[slot] : nullptr;
  alignas(8) static unsigned char scratch[sizeof(kvm_run) + 4096];
  unsigned char* bytes = v != nullptr ? v->run : scratch;
  const size_t run_size = v != nullptr ? v->run_size : sizeof scratch;
  std::memset(bytes, pattern, run_size);
  auto* run = reinterpret_cast<kvm_run*>(bytes);

  static constexpr uint32_t kReasons[] = {
      KVM_EXIT_X86_RDMSR, KVM_EXIT_X86_WRMSR, KVM_EXIT_IO,       KVM_EXIT_IO,
      KVM_EXIT_HLT,       KVM_EXIT_MMIO,      KVM_EXIT_SHUTDOWN, 0};
  run->exit_reason = kReasons[reason_sel % 8];
  if (reason_sel % 8 == 7) run->exit_reason = in.U32();
  if ((flags & 2) != 0) {
    run->kvm_valid_regs = KVM_SYNC_X86_REGS;
    run->s.regs.regs.rip = in.U64();
  }
  // MSR exits.
  static constexpr uint32_t kMsrReasons[] = {KVM_MSR_EXIT_REASON_FILTER,
                                             KVM_MSR_EXIT_REASON_UNKNOWN,
                                             KVM_MSR_EXIT_REASON_INVAL, 0};
  static constexpr uint32_t kMsrs[] = {
      0x12345600, 0x12345601, 0x12345602, 0x12345603, 0x12345604, 0x123456ff,
      0x10,       0x1b,       0xce,       0x1a0,      0xc0000080, 0x40000000};
  // I/O exits.
  static constexpr uint8_t kIoSizes[] = {1, 2, 4, 1, 0, 3, 8, 255};
  static constexpr uint16_t kPorts[] = {0x3f8, 0x3fd, 0x3fe, 0x3ff,  0x90,
                                        0x91,  0x92,  0x93,  0x510,  0x70,
                                        0x71,  0xf4,  0x80,  0xffff, 0xfffe};
  static constexpr uint32_t kCounts[] = {1, 1, 1, 2, 3, 0, 16};
  const bool msr_exit = run->exit_reason == KVM_EXIT_X86_RDMSR ||
                        run->exit_reason == KVM_EXIT_X86_WRMSR;
  const bool io_exit = run->exit_reason == KVM_EXIT_IO;
  uint64_t io_bytes = 0;
  if (msr_exit) {
    const uint8_t why = in.U8();
    const uint8_t which = in.U8();
    run->msr.reason = why % 5 < 4 ? kMsrReasons[why % 5] : in.U32();
    run->msr.index = which % 13 < 12 ? kMsrs[which % 13] : in.U32();
    run->msr.data = in.U64();
    run->msr.error = in.U8();  // the library must set it
  } else if (io_exit) {
    const uint8_t direction = in.U8();
    const uint8_t size_sel = in.U8();
    const uint8_t port_sel = in.U8();
    const uint8_t count_sel = in.U8();
    const uint8_t offset_sel = in.U8();
    run->io.direction = direction & 1;
    run->io.size = kIoSizes[size_sel % 8];
    run->io.port = port_sel % 16 < 15 ? kPorts[port_sel % 16] : in.U16();
    run->io.count = count_sel % 8 < 7 ? kCounts[count_sel % 8] : in.U32();
    io_bytes = uint64_t{run->io.size} * run->io.count;
    const uint64_t end = run_size;
    const uint64_t kOffsets[] = {
        4096, sizeof(kvm_run), end - io_bytes, end - io_bytes + 1, end, 0,
        8,    UINT64_MAX,      0 - io_bytes};
    run->io.data_offset =
        offset_sel % 10 < 9 ? kOffsets[offset_sel % 10] : in.U64();
  }
  kvm_run* run_arg = (flags & 1) != 0 ? nullptr : run;
  const std::vector<unsigned char> before(bytes, bytes + run_size);
  // Where the library may write: msr.error, and msr.data of a read.
  const uint64_t error_at =
      reinterpret_cast<unsigned char*>(&run->msr.error) - bytes;
  const uint64_t data_at =
      reinterpret_cast<unsigned char*>(&run->msr.data) - bytes;

  g_stub.regs_fd = v != nullptr ? v->fd : -1;
  errno = 0;
  const int rc =
      pvemu_kvm_handle_exit(v != nullptr ? v->vcpu : nullptr, run_arg);
  g_stub.regs_fd = -1;
  After(s, "pvemu_kvm_handle_exit", rc);
  if (v == nullptr || run_arg == nullptr) {
    ExpectErrno("pvemu_kvm_handle_exit (NULL)", rc, EINVAL);
    return CheckUnchanged("pvemu_kvm_handle_exit (NULL)", before.data(), bytes,
                          run_size, {});
  }
  Handle& h = s.handles[v->handle];
  Counts& c = v->counts;
  if (msr_exit) {
    const bool write = run->exit_reason == KVM_EXIT_X86_WRMSR;
    if (rc != PVEMU_KVM_HANDLED)
      Die("pvemu_kvm_handle_exit of an MSR exit returned %d", rc);
    std::vector<Span> writable = {{error_at, error_at + 1}};
    if (!write) writable.push_back({data_at, data_at + 8});
    CheckUnchanged("MSR exit", before.data(), bytes, run_size, writable);
    if (run->msr.error > 1)
      Die("MSR exit answered with msr.error %u", unsigned{run->msr.error});
    const bool gp = run->msr.error != 0;
    const MsrAnswer want =
        ExpectedMsr(h.policy, h.domain, run->msr.index, write, run->msr.reason);
    if (want.known && want.gp != gp) {
      Die("%s of MSR %#x (reason %u, domain %u): msr.error %u, want %u",
          write ? "WRMSR" : "RDMSR", run->msr.index, run->msr.reason, h.domain,
          unsigned{run->msr.error}, want.gp ? 1u : 0u);
    }
    if (want.known && !gp && want.has_value && run->msr.data != want.value) {
      Die("RDMSR %#x (domain %u) read %#llx, want %#llx", run->msr.index,
          h.domain, static_cast<unsigned long long>(run->msr.data),
          static_cast<unsigned long long>(want.value));
    }
    if (run->msr.reason != KVM_MSR_EXIT_REASON_INVAL) ++h.msr_decided;
    Counts one;
    (write ? one.wrmsr : one.rdmsr) = 1;
    (gp ? one.exceptions : one.completed) = 1;
    c.Add(one);
    h.totals.Add(one);
    return;
  }
  if (!io_exit) {
    if (rc != PVEMU_KVM_NOT_MINE)
      Die("pvemu_kvm_handle_exit of exit reason %u returned %d",
          run->exit_reason, rc);
    return CheckUnchanged("an exit not pvemu's", before.data(), bytes, run_size,
                          {});
  }
  // KVM_EXIT_IO: its data must lie inside the mapping, past struct kvm_run.
  Counts one;
  one.io = 1;
  const uint8_t size = run->io.size;
  const uint64_t offset = run->io.data_offset;
  const bool well_formed = (size == 1 || size == 2 || size == 4) &&
                           offset >= sizeof(kvm_run) && offset <= run_size &&
                           io_bytes <= run_size - offset;
  const bool out = run->io.direction == KVM_EXIT_IO_OUT;
  if (!well_formed) {
    if (rc != -EINVAL) {
      Die("KVM_EXIT_IO of size %u, count %u at data_offset %#llx (mapping %zu "
          "bytes) returned %d, "
          "want -EINVAL",
          unsigned{size}, run->io.count,
          static_cast<unsigned long long>(offset), run_size, rc);
    }
    CheckUnchanged("a malformed KVM_EXIT_IO", before.data(), bytes, run_size,
                   {});
  } else if (run->io.count == 0) {
    // No element: the header does not say; nothing may change.
    if (rc != PVEMU_KVM_HANDLED && rc != -EINVAL)
      Die("KVM_EXIT_IO of count 0 returned %d", rc);
    CheckUnchanged("KVM_EXIT_IO of count 0", before.data(), bytes, run_size,
                   {});
  } else {
    if (rc != PVEMU_KVM_HANDLED && rc != PVEMU_KVM_DEVICE)
      Die("KVM_EXIT_IO returned %d", rc);
    std::vector<Span> writable;
    if (!out && rc == PVEMU_KVM_HANDLED)
      writable.push_back({offset, offset + io_bytes});
    CheckUnchanged(rc == PVEMU_KVM_DEVICE
                       ? "KVM_EXIT_IO handed to the device model"
                       : "KVM_EXIT_IO",
                   before.data(), bytes, run_size, writable);
    if (KnownPolicy(h.policy)) {
      const uint32_t port = run->io.port;
      const bool granted = PortGranted(h.policy, h.domain, port, size);
      const bool host_device = port == 0x92;  // the sim profiles' one device
      const int want =
          granted && !host_device ? PVEMU_KVM_DEVICE : PVEMU_KVM_HANDLED;
      if (rc != want) {
        Die("%s of %u bytes at port %#x (domain %u): %d, want %d",
            out ? "OUT" : "IN", unsigned{size}, port, h.domain, rc, want);
      }
      if (!out && rc == PVEMU_KVM_HANDLED) {
        for (uint32_t i = 0; i < run->io.count; ++i) {
          uint32_t value = 0;
          std::memcpy(&value, bytes + offset + uint64_t{i} * size, size);
          const uint32_t mask =
              size == 4 ? 0xffffffffu : (1u << (8 * size)) - 1;
          const uint32_t expect =
              granted ? 0x02 : mask;  // the device, or all ones
          if (value != expect) {
            Die("IN of %u bytes at port %#x read %#x, want %#x", unsigned{size},
                port, value, expect);
          }
        }
      }
    }
  }
  if (rc == PVEMU_KVM_HANDLED) one.completed = 1;
  if (rc == PVEMU_KVM_DEVICE) one.device = 1;
  c.Add(one);
  h.totals.Add(one);
}

// ---------------------------------------------------------------------------
// pvemu_kvm_vcpu_stats, pvemu_kvm_totals

constexpr uint32_t kStatsSizes[] = {sizeof(pvemu_kvm_stats),
                                    sizeof(pvemu_kvm_stats),
                                    0,
                                    1,
                                    3,
                                    4,
                                    5,
                                    7,
                                    8,
                                    12,
                                    15,
                                    16,
                                    17,
                                    23,
                                    24,
                                    40,
                                    48,
                                    63,
                                    sizeof(pvemu_kvm_stats) + 8,
                                    128,
                                    4096,
                                    4097,
                                    0xffffffffu,
                                    0};

// "The end of the last field it wrote, or of the last header field that
// fits (4 or 8)".
int StatsEnd(uint32_t size) {
  int end = 4;  // size, then reserved, then 8-byte counts
  for (uint32_t e = 8; e <= sizeof(pvemu_kvm_stats); e += 8) {
    if (e <= size) end = static_cast<int>(e);
  }
  return end;
}

template <typename Call>
void CheckStats(State& s, const char* what, const Counts& want, bool all_zero,
                Input& in, Call call) {
  const uint8_t flags = in.U8();
  const uint8_t size_sel = in.U8();
  const size_t n_sizes = std::size(kStatsSizes);
  uint32_t size = kStatsSizes[size_sel % n_sizes];
  if (size_sel % n_sizes == n_sizes - 1) size = in.U32();
  // The caller's struct, then a guard: 4096 is the largest size allowed.
  constexpr size_t kBuf = 4096 + 64;
  alignas(8) static unsigned char buf[kBuf];
  alignas(8) static unsigned char before[kBuf];
  std::memset(buf, 0xa5 ^ (flags & 0xf0), kBuf);
  std::memcpy(buf, &size, sizeof size);
  std::memcpy(before, buf, kBuf);
  const bool null_out = (flags & 1) != 0;
  errno = 0;
  const int rc =
      call(null_out ? nullptr : reinterpret_cast<pvemu_kvm_stats*>(buf));
  After(s, what, rc);
  if (null_out || size < sizeof(uint32_t) || size > 4096) {
    ExpectErrno(what, rc, EINVAL);
    if (std::memcmp(buf, before, kBuf) != 0)
      Die("%s refused size %u but wrote", what, size);
    return;
  }
  const int end = StatsEnd(size);
  if (rc != end)
    Die("%s with size %u returned %d, want %d", what, size, rc, end);
  if (std::memcmp(buf, before, 8) != 0) Die("%s wrote size or reserved", what);
  if (std::memcmp(buf + end, before + end, kBuf - end) != 0) {
    Die("%s with size %u wrote past the %d bytes it accounts for", what, size,
        end);
  }
  const uint64_t counts[] = {want.rdmsr,     want.wrmsr,      want.io,
                             want.completed, want.exceptions, want.device};
  static const char* const kNames[] = {
      "rdmsr", "wrmsr", "io", "completed", "exceptions", "device", "pvemu_ns"};
  for (int i = 0; i < 7; ++i) {
    const int at = 8 + 8 * i;
    if (at + 8 > end) break;
    uint64_t got = 0;
    std::memcpy(&got, buf + at, 8);
    if (i < 6 && got != counts[i]) {
      Die("%s: %s is %llu, want %llu", what, kNames[i],
          static_cast<unsigned long long>(got),
          static_cast<unsigned long long>(counts[i]));
    }
    if (i == 6 && all_zero && got != 0)
      Die("%s: pvemu_ns of nothing is %llu", what,
          static_cast<unsigned long long>(got));
  }
}

void OpVcpuStats(State& s, Input& in) {
  const int slot = in.U8() % (kVcpus + 1);
  const Vcpu* v =
      slot < kVcpus && s.vcpus[slot].vcpu != nullptr ? &s.vcpus[slot] : nullptr;
  // "A NULL vcpu has zero counts."
  CheckStats(s, "pvemu_kvm_vcpu_stats", v != nullptr ? v->counts : Counts{},
             v == nullptr, in, [&](pvemu_kvm_stats* out) {
               return pvemu_kvm_vcpu_stats(v != nullptr ? v->vcpu : nullptr,
                                           out);
             });
}

void OpTotals(State& s, Input& in) {
  const int slot = in.U8() % (kHandles + 1);
  const Handle* h = slot < kHandles && s.handles[slot].kvm != nullptr
                        ? &s.handles[slot]
                        : nullptr;
  CheckStats(s, "pvemu_kvm_totals", h != nullptr ? h->totals : Counts{},
             h == nullptr, in, [&](pvemu_kvm_stats* out) {
               return pvemu_kvm_totals(h != nullptr ? h->kvm : nullptr, out);
             });
}

// ---------------------------------------------------------------------------
// pvemu_kvm_msr_counts

void OpMsrCounts(State& s, Input& in) {
  const int slot = in.U8() % (kHandles + 1);
  const uint8_t flags = in.U8();
  const uint8_t stride_sel = in.U8();
  const uint8_t max_sel = in.U8();
  const Handle* h = slot < kHandles && s.handles[slot].kvm != nullptr
                        ? &s.handles[slot]
                        : nullptr;
  static constexpr uint32_t kStrides[] = {sizeof(pvemu_kvm_msr_count),
                                          sizeof(pvemu_kvm_msr_count),
                                          0,
                                          4,
                                          7,
                                          8,
                                          12,
                                          16,
                                          20,
                                          24,
                                          28,
                                          40,
                                          64,
                                          4096,
                                          4097,
                                          0xffffffffu};
  static constexpr uint32_t kMaxes[] = {8, 0, 1, 2, 3, 16};
  const uint32_t stride = kStrides[stride_sel % std::size(kStrides)];
  const bool null_out = (flags & 1) != 0;
  uint32_t max = kMaxes[max_sel % std::size(kMaxes)];
  if (null_out && (max_sel & 0x80) != 0) max = 0xffffffffu;
  // max rows, then a guard row, then a few bytes; a stride the library must
  // refuse gets 32-byte rows.
  const bool stride_ok = stride >= 8 && stride <= 4096;
  const size_t row = stride_ok ? stride : 32;
  const size_t rows = null_out ? 0 : max;
  std::vector<unsigned char> buf((rows + 1) * row + 64,
                                 static_cast<unsigned char>(0x5a ^ flags));
  std::memcpy(buf.data(), &stride, sizeof stride);
  const std::vector<unsigned char> before = buf;
  auto* out =
      null_out ? nullptr : reinterpret_cast<pvemu_kvm_msr_count*>(buf.data());
  errno = 0;
  const int rc =
      pvemu_kvm_msr_counts(h != nullptr ? h->kvm : nullptr, out, max);
  After(s, "pvemu_kvm_msr_counts", rc);
  auto unchanged = [&](const char* why) {
    if (buf != before) Die("pvemu_kvm_msr_counts (%s) wrote into out", why);
  };
  if (h == nullptr) {
    ExpectErrno("pvemu_kvm_msr_counts (NULL kvm)", rc, EINVAL);
    return unchanged("NULL kvm");
  }
  if (null_out && max > 0)
    return ExpectErrno("pvemu_kvm_msr_counts (NULL out, max > 0)", rc, EINVAL);
  if (max > 0 && !stride_ok) {
    ExpectErrno("pvemu_kvm_msr_counts (out[0].size)", rc, EINVAL);
    return unchanged("bad out[0].size");
  }
  if (!h->counts_msrs) {
    ExpectErrno("pvemu_kvm_msr_counts (not counting)", rc, EOPNOTSUPP);
    return unchanged("not counting");
  }
  if (rc < 0)
    Die("pvemu_kvm_msr_counts returned %d: %s", rc, pvemu_kvm_last_error());
  const uint32_t n = static_cast<uint32_t>(rc);
  const uint32_t written = n < max ? n : max;
  // Only whole fields within the stride, in the first min(n, max) rows.
  struct FieldAt {
    size_t offset, size;
  };
  static constexpr FieldAt kFields[] = {
      {offsetof(pvemu_kvm_msr_count, msr), 4},
      {offsetof(pvemu_kvm_msr_count, write), 4},
      {offsetof(pvemu_kvm_msr_count, action), 4},
      {offsetof(pvemu_kvm_msr_count, other), 4},
      {offsetof(pvemu_kvm_msr_count, count), 8}};
  for (size_t i = 0; i < buf.size(); ++i) {
    if (buf[i] == before[i]) continue;
    const size_t r = i / row, at = i % row;
    bool ok = r < written;
    if (ok) {
      ok = false;
      for (const FieldAt& f : kFields)
        ok = ok || (at >= f.offset && at < f.offset + f.size &&
                    f.offset + f.size <= row);
    }
    if (!ok) {
      Die("pvemu_kvm_msr_counts (max %u, out[0].size %u, %u rows) wrote byte "
          "%zu of row %zu",
          max, stride, n, at, r);
    }
  }
  auto field = [&](uint32_t r, const FieldAt& f) -> uint64_t {
    uint64_t v = 0;
    std::memcpy(&v, buf.data() + size_t{r} * row + f.offset, f.size);
    return v;
  };
  uint64_t sum = 0;
  uint64_t prev_key[4] = {};
  for (uint32_t r = 0; r < written; ++r) {
    const bool has_all = row >= offsetof(pvemu_kvm_msr_count, reserved);
    if (!has_all) break;
    const uint64_t msr = field(r, kFields[0]), write = field(r, kFields[1]);
    const uint64_t action = field(r, kFields[2]), other = field(r, kFields[3]);
    if (write > 1 || other > 1 || action > PVEMU_KVM_MSR_LEARN_RELAXED ||
        (other == 1 && msr != 0)) {
      Die("pvemu_kvm_msr_counts row %u: msr %#llx write %llu action %llu other "
          "%llu",
          r, static_cast<unsigned long long>(msr),
          static_cast<unsigned long long>(write),
          static_cast<unsigned long long>(action),
          static_cast<unsigned long long>(other));
    }
    // Sorted by MSR (other last), access, action; one row per key.
    const uint64_t key[4] = {other, msr, write, action};
    if (r > 0 &&
        !std::lexicographical_compare(prev_key, prev_key + 4, key, key + 4)) {
      Die("pvemu_kvm_msr_counts rows %u and %u are not in order", r - 1, r);
    }
    std::memcpy(prev_key, key, sizeof key);
    if (row >= offsetof(pvemu_kvm_msr_count, count) + 8) {
      const uint64_t count = field(r, kFields[4]);
      if (count == 0) Die("pvemu_kvm_msr_counts row %u counts 0 accesses", r);
      sum += count;
    }
  }
  if (written == n && sum > h->msr_decided) {
    Die("pvemu_kvm_msr_counts counts %llu accesses; %llu MSR exits reached the "
        "policy",
        static_cast<unsigned long long>(sum),
        static_cast<unsigned long long>(h->msr_decided));
  }
  errno = 0;
  const int again = pvemu_kvm_msr_counts(h->kvm, nullptr, 0);
  After(s, "pvemu_kvm_msr_counts", again);
  if (again != rc) Die("pvemu_kvm_msr_counts gave %d rows, then %d", rc, again);
}

// ---------------------------------------------------------------------------
// pvemu_kvm_filter_text, pvemu_kvm_msr_action_name, pvemu_kvm_generation

void OpFilterText(State& s, Input& in) {
  const int slot = in.U8() % (kHandles + 1);
  const uint8_t flags = in.U8();
  const uint8_t len_sel = in.U8();
  Handle* h = slot < kHandles && s.handles[slot].kvm != nullptr
                  ? &s.handles[slot]
                  : nullptr;
  const size_t known = h != nullptr && h->filter_len >= 0
                           ? static_cast<size_t>(h->filter_len)
                           : 100;
  const size_t kLens[] = {0, 1, 2, 7, 64, known, known + 1, known + 2, 8192};
  const size_t len = kLens[len_sel % std::size(kLens)];
  const bool null_buf = (flags & 1) != 0;
  std::vector<char> buf(len + 64, static_cast<char>(0x7e));
  const std::vector<char> before = buf;
  errno = 0;
  const int rc = pvemu_kvm_filter_text(h != nullptr ? h->kvm : nullptr,
                                       null_buf ? nullptr : buf.data(), len);
  After(s, "pvemu_kvm_filter_text", rc);
  if (h == nullptr || (null_buf && len != 0)) {
    ExpectErrno("pvemu_kvm_filter_text (NULL kvm, or NULL buf with len)", rc,
                EINVAL);
    if (buf != before) Die("pvemu_kvm_filter_text failed but wrote");
    return;
  }
  if (rc < 0)
    Die("pvemu_kvm_filter_text returned %d: %s", rc, pvemu_kvm_last_error());
  if (h->filter_len >= 0 && rc != h->filter_len) {
    Die("pvemu_kvm_filter_text: %d bytes, then %d (the filter of a standalone "
        "handle)",
        h->filter_len, rc);
  }
  h->filter_len = rc;
  if (null_buf || len == 0) {
    if (buf != before) Die("pvemu_kvm_filter_text with len 0 wrote");
    return;
  }
  const size_t n = std::min(len - 1, static_cast<size_t>(rc));
  if (buf[n] != 0 || std::strlen(buf.data()) != n) {
    Die("pvemu_kvm_filter_text into %zu bytes: not %zu characters and a NUL",
        len, n);
  }
  if (!std::equal(buf.begin() + static_cast<std::ptrdiff_t>(n) + 1, buf.end(),
                  before.begin() + static_cast<std::ptrdiff_t>(n) + 1)) {
    Die("pvemu_kvm_filter_text wrote past its NUL");
  }
}

void OpActionName(State& s, Input& in) {
  const uint8_t sel = in.U8();
  const uint32_t action = sel % 12 < 10    ? sel % 12
                          : sel % 12 == 10 ? 0xffffffffu
                                           : in.U32();
  static const char* const kNames[] = {
      "PASSTHROUGH", "CONST",      "SHADOW",          "ZERO",         "GP",
      "IGNORE",      "UNKNOWN_GP", "UNKNOWN_RELAXED", "LEARN_RELAXED"};
  const char* name = pvemu_kvm_msr_action_name(action);
  After(s, "pvemu_kvm_msr_action_name", 0);
  if (name == nullptr) Die("pvemu_kvm_msr_action_name(%u) is NULL", action);
  const char* want = action < std::size(kNames) ? kNames[action] : "?";
  if (std::strcmp(name, want) != 0)
    Die("pvemu_kvm_msr_action_name(%u) is \"%s\", want \"%s\"", action, name,
        want);
}

void OpGeneration(State& s, Input& in) {
  const int slot = in.U8() % (kHandles + 1);
  const Handle* h = slot < kHandles && s.handles[slot].kvm != nullptr
                        ? &s.handles[slot]
                        : nullptr;
  const uint64_t g = pvemu_kvm_generation(h != nullptr ? h->kvm : nullptr);
  After(s, "pvemu_kvm_generation", 0);
  const uint64_t want =
      h != nullptr ? h->generation : 0;  // standalone: it never moves
  if (g != want) {
    Die("pvemu_kvm_generation is %llu, want %llu",
        static_cast<unsigned long long>(g),
        static_cast<unsigned long long>(want));
  }
}

// ---------------------------------------------------------------------------
// What KVM answers next.

void OpStub(Input& in) {
  static constexpr int kErrnos[] = {
      0,   EINVAL, EFAULT, ENOMEM, E2BIG, EBUSY, EPERM,      ENOTTY,
      EIO, EAGAIN, EINTR,  ENOSPC, EBADF, ENXIO, EOPNOTSUPP, EEXIST};
  static constexpr int kMmapSizes[] = {3 * 4096,
                                       2 * 4096,
                                       4096,
                                       sizeof(kvm_run),
                                       4 * 4096,
                                       sizeof(kvm_run) + 1,
                                       0,
                                       1,
                                       sizeof(kvm_run) - 1};
  static constexpr uint32_t kCpuidCounts[] = {40,  1,   2,   10,  127, 128, 129,
                                              200, 256, 257, 300, 0,   4097};
  const uint8_t which = in.U8();
  const uint8_t value = in.U8();
  switch (which % 10) {
    case kMmapSize:
    case kSupportedCpuid:
    case kSetCpuid:
    case kCheckExtension:
    case kEnableCap:
    case kSetMsrFilter:
    case kGetRegs:
      g_stub.err[which % 10] = kErrnos[value % std::size(kErrnos)];
      break;
    case 7:
      // 0, 1 and sizeof(kvm_run) - 1 are sizes KVM never gives: the library
      // must refuse them.
      g_stub.mmap_size = kMmapSizes[value % std::size(kMmapSizes)];
      break;
    case 8:
      g_stub.cpuid_nent = kCpuidCounts[value % std::size(kCpuidCounts)];
      g_stub.cpuid_seed = in.U8();
      break;
    default:
      g_stub.user_space_msr = (value & 1) == 0;
      g_stub.msr_filter = (value & 2) == 0;
      g_stub.rip = in.U64();
      break;
  }
}

enum OpCode {
  kOpOpen,
  kOpClose,
  kOpSetupVm,
  kOpVcpuOpen,
  kOpVcpuClose,
  kOpExit,
  kOpVcpuStats,
  kOpTotals,
  kOpMsrCounts,
  kOpFilterText,
  kOpActionName,
  kOpGeneration,
  kOpStub,
  kOpLastError,
  kNumOps,
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Setup();
  ResetStubAnswers();
  State s;
  s.last_error = pvemu_kvm_last_error();
  Input in(data, size);
  for (int op = 0; op < kMaxOps && !in.empty(); ++op) {
    switch (in.U8() % kNumOps) {
      case kOpOpen:
        OpOpen(s, in);
        break;
      case kOpClose: {
        const int slot = in.U8() % (kHandles + 1);
        if (slot < kHandles) {
          CloseHandle(s, slot);
        } else {
          pvemu_kvm_close(nullptr);
          After(s, "pvemu_kvm_close(NULL)", 0);
        }
        break;
      }
      case kOpSetupVm:
        OpSetupVm(s, in);
        break;
      case kOpVcpuOpen:
        OpVcpuOpen(s, in);
        break;
      case kOpVcpuClose:
        CloseVcpu(s, in.U8() % kVcpus);
        break;  // an empty slot: NULL
      case kOpExit:
        OpExit(s, in);
        break;
      case kOpVcpuStats:
        OpVcpuStats(s, in);
        break;
      case kOpTotals:
        OpTotals(s, in);
        break;
      case kOpMsrCounts:
        OpMsrCounts(s, in);
        break;
      case kOpFilterText:
        OpFilterText(s, in);
        break;
      case kOpActionName:
        OpActionName(s, in);
        break;
      case kOpGeneration:
        OpGeneration(s, in);
        break;
      case kOpStub:
        OpStub(in);
        break;
      default:
        After(s, "pvemu_kvm_last_error", 0);
        break;
    }
  }
  for (int v = 0; v < kVcpus; ++v) CloseVcpu(s, v);
  for (int h = 0; h < kHandles; ++h) CloseHandle(s, h);
  return 0;
}
