#include "exit_loop.h"

#include <errno.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "messages.h"
#include "pvemu_kvm.h"

namespace pvemu_vm {
namespace {

// How a vCPU thread is pulled out of KVM_RUN when the run ends: an empty
// handler installed without SA_RESTART makes KVM_RUN return EINTR, and
// kvm_run.immediate_exit covers a thread that is just about to enter it.
constexpr int kKickSignal = SIGUSR1;

// How the run ends; the first End wins. Thread-safe.
class RunControl {
 public:
  explicit RunControl(uint32_t nvcpus) : running_(nvcpus) {}

  // Ends the run with `status`, printing `message` (if any) when this is the
  // first end. Returns whether it was.
  bool End(int status, const std::string& message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_.load()) return false;
    status_ = status;
    ended_.store(true, std::memory_order_release);
    if (!message.empty()) Say("%s", message.c_str());
    cv_.notify_all();
    return true;
  }

  // A vCPU halted; the last one ends the run with 0.
  void Halted() {
    if (running_.fetch_sub(1) == 1) End(0, "");
  }

  bool ended() const { return ended_.load(std::memory_order_acquire); }

  // Waits for the end or the deadline. Returns false at the deadline.
  bool WaitUntil(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [this] { return ended_.load(); });
  }

  int status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> ended_{false};
  std::atomic<uint32_t> running_;
  int status_ = 0;
};

const char* ExitName(uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_UNKNOWN: return "KVM_EXIT_UNKNOWN";
    case KVM_EXIT_EXCEPTION: return "KVM_EXIT_EXCEPTION";
    case KVM_EXIT_IO: return "KVM_EXIT_IO";
    case KVM_EXIT_HYPERCALL: return "KVM_EXIT_HYPERCALL";
    case KVM_EXIT_DEBUG: return "KVM_EXIT_DEBUG";
    case KVM_EXIT_HLT: return "KVM_EXIT_HLT";
    case KVM_EXIT_MMIO: return "KVM_EXIT_MMIO";
    case KVM_EXIT_IRQ_WINDOW_OPEN: return "KVM_EXIT_IRQ_WINDOW_OPEN";
    case KVM_EXIT_SHUTDOWN: return "KVM_EXIT_SHUTDOWN";
    case KVM_EXIT_FAIL_ENTRY: return "KVM_EXIT_FAIL_ENTRY";
    case KVM_EXIT_INTR: return "KVM_EXIT_INTR";
    case KVM_EXIT_SET_TPR: return "KVM_EXIT_SET_TPR";
    case KVM_EXIT_TPR_ACCESS: return "KVM_EXIT_TPR_ACCESS";
    case KVM_EXIT_NMI: return "KVM_EXIT_NMI";
    case KVM_EXIT_INTERNAL_ERROR: return "KVM_EXIT_INTERNAL_ERROR";
    case KVM_EXIT_SYSTEM_EVENT: return "KVM_EXIT_SYSTEM_EVENT";
    case KVM_EXIT_IOAPIC_EOI: return "KVM_EXIT_IOAPIC_EOI";
    case KVM_EXIT_HYPERV: return "KVM_EXIT_HYPERV";
    case KVM_EXIT_X86_RDMSR: return "KVM_EXIT_X86_RDMSR";
    case KVM_EXIT_X86_WRMSR: return "KVM_EXIT_X86_WRMSR";
    case KVM_EXIT_DIRTY_RING_FULL: return "KVM_EXIT_DIRTY_RING_FULL";
    case KVM_EXIT_X86_BUS_LOCK: return "KVM_EXIT_X86_BUS_LOCK";
    default: return "an exit reason this runner does not know";
  }
}

// RIP as text, for messages; read with KVM_GET_REGS (off the fast path).
std::string RipText(int vcpu_fd) {
  kvm_regs regs{};
  if (ioctl(vcpu_fd, KVM_GET_REGS, &regs) < 0) {
    return std::string("unknown (KVM_GET_REGS: ") + std::strerror(errno) + ")";
  }
  return Hex(regs.rip);
}

