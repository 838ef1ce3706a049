#include "flags.h"

#include <errno.h>
#include <getopt.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "messages.h"
#include "x86_setup.h"

namespace pvemu_vm {
namespace {

const char kUsage[] =
    "Usage: pvemu-vm --domain=N (--policy=FILE|NAME | --server=ADDR)\n"
    "                [--host=sim|linux] [--host-profile=NAME|FILE] [--vcpus=N]\n"
    "                [--memory=MIB] [--timeout=SECONDS] [--capture=FILE] [--stats]\n"
    "                [-o json] IMAGE\n"
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
    "  --capture=FILE        record every exit pvemu decides to a trap log (.traps or\n"
    "                        .textproto) for pvemuctl replay and suggest\n"
    "  --stats               print the summary to stderr at the end\n"
    "  -o json               print the summary as JSON on stdout's last line\n"
    "\n"
    "Ports: 0x3f8 console out, 0x3fd line status (0x60), 0xf4 exit with V & 0xff,\n"
    "0x510 32-bit scratch register. Exit status: 0 all vCPUs halted, V from port\n"
    "0xf4, 2 bad input, 3 guest crash, 124 timeout.\n";

// getopt_long's values for the long options without a short form.
enum : int {
  kDomain = 256, kPolicy, kServer, kHost, kHostProfile, kVcpus, kMemory, kTimeout, kStats,
  kCapture,
};

const option kOptions[] = {
    {"domain", required_argument, nullptr, kDomain},
    {"policy", required_argument, nullptr, kPolicy},
    {"server", required_argument, nullptr, kServer},
    {"host", required_argument, nullptr, kHost},
    {"host-profile", required_argument, nullptr, kHostProfile},
    {"vcpus", required_argument, nullptr, kVcpus},
    {"memory", required_argument, nullptr, kMemory},
    {"timeout", required_argument, nullptr, kTimeout},
    {"stats", no_argument, nullptr, kStats},
    {"capture", required_argument, nullptr, kCapture},
    {"output", required_argument, nullptr, 'o'},
    {"help", no_argument, nullptr, 'h'},
    {nullptr, 0, nullptr, 0},
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

uint32_t ParseDomain(const char* arg) {
  uint64_t n = 0;
  if (!ParseUint(arg, 0, UINT32_MAX, &n)) {
    Fail("--domain=%s is not a domain number (a decimal from 0 to 4294967295)", arg);
  }
  return static_cast<uint32_t>(n);
}

const char* ParseHost(const char* arg) {
  if (std::strcmp(arg, "sim") != 0 && std::strcmp(arg, "linux") != 0) {
    Fail("--host=%s is not a host backend pvemu-vm can use: give sim or linux", arg);
  }
  return arg;
}

uint32_t ParseVcpus(const char* arg) {
  // The upper bound here only keeps the number sane; KVM_CAP_NR_VCPUS is
  // checked once /dev/kvm is open.
  uint64_t n = 0;
  if (!ParseUint(arg, 1, 4096, &n)) {
    Fail("--vcpus=%s is not a vCPU count: give a decimal from 1 to KVM_CAP_NR_VCPUS", arg);
  }
  return static_cast<uint32_t>(n);
}

uint64_t ParseMemoryMib(const char* arg) {
  uint64_t n = 0;
  if (!ParseUint(arg, 2, kMaxRamBytes >> 20, &n)) {
    Fail("--memory=%s is not a RAM size pvemu-vm can map: give MiB from 2 to 1024 "
         "(the image loads at 1 MiB; the page tables map only the first GiB)", arg);
  }
  return n;
}

double ParseTimeout(const char* arg) {
  char* end = nullptr;
  errno = 0;
  const double t = std::strtod(arg, &end);
  if (errno != 0 || end == arg || *end != '\0' || !std::isfinite(t) || t <= 0 || t > 1e6) {
    Fail("--timeout=%s is not a time limit: give seconds above 0 (for example 30 or 0.5)", arg);
  }
  return t;
}

// -o: whether the summary is JSON.
bool ParseOutput(const char* arg) {
  if (std::strcmp(arg, "json") == 0) return true;
  if (std::strcmp(arg, "text") == 0) return false;
  Fail("-o %s is not an output format: give -o json (or -o text, the default)", arg);
}

// One option getopt_long returned (`c`, with its value `arg`) into *f.
void ApplyOption(int c, const char* arg, char** argv, Flags* f) {
  switch (c) {
    case kDomain:
      f->domain = ParseDomain(arg);
      f->domain_given = true;
      break;
    case kPolicy:
      if (*arg == '\0') Fail("--policy is empty: give a policy file or a shipped name (kvm, default)");
      f->policy = arg;
      break;
    case kServer:
      if (*arg == '\0') Fail("--server is empty: give pvemud's address (unix:/run/pvemu/pvemu.sock)");
      f->server = arg;
      break;
    case kHost: f->host = ParseHost(arg); break;
    case kHostProfile: f->host_profile = arg; break;
    case kCapture: f->capture = arg; break;
    case kVcpus: f->vcpus = ParseVcpus(arg); break;
    case kMemory: f->memory_mib = ParseMemoryMib(arg); break;
    case kTimeout: f->timeout_s = ParseTimeout(arg); break;
    case kStats: f->stats = true; break;
    case 'o': f->json = ParseOutput(arg); break;
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

// The one IMAGE after the flags.
void TakeImage(int argc, char** argv, Flags* f) {
  if (optind == argc) Fail("no IMAGE: give the flat binary to run (as + objcopy -O binary)");
  if (argc - optind > 1) {
    Fail("more than one IMAGE (%s, then %s): give exactly one flat binary", argv[optind],
         argv[optind + 1]);
  }
  f->image = argv[optind];
}

// What the flags require of each other.
void CheckTogether(const Flags& f) {
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
}

}  // namespace

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  opterr = 0;  // our messages, not getopt's
  for (;;) {
    int index = -1;
    const int c = getopt_long(argc, argv, ":o:h", kOptions, &index);
    if (c == -1) break;
    ApplyOption(c, optarg, argv, &f);
  }
  TakeImage(argc, argv, &f);
  CheckTogether(f);
  return f;
}

}  // namespace pvemu_vm
