// The KVM data plane on a real KVM guest. A vCPU in
// real mode loops on RDMSR; every exit is answered either by pvemu's full
// policy decision (libpvemu-kvm's C ABI) or by a handler that answers a
// constant, interleaved on the same vCPU so the exit round trip, which
// dominates, is shared. Without /dev/kvm the benchmarks say why and skip.
//
// On these machines KVM runs on PVM (or nested under QEMU), so quote the
// ratios, not the times (docs/performance.md).
#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "benchmark/benchmark.h"
#include "pvemu_kvm.h"
#include "tests/bench/interleave.h"

namespace pvemu::bench {
namespace {

constexpr uint32_t kNamedMsr = 0x1b0;  // a CONST rule: exits to pvemu
constexpr uint32_t kKvmMsr = 0x10;     // IA32_TSC, no rule: stays with KVM
constexpr uint64_t kConst = 0x5;

constexpr char kPolicy[] = R"pb(
default {
  unknown_msr: UNKNOWN_GP
  msr { msr: "0x1b0" read: CONST value: 0x5 write: IGNORE }
  msr { msr: "IA32_PAT" read: SHADOW write: SHADOW value: 0x0007040600070406 }
  msr { range { first: "0xc0010000" last: "0xc00100ff" } read: ZERO write: IGNORE }
  io_port { first: 0x80 last: 0x80 }
}
)pb";

// One VM with one vCPU running `code` at 0x1000 in real mode, its exits
// handled through libpvemu-kvm. `error` says why not when it cannot be had.
class KvmLoop {
 public:
  explicit KvmLoop(const uint8_t* code, size_t size) {
    kvm_ = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm_ < 0) {
      error_ = std::string("no usable /dev/kvm: ") + std::strerror(errno);
      return;
    }
    policy_ = std::filesystem::temp_directory_path() / ("pvemu-kvm-bench-" + std::to_string(getpid()));
    std::ofstream(policy_) << kPolicy;
    pvemu_kvm_options options{};
    options.size = sizeof options;
    options.domain = 1;
    // pvemu_ns, for decide_ns (two TSC reads an exit; BM_KvmExitDecision
    // measures the decision without them).
    options.time_exits = 1;
    const std::string path = policy_.string();
    options.policy = path.c_str();
    if (pvemu_kvm_open(&options, &plane_) != 0) {
      error_ = std::string("pvemu_kvm_open: ") + pvemu_kvm_last_error();
      return;
    }
    vm_ = ioctl(kvm_, KVM_CREATE_VM, 0);
    mem_ = mmap(nullptr, kMemSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    std::memcpy(static_cast<uint8_t*>(mem_) + 0x1000, code, size);
    kvm_userspace_memory_region region{0, 0, 0, kMemSize, reinterpret_cast<uint64_t>(mem_)};
    if (vm_ < 0 || ioctl(vm_, KVM_SET_USER_MEMORY_REGION, &region) != 0) {
      error_ = std::string("KVM_CREATE_VM / memory: ") + std::strerror(errno);
      return;
    }
    if (pvemu_kvm_setup_vm(plane_, vm_) != 0) {
      error_ = std::string("pvemu_kvm_setup_vm: ") + pvemu_kvm_last_error();
      return;
    }
    vcpu_fd_ = ioctl(vm_, KVM_CREATE_VCPU, 0);
    const int run_size = ioctl(kvm_, KVM_GET_VCPU_MMAP_SIZE, 0);
    run_ = static_cast<kvm_run*>(
        mmap(nullptr, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu_fd_, 0));
    if (pvemu_kvm_vcpu_open(plane_, kvm_, vcpu_fd_, 0, &vcpu_) != 0) {
      error_ = std::string("pvemu_kvm_vcpu_open: ") + pvemu_kvm_last_error();
      return;
    }
    kvm_sregs sregs;
    ioctl(vcpu_fd_, KVM_GET_SREGS, &sregs);
    sregs.cs.base = 0;
    sregs.cs.selector = 0;
    ioctl(vcpu_fd_, KVM_SET_SREGS, &sregs);
    kvm_regs regs{};
    regs.rip = 0x1000;
    regs.rflags = 0x2;
    ioctl(vcpu_fd_, KVM_SET_REGS, &regs);
  }
  ~KvmLoop() {
    pvemu_kvm_vcpu_close(vcpu_);
    pvemu_kvm_close(plane_);
    if (vcpu_fd_ >= 0) close(vcpu_fd_);
    if (vm_ >= 0) close(vm_);
    if (kvm_ >= 0) close(kvm_);
    if (mem_ != nullptr) munmap(mem_, kMemSize);
    if (!policy_.empty()) std::filesystem::remove(policy_);
  }

  const std::string& error() const { return error_; }
  kvm_run* run() { return run_; }
  pvemu_kvm_vcpu* vcpu() { return vcpu_; }
  // One KVM_RUN; false (and a message in error()) on failure.
  bool Run() {
    if (ioctl(vcpu_fd_, KVM_RUN, 0) != 0) {
      error_ = std::string("KVM_RUN: ") + std::strerror(errno);
      return false;
    }
    return true;
  }