// What CrashMessage says after a KVM_EXIT_SHUTDOWN: a triple fault.
std::string ShutdownText(int vcpu_fd) {
  // KVM on AMD resets the vCPU on a shutdown intercept (the VMCB is
  // undefined after it), so RIP there is the reset vector, not the fault.
  kvm_sregs sregs{};
  const bool reset = ioctl(vcpu_fd, KVM_GET_SREGS, &sregs) == 0 && !(sregs.cr0 & 1) &&
                     sregs.cs.selector == 0xf000;
  return std::string(reset ? " (the reset vector: KVM reset the vCPU, so the faulting RIP is lost)"
                           : "") +
         ": a triple fault; the guest crashed (check its IDT, stack and page tables)";
}

// What CrashMessage says after a KVM_EXIT_INTERNAL_ERROR.
std::string InternalErrorText(const kvm_run& run) {
  std::string data;
  for (uint32_t i = 0; i < run.internal.ndata && i < 16; ++i) {
    data += (i ? " " : "") + Hex(run.internal.data[i]);
  }
  const char* sub = run.internal.suberror == KVM_INTERNAL_ERROR_EMULATION ? " (emulation failure)"
                    : run.internal.suberror == KVM_INTERNAL_ERROR_SIMUL_EX
                        ? " (exception during exception delivery)"
                    : run.internal.suberror == KVM_INTERNAL_ERROR_DELIVERY_EV
                        ? " (event delivery failed)"
                        : "";
  return ": KVM internal error, suberror " + std::to_string(run.internal.suberror) + sub +
         (data.empty() ? "" : ", data " + data) + "; KVM could not run the instruction there";
}

// The message for an exit that crashes the guest (exit status 3).
std::string CrashMessage(const Vcpu& cpu) {
  const kvm_run& run = *cpu.run;
  const std::string where = "vCPU " + std::to_string(cpu.index) + " stopped on " +
                            ExitName(run.exit_reason) + " (" + std::to_string(run.exit_reason) +
                            ") at RIP " + RipText(cpu.fd);
  switch (run.exit_reason) {
    case KVM_EXIT_SHUTDOWN: return where + ShutdownText(cpu.fd);
    case KVM_EXIT_INTERNAL_ERROR: return where + InternalErrorText(run);
    case KVM_EXIT_FAIL_ENTRY:
      return where + ": VM entry failed, hardware reason " +
             Hex(run.fail_entry.hardware_entry_failure_reason) + " on host CPU " +
             std::to_string(run.fail_entry.cpu) + "; the vCPU state is invalid";
    case KVM_EXIT_MMIO:
      return where + ": the guest " + (run.mmio.is_write ? "wrote " : "read ") +
             std::to_string(run.mmio.len) + " bytes at guest-physical " + Hex(run.mmio.phys_addr) +
             ", outside RAM, where this runner has no device (give more --memory?)";
    default:
      return where + ": pvemu-vm does not handle this exit; the guest cannot go on";
  }
}

// An exit neither pvemu nor the device model took: HLT stops the vCPU
// (interrupts are off and there is no interrupt controller, so a halted vCPU
// never wakes); any other crashes the guest.
void StopVcpu(Vcpu& cpu, RunControl& control) {
  const uint32_t reason = cpu.run->exit_reason;
  if (reason == KVM_EXIT_HLT) {
    ++cpu.exits.hlt;
    control.Halted();
    return;
  }
  switch (reason) {
    case KVM_EXIT_MMIO: ++cpu.exits.mmio; break;
    case KVM_EXIT_SHUTDOWN: ++cpu.exits.shutdown; break;
    case KVM_EXIT_INTERNAL_ERROR: ++cpu.exits.internal_error; break;
    case KVM_EXIT_FAIL_ENTRY: ++cpu.exits.fail_entry; break;
    default: ++cpu.exits.other; break;
  }
  control.End(kExitCrash, CrashMessage(cpu));
}

