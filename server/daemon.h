// The pvemud daemon as a library: everything main() does between parsing
// flags and waiting for a signal, so tests run the real server in process.
#ifndef PVEMU_SERVER_DAEMON_H_
#define PVEMU_SERVER_DAEMON_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/xen/xen_ioreq.h"

namespace pvemu::server {

struct DaemonOptions {
  std::string host = "sim";          // sim | xen | linux
  std::string host_profile;          // sim: a shipped profile name or a file (OpenSimHost)
  std::string listen = "unix:///run/pvemu/pvemu.sock";
  // A listening Unix socket to serve on instead of binding `listen` (systemd
  // socket activation: server/systemd.h); -1 = bind `listen`.
  int listen_fd = -1;
  std::string state_dir = "/var/lib/pvemu";
  std::string policy;                // initial policy file; "" = shipped default
  std::string readers;               // allow lists (server/auth.h syntax)
  std::string editors;
  bool allow_host_writes = false;    // PASSTHROUGH writes may reach the host
  std::string tls_cert, tls_key, tls_client_ca;  // TCP listening
  unsigned socket_mode = 0660;
  int max_message_bytes = 4 << 20;   // requests larger than this are refused
  // Long-lived streams (Watch, EmulateStream, SubscribePolicy, ReportTraps)
  // one peer may hold open at once (server/peer_limits.h).
  int max_streams_per_peer = 256;
  std::string capture;               // record every trap to this trap log ("" = off)
  // Serve GET /metrics (Prometheus text format) on HOST:PORT ("" = off).
  std::string metrics;
  // Count traps by (domain, instruction, outcome) and MSR accesses by
  // (domain, MSR, access, action) for `pvemuctl stats --msrs`; on also
  // whenever `metrics` is set. Off, a trap pays nothing for it.
  bool count_msrs = false;
  // xen only: watch these HVM domains on Xen's vm_event ring and answer
  // from the policy their CPUID and their writes of `monitor_msrs`
  // (server/xen/xen_monitor.h), and, through an ioreq server, their
  // port I/O to `monitor_ports` (server/xen/xen_port_server.h).
  std::vector<uint32_t> monitor_domains;
  std::vector<uint32_t> monitor_msrs;
  std::vector<PortSpan> monitor_ports;
  // Fleet mode (fleet/fleet.h): take the policy's layers from etcd,
  // etcd://HOST:PORT[,HOST:PORT...][/PREFIX]. "" (the default): none, and
  // pvemud works exactly as without fleet mode.
  std::string fleet;
  std::string host_id;                    // "" = the hostname
  std::vector<std::string> host_classes;
  std::string fleet_ca, fleet_cert, fleet_key;  // etcd client TLS (a CA turns it on)
};

class Daemon {
 public:
  // Opens the host and the policy store, starts serving. Errors say what is
  // wrong and what to do (no Xen, a bad profile, a socket in use, TCP without
  // TLS, ...). `warnings` gets things the operator should see but that do not
  // stop the daemon (a damaged state file replaced by the last good policy).
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonOptions& options,
                                                       std::vector<std::string>* warnings);
  virtual ~Daemon() = default;

  // One line for the log: where it listens, the host, the policy generation.
  virtual std::string ReadyMessage() const = 0;
  // Stops accepting, ends streams, waits for in-flight calls (bounded).
  virtual void Shutdown() = 0;
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_DAEMON_H_
