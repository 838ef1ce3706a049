// pvemuctl: the pvemu command line. See CLI.md for the contract.
//
// Flags are parsed here rather than by absl::ParseCommandLine so that every
// usage error exits 2 (CLI.md) with a message, flags may be spelt with '-' or
// '_' (--host-vendor, --host_vendor), and "-" stays a positional argument.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/flags.h"

namespace pvemu::client {
namespace {

constexpr char kUsage[] = R"(pvemuctl: the pvemu command line.

Usage: pvemuctl COMMAND [flags] [args]     (-o json on every command that prints data)

Offline commands (no daemon needed):
  decode [--mode=64|32|16|real] HEX... | -     decode instruction bytes (stdin: one per line)
  validate FILE...                             check policy files
  explain [--policy=FILE | --server=ADDR] [--host-profile=PROFILE | --host-vendor=V]
          --domain=N --msr=MSR [--write=VALUE] [--kvm]
                                               what the policy does with an access
                                               (--kvm: and whether it exits on KVM)
  emulate [--policy=FILE] [--host-profile=PROFILE] --domain=N [--vcpu=N] [--mode=64] [--cpl=0]
          --bytes=HEX [--rax=V --rcx=V --rdx=V ... --rip=V]   one trap, end to end
  import [--from=auto|kvm-dmesg|xen-console|ftrace] --out=FILE LOG...
  replay [--policy=FILE] [--host-profile=PROFILE] [--jobs=N] [--server=ADDR] [--progress] TRAPLOG...
                                               --jobs: threads a .traps file is split over
                                               by vCPU (default 1; 0 one per CPU)
  replay --changes (--policy=CANDIDATE | --server=ADDR) CAPTURE...
                                               what the candidate would answer differently
                                               (exit 0 nothing, 2 something, 1 an error)
  suggest [--domain=N] LOG|CAPTURE...          draft a domain policy from host logs, or
                                               from what learning domains had relaxed
  suggest --server=ADDR [--domain=N]           the same from pvemud's learned accesses
  msr search TEXT                              MSRs by name fragment (any alias) or
                                               index, with the default policy's decisions
  kvm-filter --domain=N [--policy=FILE|NAME | --server=ADDR]
             [--host-profile=PROFILE | --host-vendor=V]
                                               the KVM MSR filter the domain's policy
                                               compiles to: the MSRs that exit to pvemu
  xen-config --domain=N [--policy=FILE|NAME | --server=ADDR]
             [--host-profile=PROFILE | --host-vendor=V]
                                               the xl.cfg lines for what Xen itself can
                                               enforce of the domain's policy, then the
                                               rules it cannot (xl.cfg comments)

Online commands (talk to pvemud, --server=ADDR, default $PVEMU_SERVER or
unix:///run/pvemu/pvemu.sock):
  policy get [--domain=N|default]
  policy apply -f FILE [--domain=N|default] [--if-generation=G]
               [--dry-run --against=CAPTURE[,CAPTURE...]]   (dry run: the replay --changes
                                               report for the composed policy; applies nothing)
  policy set-mode --domain=N|default learn|enforce
  policy set-rule --domain=N|default --msr=MSR|--range=FIRST-LAST [--read=ACTION]
                  [--write=ACTION] [--value=V] [--writable-mask=M] [--host-vendor=V]
                  [--if-generation=G]
  policy delete-rule --domain=N|default --msr=MSR|--range=FIRST-LAST [--host-vendor=V]
  policy diff -f FILE [--domain=N|default]
  domains | stats [--msrs|--learned [--domain=N]] | watch [--count=N]
  top [--domain=N] [--interval=SECONDS] [--once]   live MSR accesses per second (q quits)

Fleet commands (through any pvemud started with --fleet; LAYER is default,
class:NAME, host:ID or host:ID/domain:N):
  fleet status                                 hosts, applied revisions, errors, stale
                                               hosts, hosts whose lease expired
  fleet get --layer=LAYER
  fleet apply -f FILE --layer=LAYER [--if-revision=R]
  fleet set-rule --layer=LAYER [--domain=N] <the rule flags of policy set-rule> [--if-revision=R]
  fleet delete-rule --layer=LAYER [--domain=N] --msr=MSR|--range=FIRST-LAST [--host-vendor=V]
                    [--if-revision=R]

Exit status: 0 success, 1 invalid input or failed check, 2 usage error,
3 server unreachable. Numbers are decimal or 0x hex; MSRs also by name.
)";

struct CommandEntry {
  const char* name;
  int (*run)(const Args&);
};

constexpr CommandEntry kCommands[] = {
    {"decode", RunDecode},   {"validate", RunValidate}, {"explain", RunExplain},
    {"emulate", RunEmulate}, {"import", RunImport},     {"replay", RunReplay},
    {"suggest", RunSuggest}, {"msr", RunMsr},           {"policy", RunPolicy},
    {"domains", RunDomains}, {"stats", RunStats},       {"watch", RunWatch},
    {"top", RunTop},         {"kvm-filter", RunKvmFilter}, {"fleet", RunFleet},
    {"xen-config", RunXenConfig},
};

// Sets one flag; returns a usage message on failure, "" on success.
std::string SetFlag(std::string name, absl::string_view value, bool has_value) {
  name = absl::StrReplaceAll(name, {{"-", "_"}});
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  bool negated = false;
  if (flag == nullptr && absl::StartsWith(name, "no")) {
    flag = absl::FindCommandLineFlag(name.substr(2));
    negated = flag != nullptr && flag->IsOfType<bool>();
    if (!negated) flag = nullptr;
  }
  if (flag == nullptr) return absl::StrCat("unknown flag --", name);
  if (flag->IsOfType<bool>() && !has_value) value = negated ? "false" : "true";
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return absl::StrCat("--", name, "=", value, ": ", error);
  }
  return "";
}

int Main(int argc, char** argv) {
  Args positional;
  bool only_positional = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (only_positional || arg == "-" || arg.empty() || arg[0] != '-') {
      positional.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    absl::string_view body = arg;
    if (!absl::ConsumePrefix(&body, "--")) absl::ConsumePrefix(&body, "-");
    if (body == "help" || body == "h") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    size_t eq = body.find('=');
    std::string name(body.substr(0, eq));
    std::string error;
    if (eq != absl::string_view::npos) {
      error = SetFlag(name, body.substr(eq + 1), true);
    } else {
      absl::CommandLineFlag* flag =
          absl::FindCommandLineFlag(absl::StrReplaceAll(name, {{"-", "_"}}));
      bool takes_value = flag != nullptr && !flag->IsOfType<bool>();
      if (takes_value) {
        if (i + 1 >= argc) return UsageError(absl::StrCat("--", name, " needs a value"));
        error = SetFlag(name, argv[++i], true);
      } else {
        error = SetFlag(name, "", false);
      }
    }
    if (!error.empty()) return UsageError(error);
  }
  std::string output = absl::GetFlag(FLAGS_o);
  if (output != "text" && output != "json") {
    return UsageError(absl::StrCat("-o ", output, ": use -o text or -o json"));
  }
  // --host is the old spelling of --host-profile (CLI.md): still taken.
  if (std::string host = absl::GetFlag(FLAGS_host); !host.empty()) {
    std::fprintf(stderr, "pvemuctl: --host is deprecated; use --host-profile=%s\n", host.c_str());
    std::string profile = absl::GetFlag(FLAGS_host_profile);
    if (!profile.empty() && profile != host) {
      return UsageError(absl::StrCat("--host=", host, " and --host-profile=", profile,
                                     " name different profiles; give only --host-profile"));
    }
    absl::SetFlag(&FLAGS_host_profile, host);
  }
  if (positional.empty()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  std::string command = positional.front();
  positional.erase(positional.begin());
  for (const CommandEntry& entry : kCommands) {
    if (command == entry.name) {
      int status = entry.run(positional);
      std::fflush(stdout);
      return status;
    }
  }
  return UsageError(absl::StrCat("unknown command '", command, "'"));
}

}  // namespace
}  // namespace pvemu::client

int main(int argc, char** argv) { return pvemu::client::Main(argc, argv); }