// One exit: pvemu first (it answers RDMSR/WRMSR and the ports the policy
// keeps, and says which exits are ours), then the device model, then
// StopVcpu. Returns whether the vCPU runs again.
bool HandleExit(Vcpu& cpu, Devices& devices, RunControl& control) {
  const int handled = pvemu_kvm_handle_exit(cpu.pvemu, cpu.run);
  if (handled < 0) {
    control.End(kExitCrash, "pvemu_kvm_handle_exit on vCPU " + std::to_string(cpu.index) +
                                " failed for " + ExitName(cpu.run->exit_reason) + " at RIP " +
                                RipText(cpu.fd) + ": " + pvemu_kvm_last_error());
    return false;
  }
  if (handled == PVEMU_KVM_HANDLED) return true;
  if (handled == PVEMU_KVM_DEVICE) {
    const Devices::Result r = devices.HandleIoExit(cpu.run);
    if (r.end_run) control.End(r.exit_status, "");
    return !r.end_run;
  }
  StopVcpu(cpu, control);
  return false;
}

// One vCPU's thread: KVM_RUN and HandleExit until the run ends.
void RunVcpu(Vcpu& cpu, Devices& devices, RunControl& control) {
  char name[16];
  std::snprintf(name, sizeof name, "vcpu%u", cpu.index);
  pthread_setname_np(pthread_self(), name);
  while (!control.ended()) {
    if (ioctl(cpu.fd, KVM_RUN, 0) < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;  // a kick: the loop checks the end
      control.End(kExitCrash, "KVM_RUN on vCPU " + std::to_string(cpu.index) + " failed at RIP " +
                                  RipText(cpu.fd) + ": " + std::strerror(errno));
      break;
    }
    if (!HandleExit(cpu, devices, control)) break;
  }
  // pvemu's counts are read from the vCPU's own thread (pvemu_kvm.h); the
  // size says which counts this runner knows.
  cpu.stats.size = sizeof cpu.stats;
  pvemu_kvm_vcpu_stats(cpu.pvemu, &cpu.stats);
}

void OnKick(int) {}

void InstallKickHandler() {
  struct sigaction kick{};
  kick.sa_handler = OnKick;  // no SA_RESTART: KVM_RUN returns EINTR
  sigemptyset(&kick.sa_mask);
  sigaction(kKickSignal, &kick, nullptr);
}

// Pulls every vCPU thread out of KVM_RUN once the run has ended.
void KickAll(std::vector<std::unique_ptr<Vcpu>>& vcpus) {
  for (auto& cpu : vcpus) {
    std::atomic_ref<uint8_t>(cpu->run->immediate_exit).store(1);
    pthread_kill(cpu->thread.native_handle(), kKickSignal);
  }
}

// Says where each vCPU was when --timeout stopped the run.
void SayTimedOut(const std::vector<std::unique_ptr<Vcpu>>& vcpus, double timeout_s) {
  std::string where;
  for (const auto& cpu : vcpus) {
    where += (where.empty() ? "" : ", ") + std::string("vCPU ") + std::to_string(cpu->index) +
             " at RIP " + RipText(cpu->fd);
  }
  Say("the guest ran past --timeout=%g s; stopped it (%s); exit status 124", timeout_s,
      where.c_str());
}

}  // namespace

RunResult RunVm(Vm& vm, Devices& devices, double timeout_s) {
  InstallKickHandler();
  RunControl control(static_cast<uint32_t>(vm.vcpus.size()));
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(timeout_s));
  for (auto& cpu : vm.vcpus) {
    cpu->thread = std::thread(RunVcpu, std::ref(*cpu), std::ref(devices), std::ref(control));
  }
  const bool timed_out = !control.WaitUntil(deadline) && control.End(kExitTimeout, "");
  KickAll(vm.vcpus);
  for (auto& cpu : vm.vcpus) cpu->thread.join();
  RunResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (timed_out) SayTimedOut(vm.vcpus, timeout_s);
  result.status = control.status();
  return result;
}

}  // namespace pvemu_vm
