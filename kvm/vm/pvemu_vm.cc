// pvemu-vm: the reference runner of issue 18, section 4. A minimal VMM that
// runs a flat binary on KVM and lets pvemu answer the guest's MSR and port
// accesses through libpvemu-kvm's C ABI (pvemu_kvm.h) only: it is meant to be
// read by VMM authors, so it uses nothing else of pvemu, and no library but
// libc and the C++ standard library.
//
// The flags, the entry state (x86_setup.h), the ports (devices.h), the exit
// statuses and the output streams are a contract that tests outside this
// repository rely on: change none of them.
//
//   0    every vCPU halted
//   V    the guest wrote V to port 0xf4 (V & 0xff)
//   2    bad input, or the VM could not be set up; it never ran
//   3    the guest crashed: triple fault, KVM internal error, failed entry,
//        or an exit this runner does not handle (stderr names it and RIP)
//   124  --timeout passed
//
// stdout carries the guest's console bytes only, then with -o json the
// summary as one JSON object on the last line; everything the runner says
// goes to stderr.
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
// A note for C++ VMMs: in linux-libc-dev 6.1's <linux/kvm.h>, a struct with a
// flexible array (kvm_cpuid2, kvm_msrs, kvm_msr_list, ...) has a different
// layout and ioctl number in C++ than in C: __DECLARE_FLEX_ARRAY adds an
// empty struct, whose size is 1 in C++, so KVM answers EINVAL. This runner
// uses none of them; a VMM that does must declare its own header struct.
#include <linux/kvm.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "devices.h"
#include "pvemu_kvm.h"
#include "x86_setup.h"

