// pvemud: the pvemu daemon. See CLI.md, "Daemon", and server/daemon.h.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/marshalling.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "x86/msr_catalog.h"
#include "server/daemon.h"
#include "server/systemd.h"

ABSL_FLAG(std::string, host, "sim", "host backend: sim | xen | linux");
ABSL_FLAG(std::string, host_profile, "",
          "sim host profile: a shipped name (intel-xeon-e-2136, the default; "
          "amd-epyc-7443p) or a profile textproto file's path");
ABSL_FLAG(std::string, listen, "unix:///run/pvemu/pvemu.sock",
          "where to serve: unix:///path (mode 0660) or host:port (TLS with client "
          "certificates required)");
ABSL_FLAG(std::string, state_dir, "/var/lib/pvemu",
          "where accepted policy edits are kept across restarts ('' = memory only)");
ABSL_FLAG(std::string, policy, "",
          "policy textproto to start from when the state dir has none "
          "(default: the shipped default policy)");
ABSL_FLAG(std::string, readers, "",
          "who may read policy, stats and audit: uid:N, gid:N, USER, @GROUP, comma-separated");
ABSL_FLAG(std::string, editors, "",
          "who may edit policy and send traps (root always may); same syntax as --readers");
ABSL_FLAG(bool, allow_host_writes, false,
          "let PASSTHROUGH write rules with allow_host_write reach host MSRs");
