// The HTTP endpoint of pvemud --metrics=HOST:PORT: `GET /metrics` (and HEAD)
// answers the Prometheus text format (server/metrics.h), another method 405,
// any other path 404. libmicrohttpd serves it on one thread of its own,
// within the limits of MetricsHttpLimits.
#ifndef PVEMU_SERVER_METRICS_HTTP_H_
#define PVEMU_SERVER_METRICS_HTTP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct MHD_Daemon;

namespace pvemu::server {

struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;
};

// "HOST:PORT" or "[IPV6]:PORT"; port 0 asks the kernel for a free one.
// Errors name --metrics and the value.
absl::StatusOr<HostPort> ParseMetricsAddress(absl::string_view address);

// libmicrohttpd's limits on the endpoint, set on purpose: server/metrics_http.cc
// says why each value (and docs/DESIGN.md, "The metrics endpoint's limits").
struct MetricsHttpLimits {
  // Connections at once, at most; fewer when the descriptors are short
  // (MetricsConnectionLimit). Above 1,000 idle peers, with room for scrapes.
  static constexpr unsigned int kMaxConnections = 2048;
  // The memory pool of one connection: its request line and headers, parsed,
  // and the response's headers must fit (not the body, which is apart).
  static constexpr size_t kConnectionMemoryBytes = 16 * 1024;
  // A connection on which nothing is received or sent this long is closed.
  static constexpr unsigned int kIdleTimeoutSeconds = 10;
};

// The connection limit for a process that may open `nofile_soft`
// descriptors (RLIMIT_NOFILE's soft limit; RLIM_INFINITY: no limit): half
// of them, so that idle HTTP peers can never take the descriptors gRPC
// clients, MSR devices and files need, and at most kMaxConnections.
unsigned int MetricsConnectionLimit(uint64_t nofile_soft);

class MetricsHttpServer {
 public:
  // Binds exactly `address`'s host and serves until destroyed. `render` runs
  // on the server's thread once per scrape. Errors (a name that does not
  // resolve, the port in use) name --metrics and the address.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      absl::string_view address, std::function<std::string()> render);
  ~MetricsHttpServer();  // stops serving; waits for a scrape in progress

  // HOST:PORT as bound (the kernel's port when asked for port 0).
  const std::string& address() const { return address_; }
  // The connection limit in force (MetricsConnectionLimit at Start).
  unsigned int connection_limit() const { return connection_limit_; }

 private:
  MetricsHttpServer(std::function<std::string()> render) : render_(std::move(render)) {}
  friend struct MetricsHttpHandler;

  std::function<std::string()> render_;
  std::string address_;
  unsigned int connection_limit_ = 0;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_METRICS_HTTP_H_