namespace pvemu_vm {
namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitCrash = 3;
constexpr int kExitTimeout = 124;

// How a vCPU thread is pulled out of KVM_RUN when the run ends: an empty
// handler installed without SA_RESTART makes KVM_RUN return EINTR, and
// kvm_run.immediate_exit covers a thread that is just about to enter it.
constexpr int kKickSignal = SIGUSR1;

// KVM's address for the real-mode TSS (three pages). api.rst calls
// KVM_SET_TSS_ADDR "required on Intel-based hosts"; it lies above our RAM
// (at most 1 GiB) and below 4 GiB, where QEMU puts it too.
constexpr uint64_t kKvmTssAddr = 0xfffbd000;

const char kUsage[] =
    "Usage: pvemu-vm --domain=N (--policy=FILE|NAME | --server=ADDR)\n"
    "                [--host=sim|linux] [--host-profile=NAME|FILE] [--vcpus=N]\n"
    "                [--memory=MIB] [--timeout=SECONDS] [--stats] [-o json] IMAGE\n"
    "\n"
    "Runs the flat binary IMAGE on KVM, loaded at guest-physical 0x100000 and\n"
    "entered there in 64-bit long mode on every vCPU; pvemu decides the guest's\n"
    "MSR accesses and which ports reach this runner's devices.\n"
    "\n"
    "  --domain=N            the domain number the policy's layers use (required)\n"
    "  --policy=FILE|NAME    the whole policy: a file or a shipped name (kvm, default)\n"
    "  --server=ADDR         subscribe to pvemud instead (unix:PATH); 5 s to answer\n"
    "  --host=sim|linux      where PASSTHROUGH reads go (default sim)\n"
    "  --host-profile=NAME|FILE  the sim host's profile (default: the Intel one)\n"
    "  --vcpus=N             vCPUs, 1 to KVM_CAP_NR_VCPUS (default 1)\n"
    "  --memory=MIB          guest RAM from guest-physical 0, 2 to 1024 (default 64)\n"
    "  --timeout=SECONDS     end the run with status 124 after this (default 30)\n"
    "  --stats               print the summary to stderr at the end\n"
    "  -o json               print the summary as JSON on stdout's last line\n"
    "\n"
    "Ports: 0x3f8 console out, 0x3fd line status (0x60), 0xf4 exit with V & 0xff,\n"
    "0x510 32-bit scratch register. Exit status: 0 all vCPUs halted, V from port\n"
    "0xf4, 2 bad input, 3 guest crash, 124 timeout.\n";

// Prints "pvemu-vm: MESSAGE" to stderr.
void Say(const char* format, ...) __attribute__((format(printf, 1, 2)));
void Say(const char* format, ...) {
  char line[2048];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  std::fprintf(stderr, "pvemu-vm: %s\n", line);
}

// Bad input or a failed setup, before any vCPU runs: no thread to stop yet.
[[noreturn]] void Fail(const char* format, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void Fail(const char* format, ...) {
  char line[2048];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  std::fprintf(stderr, "pvemu-vm: %s\n", line);
  std::exit(kExitBadInput);
}

// ---------------------------------------------------------------------------
// Flags: GNU style (--name=value or --name value), parsed with getopt_long so
// that the runner needs no flags library.

struct Flags {
  uint32_t domain = 0;
  bool domain_given = false;  // --domain is required: it names the policy's layer
  std::string policy;
  std::string server;
  std::string host = "sim";
  std::string host_profile;
  uint32_t vcpus = 1;
  uint64_t memory_mib = 64;
  double timeout_s = 30;
  bool stats = false;
  bool json = false;
  std::string image;
};

// A decimal integer in [min, max], nothing else.
bool ParseUint(const char* text, uint64_t min, uint64_t max, uint64_t* out) {
  if (*text < '0' || *text > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return false;
  *out = v;
  return true;
}

Flags ParseFlags(int argc, char** argv) {
  enum : int {
    kDomain = 256, kPolicy, kServer, kHost, kHostProfile, kVcpus, kMemory, kTimeout, kStats,
  };
  static const option kOptions[] = {
      {"domain", required_argument, nullptr, kDomain},
      {"policy", required_argument, nullptr, kPolicy},
      {"server", required_argument, nullptr, kServer},
      {"host", required_argument, nullptr, kHost},
      {"host-profile", required_argument, nullptr, kHostProfile},
      {"vcpus", required_argument, nullptr, kVcpus},
      {"memory", required_argument, nullptr, kMemory},
      {"timeout", required_argument, nullptr, kTimeout},
      {"stats", no_argument, nullptr, kStats},
      {"output", required_argument, nullptr, 'o'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  Flags f;
  opterr = 0;  // our messages, not getopt's
  for (;;) {
    int index = -1;
    const int c = getopt_long(argc, argv, ":o:h", kOptions, &index);
    if (c == -1) break;
    const char* arg = optarg;
    uint64_t n = 0;
    switch (c) {
      case kDomain:
        if (!ParseUint(arg, 0, UINT32_MAX, &n)) {
          Fail("--domain=%s is not a domain number (a decimal from 0 to 4294967295)", arg);
        }
        f.domain = static_cast<uint32_t>(n);
        f.domain_given = true;
        break;
      case kPolicy:
        if (*arg == '\0') Fail("--policy is empty: give a policy file or a shipped name (kvm, default)");
        f.policy = arg;
        break;
      case kServer:
        if (*arg == '\0') Fail("--server is empty: give pvemud's address (unix:/run/pvemu/pvemu.sock)");
        f.server = arg;
        break;
      case kHost:
        if (std::strcmp(arg, "sim") != 0 && std::strcmp(arg, "linux") != 0) {
          Fail("--host=%s is not a host backend pvemu-vm can use: give sim or linux", arg);
        }
        f.host = arg;
        break;
      case kHostProfile:
        f.host_profile = arg;
        break;
      case kVcpus:
        // The upper bound here only keeps the number sane; KVM_CAP_NR_VCPUS
        // is checked once /dev/kvm is open.
        if (!ParseUint(arg, 1, 4096, &n)) {
          Fail("--vcpus=%s is not a vCPU count: give a decimal from 1 to KVM_CAP_NR_VCPUS", arg);
        }
        f.vcpus = static_cast<uint32_t>(n);
        break;
      case kMemory:
        if (!ParseUint(arg, 2, kMaxRamBytes >> 20, &n)) {
          Fail("--memory=%s is not a RAM size pvemu-vm can map: give MiB from 2 to 1024 "
               "(the image loads at 1 MiB; the page tables map only the first GiB)", arg);
        }
        f.memory_mib = n;
        break;
      case kTimeout: {
        char* end = nullptr;
        errno = 0;
        const double t = std::strtod(arg, &end);
        if (errno != 0 || end == arg || *end != '\0' || !std::isfinite(t) || t <= 0 || t > 1e6) {
          Fail("--timeout=%s is not a time limit: give seconds above 0 (for example 30 or 0.5)", arg);
        }
        f.timeout_s = t;
        break;
      }
      case kStats:
        f.stats = true;
        break;
      case 'o':
        if (std::strcmp(arg, "json") == 0) {
          f.json = true;
        } else if (std::strcmp(arg, "text") == 0) {
          f.json = false;
        } else {
          Fail("-o %s is not an output format: give -o json (or -o text, the default)", arg);
        }
        break;
      case 'h':
        std::fputs(kUsage, stdout);
        std::exit(0);
      case ':':
        Fail("%s needs a value (%s%sVALUE); see pvemu-vm --help", argv[optind - 1],
             argv[optind - 1], argv[optind - 1][1] == '-' ? "=" : " ");
      default:
        Fail("unknown flag %s; see pvemu-vm --help", argv[optind - 1]);
    }
  }
  if (optind == argc) Fail("no IMAGE: give the flat binary to run (as + objcopy -O binary)");
  if (argc - optind > 1) {
    Fail("more than one IMAGE (%s, then %s): give exactly one flat binary", argv[optind],
         argv[optind + 1]);
  }
  f.image = argv[optind];
  if (!f.domain_given) {
    Fail("no --domain=N: give the domain number whose policy layer the VM follows");
  }
  if (f.policy.empty() == f.server.empty()) {
    Fail("%s: give exactly one of --policy=FILE|NAME (standalone) and --server=ADDR (pvemud)",
         f.policy.empty() ? "no policy" : "both --policy and --server");
  }
  if (!f.host_profile.empty() && f.host != "sim") {
    Fail("--host-profile=%s needs --host=sim: the linux host reads the real CPU",
         f.host_profile.c_str());
  }
  return f;
}

// ---------------------------------------------------------------------------
// The run: vCPU threads, how a run ends, the summary.

// Exits the runner counts itself; pvemu counts RDMSR, WRMSR and I/O.
struct ExitCounts {
  uint64_t hlt = 0;
  uint64_t mmio = 0;
  uint64_t shutdown = 0;
  uint64_t internal_error = 0;
  uint64_t fail_entry = 0;
  uint64_t other = 0;
};

struct Vcpu {
  uint32_t index = 0;
  int fd = -1;
  kvm_run* run = nullptr;
  size_t run_size = 0;
  pvemu_kvm_vcpu* pvemu = nullptr;
  std::thread thread;
  // Written by the vCPU's own thread only; read after it is joined.
  ExitCounts exits;
  pvemu_kvm_stats stats{};
};

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

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

// RIP as text, for messages; read with KVM_GET_REGS (off the fast path).
std::string RipText(int vcpu_fd) {
  kvm_regs regs{};
  if (ioctl(vcpu_fd, KVM_GET_REGS, &regs) < 0) {
    return std::string("unknown (KVM_GET_REGS: ") + std::strerror(errno) + ")";
  }
  return Hex(regs.rip);
}

// The message for an exit that crashes the guest (exit status 3).
std::string CrashMessage(const Vcpu& cpu) {
  const kvm_run& run = *cpu.run;
  std::string where = "vCPU " + std::to_string(cpu.index) + " stopped on " +
                      ExitName(run.exit_reason) + " (" + std::to_string(run.exit_reason) +
                      ") at RIP " + RipText(cpu.fd);
  switch (run.exit_reason) {
    case KVM_EXIT_SHUTDOWN: {
      // KVM on AMD resets the vCPU on a shutdown intercept (the VMCB is
      // undefined after it), so RIP there is the reset vector, not the fault.
      kvm_sregs sregs{};
      const bool reset = ioctl(cpu.fd, KVM_GET_SREGS, &sregs) == 0 && !(sregs.cr0 & 1) &&
                         sregs.cs.selector == 0xf000;
      return where + (reset ? " (the reset vector: KVM reset the vCPU, so the faulting RIP is lost)"
                            : "") +
             ": a triple fault; the guest crashed (check its IDT, stack and page tables)";
    }
    case KVM_EXIT_INTERNAL_ERROR: {
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
      return where + ": KVM internal error, suberror " + std::to_string(run.internal.suberror) +
             sub + (data.empty() ? "" : ", data " + data) +
             "; KVM could not run the instruction there";
    }
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

// One vCPU's thread: KVM_RUN, let pvemu see the exit, then do what is left.
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
    // pvemu first: it answers RDMSR/WRMSR and the ports the policy keeps,
    // and says which exits are ours.
    const int handled = pvemu_kvm_handle_exit(cpu.pvemu, cpu.run);
    if (handled < 0) {
      control.End(kExitCrash, "pvemu_kvm_handle_exit on vCPU " + std::to_string(cpu.index) +
                                  " failed for " + ExitName(cpu.run->exit_reason) + " at RIP " +
                                  RipText(cpu.fd) + ": " + pvemu_kvm_last_error());
      break;
    }
    if (handled == PVEMU_KVM_HANDLED) continue;
    if (handled == PVEMU_KVM_DEVICE) {
      const Devices::Result r = devices.HandleIoExit(cpu.run);
      if (r.end_run) {
        control.End(r.exit_status, "");
        break;
      }
      continue;
    }
    const uint32_t reason = cpu.run->exit_reason;
    if (reason == KVM_EXIT_HLT) {
      // Interrupts are off and there is no interrupt controller: a halted
      // vCPU never wakes, so it stops here.
      ++cpu.exits.hlt;
      control.Halted();
      break;
    }
    switch (reason) {
      case KVM_EXIT_MMIO: ++cpu.exits.mmio; break;
      case KVM_EXIT_SHUTDOWN: ++cpu.exits.shutdown; break;
      case KVM_EXIT_INTERNAL_ERROR: ++cpu.exits.internal_error; break;
      case KVM_EXIT_FAIL_ENTRY: ++cpu.exits.fail_entry; break;
      default: ++cpu.exits.other; break;
    }
    control.End(kExitCrash, CrashMessage(cpu));
    break;
  }
  // pvemu's counts are read from the vCPU's own thread (pvemu_kvm.h).
  pvemu_kvm_vcpu_stats(cpu.pvemu, &cpu.stats);
}

void OnKick(int) {}

// Pulls every vCPU thread out of KVM_RUN once the run has ended.
void KickAll(std::vector<std::unique_ptr<Vcpu>>& vcpus) {
  for (auto& cpu : vcpus) {
    std::atomic_ref<uint8_t>(cpu->run->immediate_exit).store(1);
    pthread_kill(cpu->thread.native_handle(), kKickSignal);
  }
}

struct Summary {
  int exit_status = 0;
  uint32_t vcpus = 0;
  uint64_t generation = 0;
  double seconds = 0;
  ExitCounts exits;
  pvemu_kvm_stats pvemu{};

  double PvemuNsPerExit() const {
    const uint64_t n = pvemu.rdmsr + pvemu.wrmsr + pvemu.io;
    return n ? static_cast<double>(pvemu.pvemu_ns) / static_cast<double>(n) : 0.0;
  }
};

Summary Summarize(int status, uint64_t generation, double seconds,
                  const std::vector<std::unique_ptr<Vcpu>>& vcpus) {
  Summary s;
  s.exit_status = status;
  s.vcpus = static_cast<uint32_t>(vcpus.size());
  s.generation = generation;
  s.seconds = seconds;
  for (const auto& cpu : vcpus) {
    s.exits.hlt += cpu->exits.hlt;
    s.exits.mmio += cpu->exits.mmio;
    s.exits.shutdown += cpu->exits.shutdown;
    s.exits.internal_error += cpu->exits.internal_error;
    s.exits.fail_entry += cpu->exits.fail_entry;
    s.exits.other += cpu->exits.other;
    s.pvemu.rdmsr += cpu->stats.rdmsr;
    s.pvemu.wrmsr += cpu->stats.wrmsr;
    s.pvemu.io += cpu->stats.io;
    s.pvemu.completed += cpu->stats.completed;
    s.pvemu.exceptions += cpu->stats.exceptions;
    s.pvemu.device += cpu->stats.device;
    s.pvemu.pvemu_ns += cpu->stats.pvemu_ns;
  }
  return s;
}

void PrintStatsText(const Summary& s) {
  std::fprintf(stderr,
               "pvemu-vm: exit status %d after %.3f s; %u vCPU(s); policy generation %" PRIu64 "\n"
               "  exits: rdmsr %" PRIu64 ", wrmsr %" PRIu64 ", io %" PRIu64 ", hlt %" PRIu64
               ", mmio %" PRIu64 ", shutdown %" PRIu64 ", internal_error %" PRIu64
               ", fail_entry %" PRIu64 ", other %" PRIu64 "\n"
               "  outcomes: completed %" PRIu64 ", exception %" PRIu64 ", device %" PRIu64 "\n"
               "  pvemu: %.0f ns per exit\n",
               s.exit_status, s.seconds, s.vcpus, s.generation, s.pvemu.rdmsr, s.pvemu.wrmsr,
               s.pvemu.io, s.exits.hlt, s.exits.mmio, s.exits.shutdown, s.exits.internal_error,
               s.exits.fail_entry, s.exits.other, s.pvemu.completed, s.pvemu.exceptions,
               s.pvemu.device, s.PvemuNsPerExit());
}

void PrintStatsJson(const Summary& s, int last_console_byte) {
  char line[1024];
  const int n = std::snprintf(
      line, sizeof line,
      "%s{\"exit_status\":%d,\"vcpus\":%u,\"generation\":%" PRIu64 ",\"seconds\":%.6f,"
      "\"exits\":{\"rdmsr\":%" PRIu64 ",\"wrmsr\":%" PRIu64 ",\"io\":%" PRIu64 ",\"hlt\":%" PRIu64
      ",\"mmio\":%" PRIu64 ",\"shutdown\":%" PRIu64 ",\"internal_error\":%" PRIu64
      ",\"fail_entry\":%" PRIu64 ",\"other\":%" PRIu64 "},"
      "\"outcomes\":{\"completed\":%" PRIu64 ",\"exception\":%" PRIu64 ",\"device\":%" PRIu64 "},"
      "\"pvemu_ns_per_exit\":%.1f}\n",
      // The summary is the last line on its own, after the console bytes.
      last_console_byte >= 0 && last_console_byte != '\n' ? "\n" : "", s.exit_status, s.vcpus,
      s.generation, s.seconds, s.pvemu.rdmsr, s.pvemu.wrmsr, s.pvemu.io, s.exits.hlt,
      s.exits.mmio, s.exits.shutdown, s.exits.internal_error, s.exits.fail_entry, s.exits.other,
      s.pvemu.completed, s.pvemu.exceptions, s.pvemu.device, s.PvemuNsPerExit());
  Devices::WriteStdout(line, static_cast<size_t>(n));
}

// ---------------------------------------------------------------------------

// Opens the image and checks its size against what RAM leaves for it.
int OpenImage(const Flags& f, uint64_t ram_bytes, uint64_t* size) {
  const int fd = open(f.image.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    Fail("cannot open IMAGE %s: %s; give a flat binary (as + objcopy -O binary)", f.image.c_str(),
         std::strerror(errno));
  }
  struct stat st{};
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    Fail("IMAGE %s is not a regular file; give a flat binary (as + objcopy -O binary)",
         f.image.c_str());
  }
  if (st.st_size == 0) {
    Fail("IMAGE %s is empty: there is no code to run at 0x100000", f.image.c_str());
  }
  const uint64_t max = MaxImageBytes(ram_bytes, f.vcpus);
  if (static_cast<uint64_t>(st.st_size) > max) {
    Fail("IMAGE %s is too large: %lld bytes, but --memory=%" PRIu64 " MiB leaves %" PRIu64
         " bytes (RAM - 1 MiB - %u vCPU stacks x 64 KiB); give more --memory",
         f.image.c_str(), static_cast<long long>(st.st_size), f.memory_mib, max, f.vcpus);
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  const uint64_t ram_bytes = f.memory_mib << 20;
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the guest

  uint64_t image_size = 0;
  const int image_fd = OpenImage(f, ram_bytes, &image_size);

  // 1. /dev/kvm.
  const int kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm_fd < 0) {
    if (errno == ENOENT || errno == ENXIO || errno == ENODEV) {
      Fail("no /dev/kvm (%s): this machine offers no KVM; load kvm-intel or kvm-amd, or run "
           "inside tests/kvm/run-in-kvm-vm.sh", std::strerror(errno));
    }
    Fail("cannot open /dev/kvm: %s; add this user to the kvm group or run as root",
         std::strerror(errno));
  }
  const int api = ioctl(kvm_fd, KVM_GET_API_VERSION, 0);
  if (api != KVM_API_VERSION) {
    Fail("/dev/kvm speaks KVM API %d, not %d; this kernel's KVM is not usable", api,
         KVM_API_VERSION);
  }
  int max_vcpus = ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_NR_VCPUS);
  if (max_vcpus <= 0) max_vcpus = 4;  // api.rst: "assume 4" without the capability
  if (f.vcpus > static_cast<uint32_t>(max_vcpus)) {
    Fail("--vcpus=%u is above KVM_CAP_NR_VCPUS (%d) on this host; give at most %d", f.vcpus,
         max_vcpus, max_vcpus);
  }

  // 2. pvemu: the policy, compiled for this domain and host.
  pvemu_kvm_options options{};
  options.size = sizeof options;
  options.domain = f.domain;
  options.policy = f.policy.empty() ? nullptr : f.policy.c_str();
  options.server = f.server.empty() ? nullptr : f.server.c_str();
  options.connect_timeout_ms = 5000;  // issue 18: unreachable within 5 s is bad input
  options.host = f.host.c_str();
  options.host_profile = f.host_profile.empty() ? nullptr : f.host_profile.c_str();
  pvemu_kvm* pvemu = nullptr;
  if (const int rc = pvemu_kvm_open(&options, &pvemu); rc < 0) {
    Fail("pvemu_kvm_open (%s %s) failed: %s", f.policy.empty() ? "--server" : "--policy",
         f.policy.empty() ? f.server.c_str() : f.policy.c_str(), pvemu_kvm_last_error());
  }

  // 3. The VM: RAM at guest-physical 0, then pvemu's MSR exits and filter.
  const int vm_fd = ioctl(kvm_fd, KVM_CREATE_VM, 0);
  if (vm_fd < 0) Fail("KVM_CREATE_VM failed: %s", std::strerror(errno));
  void* ram_map = mmap(nullptr, ram_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (ram_map == MAP_FAILED) {
    Fail("cannot map %" PRIu64 " MiB of guest RAM: %s; give less --memory", f.memory_mib,
         std::strerror(errno));
  }
  auto* ram = static_cast<uint8_t*>(ram_map);
  kvm_userspace_memory_region region{};
  region.slot = 0;
  region.guest_phys_addr = 0;
  region.memory_size = ram_bytes;
  region.userspace_addr = reinterpret_cast<uintptr_t>(ram);
  if (ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &region) < 0) {
    Fail("KVM_SET_USER_MEMORY_REGION (%" PRIu64 " MiB at 0) failed: %s", f.memory_mib,
         std::strerror(errno));
  }
  if (ioctl(vm_fd, KVM_SET_TSS_ADDR, kKvmTssAddr) < 0) {
    Fail("KVM_SET_TSS_ADDR (%s) failed: %s", Hex(kKvmTssAddr).c_str(), std::strerror(errno));
  }
  if (pvemu_kvm_setup_vm(pvemu, vm_fd) < 0) {
    Fail("pvemu_kvm_setup_vm failed: %s", pvemu_kvm_last_error());
  }

  // 4. Guest memory: system tables below 1 MiB, the image at 1 MiB.
  WriteSystemTables(ram);
  for (uint64_t done = 0; done < image_size;) {
    const ssize_t n = pread(image_fd, ram + kImageAddr + done, image_size - done,
                            static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Fail("cannot read IMAGE %s: %s", f.image.c_str(), n < 0 ? std::strerror(errno)
                                                              : "it shrank while being read");
    }
    done += static_cast<uint64_t>(n);
  }
  close(image_fd);

  // 5. vCPUs: create, map kvm_run, pvemu's CPUID, then the entry state.
  const int run_size = ioctl(kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
  if (run_size < static_cast<int>(sizeof(kvm_run))) {
    Fail("KVM_GET_VCPU_MMAP_SIZE gave %d: %s", run_size, std::strerror(errno));
  }
  std::vector<std::unique_ptr<Vcpu>> vcpus;
  for (uint32_t i = 0; i < f.vcpus; ++i) {
    auto cpu = std::make_unique<Vcpu>();
    cpu->index = i;
    cpu->fd = ioctl(vm_fd, KVM_CREATE_VCPU, i);
    if (cpu->fd < 0) Fail("KVM_CREATE_VCPU %u failed: %s", i, std::strerror(errno));
    cpu->run_size = static_cast<size_t>(run_size);
    void* run = mmap(nullptr, cpu->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, cpu->fd, 0);
    if (run == MAP_FAILED) Fail("mmap of vCPU %u's kvm_run failed: %s", i, std::strerror(errno));
    cpu->run = static_cast<kvm_run*>(run);
    if (pvemu_kvm_vcpu_open(pvemu, kvm_fd, cpu->fd, i, &cpu->pvemu) < 0) {
      Fail("pvemu_kvm_vcpu_open for vCPU %u failed: %s", i, pvemu_kvm_last_error());
    }
    std::string error;
    if (!SetEntryState(cpu->fd, i, f.vcpus, ram_bytes, &error)) Fail("%s", error.c_str());
    vcpus.push_back(std::move(cpu));
  }

  // 6. Run: one thread per vCPU until they all halt, the guest exits, it
  // crashes, or the time is up.
  struct sigaction kick{};
  kick.sa_handler = OnKick;  // no SA_RESTART: KVM_RUN returns EINTR
  sigemptyset(&kick.sa_mask);
  sigaction(kKickSignal, &kick, nullptr);

  Devices devices;
  RunControl control(f.vcpus);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(f.timeout_s));
  for (auto& cpu : vcpus) {
    cpu->thread = std::thread(RunVcpu, std::ref(*cpu), std::ref(devices), std::ref(control));
  }
  const bool timed_out = !control.WaitUntil(deadline) && control.End(kExitTimeout, "");
  KickAll(vcpus);
  for (auto& cpu : vcpus) cpu->thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (timed_out) {
    std::string where;
    for (const auto& cpu : vcpus) {
      where += (where.empty() ? "" : ", ") + std::string("vCPU ") + std::to_string(cpu->index) +
               " at RIP " + RipText(cpu->fd);
    }
    Say("the guest ran past --timeout=%g s; stopped it (%s); exit status 124", f.timeout_s,
        where.c_str());
  }

  const int status = control.status();
  const Summary summary = Summarize(status, pvemu_kvm_generation(pvemu), seconds, vcpus);
  if (f.stats) PrintStatsText(summary);
  if (f.json) PrintStatsJson(summary, devices.last_console_byte());

  for (auto& cpu : vcpus) {
    pvemu_kvm_vcpu_close(cpu->pvemu);
    munmap(cpu->run, cpu->run_size);
    close(cpu->fd);
  }
  pvemu_kvm_close(pvemu);
  munmap(ram, ram_bytes);
  close(vm_fd);
  close(kvm_fd);
  return status;
}

}  // namespace
}  // namespace pvemu_vm

int main(int argc, char** argv) { return pvemu_vm::Main(argc, argv); }