ABSL_FLAG(std::string, tls_cert, "", "TCP: server certificate (PEM)");
ABSL_FLAG(std::string, tls_key, "", "TCP: server private key (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "", "TCP: CA that signs client certificates (PEM)");
ABSL_FLAG(std::string, capture, "",
          "record every trap and its outcome to this trap log (.traps or .textproto); off by default");
ABSL_FLAG(std::vector<std::string>, monitor_domain, {},
          "xen: HVM domains (comma-separated) whose CPUID, and writes of --monitor-msrs, "
          "pvemud answers on Xen's vm_event ring");
ABSL_FLAG(std::vector<std::string>, monitor_msrs, {},
          "xen: the MSRs (names or numbers, comma-separated) whose writes --monitor-domain decides");
ABSL_FLAG(std::vector<std::string>, monitor_ports, {},
          "xen: I/O ports PORT or FIRST-LAST (comma-separated) that pvemud claims on "
          "--monitor-domain domains through a Xen ioreq server and answers from io_port policy; "
          "taken from the domain's device model (QEMU)");
ABSL_FLAG(std::string, metrics, "",
          "serve GET /metrics (Prometheus text format) over HTTP on exactly HOST:PORT, "
          "e.g. 127.0.0.1:9464; off by default. Implies --count-msrs");
ABSL_FLAG(bool, count_msrs, false,
          "count traps by domain and instruction and MSR accesses by domain, MSR, access and "
          "action, for 'pvemuctl stats --msrs' (on with --metrics); off by default, so that "
          "the trap path pays nothing for it");
ABSL_FLAG(std::string, fleet, "",
          "fleet mode: take the policy's layers from etcd, "
          "etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (prefix default /pvemu); off by default");
ABSL_FLAG(std::string, host_id, "", "fleet mode: this host's id (default: the hostname)");
ABSL_FLAG(std::vector<std::string>, host_class, {},
          "fleet mode: this host's classes, comma-separated (PREFIX/policy/class/NAME)");
ABSL_FLAG(std::string, fleet_ca, "",
          "fleet mode: CA of etcd's server certificates (PEM); given, etcd is reached over TLS");
ABSL_FLAG(std::string, fleet_cert, "", "fleet mode: client certificate for etcd (PEM)");
ABSL_FLAG(std::string, fleet_key, "", "fleet mode: the client certificate's key (PEM)");
ABSL_FLAG(int, max_message_bytes, 4 << 20, "largest request accepted (bytes)");
ABSL_FLAG(int, max_streams_per_peer, 256,
          "long-lived streams (watch, emulate --stream, a KVM VM's subscription and report) one "
          "uid or TLS client may hold open at once");

namespace {

// CLI.md spells flags with '-' (--state-dir); Abseil names them with '_'.
// Rewrites the name part of each flag argument in place.
void NormaliseFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* p = argv[i];
    if (p[0] != '-') continue;
    if (p[1] == '-' && p[2] == 0) break;  // "--": the rest is positional
    p += (p[1] == '-') ? 2 : 1;
    for (; *p != 0 && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

// "0x510" or "0x510-0x51f" (numbers as C writes them: 0x hex, else decimal).
absl::StatusOr<pvemu::server::PortSpan> ParsePortSpan(absl::string_view text) {
  auto parse = [&](absl::string_view part, uint32_t* port) {
    part = absl::StripAsciiWhitespace(part);
    const bool hex = absl::ConsumePrefix(&part, "0x") || absl::ConsumePrefix(&part, "0X");
    return !part.empty() &&
           (hex ? absl::SimpleHexAtoi(part, port) : absl::SimpleAtoi(part, port)) &&
           *port <= 0xffff;
  };
  const size_t dash = text.find('-');
  uint32_t first = 0, last = 0;
  if (!parse(text.substr(0, dash), &first) ||
      !parse(dash == absl::string_view::npos ? text.substr(0, dash) : text.substr(dash + 1),
             &last) ||
      last < first) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a port or range: write PORT or FIRST-LAST, 0..0xffff, "
        "FIRST <= LAST (e.g. 0x510 or 0x510-0x51f)"));
  }
  return pvemu::server::PortSpan{static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

// Exit statuses (docs/CLI.md, "Daemon"): a wrong command line (a bad flag
// value), or a daemon that could not start.
constexpr int kExitUsage = 2;
constexpr int kExitStartFailed = 1;

// Every error pvemud reports before it runs: "pvemud: MESSAGE" on stderr,
// then the exit status `exit_code`.
int Fail(const absl::Status& status, int exit_code) {
  std::fprintf(stderr, "pvemud: %s\n", std::string(status.message()).c_str());
  return exit_code;
}

// Normalises the flag spellings, then parses the command line (Abseil exits
// on an unknown flag or --help).
void ParseFlags(int argc, char** argv) {
  NormaliseFlagNames(argc, argv);
  absl::SetProgramUsageMessage(
      "pvemu privileged-operation emulator daemon.\n"
      "Usage: pvemud [--host=sim|xen|linux] [--host-profile=NAME|FILE] [--listen=ADDR] "
      "[--state-dir=DIR] [--policy=FILE] [--readers=LIST] [--editors=LIST] "
      "[--metrics=HOST:PORT] [--count-msrs] "
      "[--fleet=etcd://HOST:PORT[,HOST:PORT...][/PREFIX] [--host-id=ID] [--host-class=NAME,...] "
      "[--fleet-ca=FILE --fleet-cert=FILE --fleet-key=FILE]]");
  absl::ParseCommandLine(argc, argv);
}

// Blocks SIGTERM and SIGINT, which main then takes synchronously with
// sigwait: every thread started later (gRPC's included) inherits the blocked
// mask, so a stop reaches main's sigwait and no other thread. SIGPIPE is
// ignored: a peer that goes away must not kill the daemon.
sigset_t BlockStopSignals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

// The flags that pass to the daemon as they are, and the check that the
// fleet-only ones come with --fleet.
absl::StatusOr<pvemu::server::DaemonOptions> OptionsFromFlags() {
  pvemu::server::DaemonOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.host_profile = absl::GetFlag(FLAGS_host_profile);
  options.listen = absl::GetFlag(FLAGS_listen);
  options.state_dir = absl::GetFlag(FLAGS_state_dir);
  options.policy = absl::GetFlag(FLAGS_policy);
  options.readers = absl::GetFlag(FLAGS_readers);
  options.editors = absl::GetFlag(FLAGS_editors);
  options.allow_host_writes = absl::GetFlag(FLAGS_allow_host_writes);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.max_streams_per_peer = absl::GetFlag(FLAGS_max_streams_per_peer);
  options.capture = absl::GetFlag(FLAGS_capture);
  options.metrics = absl::GetFlag(FLAGS_metrics);
  options.count_msrs = absl::GetFlag(FLAGS_count_msrs);
  options.fleet = absl::GetFlag(FLAGS_fleet);
  options.host_id = absl::GetFlag(FLAGS_host_id);
  options.host_classes = absl::GetFlag(FLAGS_host_class);
  options.fleet_ca = absl::GetFlag(FLAGS_fleet_ca);
  options.fleet_cert = absl::GetFlag(FLAGS_fleet_cert);
  options.fleet_key = absl::GetFlag(FLAGS_fleet_key);
  if (options.fleet.empty() &&
      (!options.host_id.empty() || !options.host_classes.empty() || !options.fleet_ca.empty() ||
       !options.fleet_cert.empty() || !options.fleet_key.empty())) {
    return absl::InvalidArgumentError(
        "--host-id, --host-class and --fleet-ca/--fleet-cert/--fleet-key "
        "belong to fleet mode: add --fleet=etcd://HOST:PORT");
  }
  return options;
}

// Parses each item of the list flag `flag` with `parse` and appends it to
// *out; the first bad item fails, its error prefixed with the flag's name.
template <typename T, typename Parse>
absl::Status ParseListFlag(absl::string_view flag, const std::vector<std::string>& items,
                           Parse parse, std::vector<T>* out) {
  for (const std::string& item : items) {
    absl::StatusOr<T> value = parse(item);
    if (!value.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", value.status().message()));
    }
    out->push_back(*value);
  }
  return absl::OkStatus();
}

// --monitor-domain, --monitor-msrs and --monitor-ports: what the Xen trap
// sources watch, checked here so that a typo is a usage error, not a failed
// start.
absl::Status ParseMonitorFlags(pvemu::server::DaemonOptions* options) {
  auto domain_id = [](const std::string& d) -> absl::StatusOr<uint32_t> {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(d, &id)) {
      return absl::InvalidArgumentError(absl::StrCat("'", d, "' is not a domain id"));
    }
    return id;
  };
  RETURN_IF_ERROR(ParseListFlag("--monitor-domain", absl::GetFlag(FLAGS_monitor_domain),
                                domain_id, &options->monitor_domains));
  RETURN_IF_ERROR(ParseListFlag("--monitor-msrs", absl::GetFlag(FLAGS_monitor_msrs),
                                &pvemu::x86::ParseMsr, &options->monitor_msrs));
  RETURN_IF_ERROR(ParseListFlag("--monitor-ports", absl::GetFlag(FLAGS_monitor_ports),
                                &ParsePortSpan, &options->monitor_ports));
  return absl::OkStatus();
}

// Starts the daemon (its warnings on stderr) and tells systemd it is ready
// (Type=notify): the socket answers and the policy is loaded.
absl::StatusOr<std::unique_ptr<pvemu::server::Daemon>> StartDaemon(
    const pvemu::server::DaemonOptions& options) {
  std::vector<std::string> warnings;
  auto daemon = pvemu::server::Daemon::Start(options, &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "pvemud: warning: %s\n", w.c_str());
  if (!daemon.ok()) return daemon.status();
  const std::string ready = (*daemon)->ReadyMessage();
  std::fprintf(stderr, "%s\n", ready.c_str());
  pvemu::server::NotifyReady(absl::StripPrefix(ready, "pvemud: "));
  return daemon;
}

// Waits for SIGTERM or SIGINT (blocked by BlockStopSignals), then stops the
// daemon, telling systemd first.
void RunUntilStopped(const sigset_t& stop_signals, pvemu::server::Daemon& daemon) {
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "pvemud: %s, stopping\n", strsignal(signal_number));
  pvemu::server::NotifyStopping();
  daemon.Shutdown();
  std::fprintf(stderr, "pvemud: stopped\n");
}