 private:
  static constexpr size_t kMemSize = 0x10000;
  int kvm_ = -1, vm_ = -1, vcpu_fd_ = -1;
  void* mem_ = nullptr;
  kvm_run* run_ = nullptr;
  pvemu_kvm* plane_ = nullptr;
  pvemu_kvm_vcpu* vcpu_ = nullptr;
  std::filesystem::path policy_;
  std::string error_;
};

// mov ecx, MSR; rdmsr; jmp back: one RDMSR exit per KVM_RUN.
constexpr uint8_t kRdmsrLoop[] = {0x66, 0xb9, kNamedMsr & 0xff, (kNamedMsr >> 8) & 0xff, 0, 0,
                                  0x0f, 0x32, 0xeb, 0xf6};

// The decision as a VMM without pvemu would make it: a constant.
inline void AnswerConst(kvm_run* run) {
  run->msr.error = 0;
  run->msr.data = kConst;
}

// The interleaved comparison: pvemu's added cost per exit, as a share of
// the whole round trip.
void BM_KvmMsrExit_PvemuVsConst(benchmark::State& state) {
  KvmLoop loop(kRdmsrLoop, sizeof kRdmsrLoop);
  if (!loop.error().empty()) {
    state.SkipWithError(loop.error().c_str());
    return;
  }
  bool failed = false;
  // Variants: pvemu A, const A, pvemu B, const B (the interleave helper's
  // equal-share rule).
  const std::array<double, 4> ns = InterleavedMedians<4>(
      state, 1024,
      [&](int which, size_t) {
        if (failed || !loop.Run()) {
          failed = true;
          return;
        }
        if (loop.run()->exit_reason != KVM_EXIT_X86_RDMSR) {
          failed = true;
          return;
        }
        if (which % 2 == 0) {
          pvemu_kvm_handle_exit(loop.vcpu(), loop.run());
        } else {
          AnswerConst(loop.run());
        }
        benchmark::DoNotOptimize(loop.run()->msr.data);
      },
      64);
  if (failed) {
    state.SkipWithError(("the guest loop stopped: " + loop.error()).c_str());
    return;
  }
  const double pvemu = (ns[0] + ns[2]) / 2, constant = (ns[1] + ns[3]) / 2;
  // pvemu's own time per exit, timed inside the handler (TSC), against the
  // whole round trip: the share that does not drown in the round trip's noise.
  pvemu_kvm_stats stats{};
  stats.size = sizeof stats;
  pvemu_kvm_vcpu_stats(loop.vcpu(), &stats);
  const double decide = stats.rdmsr == 0 ? 0 : static_cast<double>(stats.pvemu_ns) / stats.rdmsr;
  state.counters["decide_ns"] = decide;
  state.counters["decide_pct"] = 100.0 * decide / constant;
  state.counters["pvemu_ns"] = pvemu;
  state.counters["const_ns"] = constant;
  state.counters["added_pct"] = 100.0 * (pvemu - constant) / constant;
  state.counters["noise_pct"] = 100.0 * (ns[2] - ns[0]) / ns[0];
}
BENCHMARK(BM_KvmMsrExit_PvemuVsConst)->UseRealTime()->MinTime(2.0);

// The two halves on their own, for the table.
template <bool kPvemu>
void KvmMsrExit(benchmark::State& state) {
  KvmLoop loop(kRdmsrLoop, sizeof kRdmsrLoop);
  if (!loop.error().empty()) {
    state.SkipWithError(loop.error().c_str());
    return;
  }
  for (auto _ : state) {
    if (!loop.Run() || loop.run()->exit_reason != KVM_EXIT_X86_RDMSR) {
      state.SkipWithError("the guest loop stopped");
      return;
    }
    if (kPvemu) {
      pvemu_kvm_handle_exit(loop.vcpu(), loop.run());
    } else {
      AnswerConst(loop.run());
    }
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_KvmMsrExit_Pvemu(benchmark::State& state) { KvmMsrExit<true>(state); }
void BM_KvmMsrExit_Const(benchmark::State& state) { KvmMsrExit<false>(state); }
BENCHMARK(BM_KvmMsrExit_Pvemu)->UseRealTime();
BENCHMARK(BM_KvmMsrExit_Const)->UseRealTime();

// An MSR no rule names stays with KVM, filter installed: 1000 RDMSRs of the
// TSC per KVM_RUN, then an OUT to 0x80 returns to user space. The counter
// user_msr_exits must stay 0.
//   mov si, 1000; l: mov ecx, 0x10; rdmsr; dec si; jnz l; out 0x80, al; jmp 0
constexpr uint8_t kInKernelLoop[] = {0xbe, 0xe8, 0x03, 0x66, 0xb9, kKvmMsr, 0, 0, 0,
                                     0x0f, 0x32, 0x4e, 0x75, 0xf5, 0xe6, 0x80, 0xeb, 0xee};
constexpr int kRdmsrsPerRun = 1000;

void BM_KvmMsrInKernel(benchmark::State& state) {
  KvmLoop loop(kInKernelLoop, sizeof kInKernelLoop);
  if (!loop.error().empty()) {
    state.SkipWithError(loop.error().c_str());
    return;
  }
  for (auto _ : state) {
    if (!loop.Run()) {
      state.SkipWithError(loop.error().c_str());
      return;
    }
    if (loop.run()->exit_reason != KVM_EXIT_IO) {
      // Anything but the loop's OUT (an MSR exit above all) breaks the claim.
      state.SkipWithError(("unexpected exit " + std::to_string(loop.run()->exit_reason)).c_str());
      return;
    }
    pvemu_kvm_handle_exit(loop.vcpu(), loop.run());
  }
  pvemu_kvm_stats stats{};
  stats.size = sizeof stats;
  pvemu_kvm_vcpu_stats(loop.vcpu(), &stats);
  state.counters["user_msr_exits"] = static_cast<double>(stats.rdmsr + stats.wrmsr);
  state.SetItemsProcessed(state.iterations() * kRdmsrsPerRun);
}
BENCHMARK(BM_KvmMsrInKernel)->UseRealTime();

}  // namespace
}  // namespace pvemu::bench
