// The HTTP endpoint of pvemud --metrics=HOST:PORT: `GET /metrics` answers
// the Prometheus text format (server/metrics.h), any other path 404.
// libmicrohttpd serves it on one thread of its own.
#ifndef PVEMU_SERVER_METRICS_HTTP_H_
#define PVEMU_SERVER_METRICS_HTTP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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

 private:
  MetricsHttpServer(std::function<std::string()> render) : render_(std::move(render)) {}
  friend struct MetricsHttpHandler;

  std::function<std::string()> render_;
  std::string address_;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_METRICS_HTTP_H_