// Raises the soft limit on open descriptors to the hard one. systemd starts
// services at a soft 1024 (for programs that still use select(2), which
// pvemud does not: gRPC and the metrics endpoint use epoll), and the
// metrics endpoint holds connections up to half the soft limit
// (server/metrics_http.h): at 1024 that is 512, fewer than the 1,000 idle
// peers it is made to hold beside its scrapes.
void RaiseDescriptorLimit() {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur >= nofile.rlim_max) return;
  nofile.rlim_cur = nofile.rlim_max;
  (void)setrlimit(RLIMIT_NOFILE, &nofile);  // the old limit stands otherwise
}

}  // namespace

int main(int argc, char** argv) {
  ParseFlags(argc, argv);
  RaiseDescriptorLimit();
  const sigset_t stop_signals = BlockStopSignals();

  absl::StatusOr<pvemu::server::DaemonOptions> options = OptionsFromFlags();
  if (!options.ok()) return Fail(options.status(), kExitUsage);
  if (absl::Status s = ParseMonitorFlags(&*options); !s.ok()) return Fail(s, kExitUsage);

  // Socket activation (pvemud.socket): serve on the socket systemd passed.
  absl::StatusOr<int> listen_fd = pvemu::server::SystemdListenFd();
  if (!listen_fd.ok()) return Fail(listen_fd.status(), kExitStartFailed);
  options->listen_fd = *listen_fd;

  auto daemon = StartDaemon(*options);
  if (!daemon.ok()) return Fail(daemon.status(), kExitStartFailed);
  RunUntilStopped(stop_signals, **daemon);
  return 0;
}
