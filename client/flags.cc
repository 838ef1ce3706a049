#include "client/flags.h"

#include "absl/flags/flag.h"

// Numbers are strings here so that every command accepts decimal and 0x hex
// (and MSR names) the same way, with errors that name the flag (client/cli.h).
ABSL_FLAG(std::string, o, "text", "output: text | json (one JSON object per line)");
ABSL_FLAG(std::string, server, "",
          "pvemud address: unix:///path or host:port (TLS); default "
          "$PVEMU_SERVER, else unix:///run/pvemu/pvemu.sock");
ABSL_FLAG(std::string, tls_ca, "", "TLS: CA certificate that signed the server (PEM)");
ABSL_FLAG(std::string, tls_cert, "", "TLS: client certificate (PEM)");
ABSL_FLAG(std::string, tls_key, "", "TLS: client private key (PEM)");
ABSL_FLAG(std::string, mode, "64", "CPU mode: 64 | 32 | 16 | real");
ABSL_FLAG(std::string, policy, "", "policy textproto (default: the shipped default policy)");
ABSL_FLAG(std::string, host_profile, "",
          "host profile: a shipped name (intel-xeon-e-2136, the default; "
          "amd-epyc-7443p) or a profile textproto file's path");
ABSL_FLAG(std::string, host, "", "deprecated: the old spelling of --host-profile");
ABSL_FLAG(std::string, host_vendor, "",
          "host vendor: intel | amd | hygon | centaur | zhaoxin");
ABSL_FLAG(std::string, domain, "", "domain id, or 'default' for the default layer");
ABSL_FLAG(std::string, vcpu, "0", "vCPU index");
ABSL_FLAG(std::string, cpl, "0", "guest CPL, 0..3");
ABSL_FLAG(std::string, msr, "", "MSR: catalog name or number");
ABSL_FLAG(std::string, port, "", "explain: an I/O port (0..0xffff) instead of --msr");
ABSL_FLAG(uint32_t, width, 1, "explain --port: the access width in bytes (1, 2 or 4)");
ABSL_FLAG(bool, kvm, false,
          "explain --msr: also say whether the MSR exits to pvemu on KVM or stays with KVM");
ABSL_FLAG(std::string, range, "", "MSR range FIRST-LAST (names or numbers)");
ABSL_FLAG(std::string, write, "",
          "explain: the value written; set-rule: the write action "
          "(PASSTHROUGH, SHADOW, IGNORE, GP)");
ABSL_FLAG(std::string, read, "", "read action: PASSTHROUGH, CONST, SHADOW, ZERO, GP");
ABSL_FLAG(std::string, value, "", "rule value (CONST value, SHADOW initial value)");
ABSL_FLAG(std::string, writable_mask, "", "bits a guest write may change");
ABSL_FLAG(std::string, if_generation, "",
          "refuse the edit unless the policy is at this generation");
ABSL_FLAG(std::string, bytes, "", "instruction bytes in hex (spaces allowed)");
ABSL_FLAG(std::string, f, "", "policy file to apply or diff");
ABSL_FLAG(std::string, from, "auto", "import: auto | kvm-dmesg | xen-console | ftrace");
ABSL_FLAG(std::string, out, "", "import: the trap log to write (.textproto or .traps)");
ABSL_FLAG(bool, progress, false, "replay: draw a progress bar on a terminal");
ABSL_FLAG(std::string, jobs, "1",
          "replay: threads to replay a .traps file on, split by vCPU (0: one per CPU)");
ABSL_FLAG(std::string, count, "", "watch: stop after this many events");
ABSL_FLAG(bool, msrs, false, "stats: list the MSRs each domain touched, by access and action");
ABSL_FLAG(bool, changes, false,
          "replay: decide each recorded trap under the candidate (--policy, or --server's live "
          "policy) and list what would be answered differently");
ABSL_FLAG(bool, dry_run, false, "policy apply: check the edit against --against and apply nothing");
ABSL_FLAG(std::vector<std::string>, against, {},
          "policy apply --dry-run: the captures (comma-separated) to check the edit against");
ABSL_FLAG(bool, learned, false,
          "stats: list what learning domains did that ENFORCE would fault (mode: LEARN)");
ABSL_FLAG(std::string, interval, "1", "top: seconds between samples");
ABSL_FLAG(bool, once, false, "top: print one snapshot and exit");
ABSL_FLAG(std::string, layer, "",
          "fleet: the layer, default | class:NAME | host:ID | host:ID/domain:N");
ABSL_FLAG(std::string, if_revision, "",
          "fleet: refuse (ABORTED) unless the layer's key is at this etcd mod_revision");
ABSL_FLAG(std::string, timeout, "10", "seconds to wait for the server per call");
ABSL_FLAG(std::string, rax, "0", "emulate: RAX");
ABSL_FLAG(std::string, rbx, "0", "emulate: RBX");
ABSL_FLAG(std::string, rcx, "0", "emulate: RCX");
ABSL_FLAG(std::string, rdx, "0", "emulate: RDX");
ABSL_FLAG(std::string, rsi, "0", "emulate: RSI");
ABSL_FLAG(std::string, rdi, "0", "emulate: RDI");
ABSL_FLAG(std::string, rip, "0", "emulate: RIP");
ABSL_FLAG(std::string, rflags, "0x2", "emulate: RFLAGS");
ABSL_FLAG(std::string, host_tsc, "0", "emulate: the host TSC at the trap");
