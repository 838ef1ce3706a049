#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pvemu::server {
namespace {

absl::Status BadAddress(absl::string_view address, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--metrics=", address, ": ", why,
                   "; give HOST:PORT, e.g. --metrics=127.0.0.1:9464 or --metrics=[::1]:9464"));
}

// Sends `body` with `status`; MHD copies it.
MHD_Result Respond(MHD_Connection* connection, unsigned int status, const std::string& body,
                   const char* content_type, const char* allow = nullptr) {
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                      MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow != nullptr) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

}  // namespace

struct MetricsHttpHandler {
  static MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char* /*version*/,
                           const char* /*upload_data*/, size_t* upload_data_size,
                           void** /*con_cls*/) {
    auto* server = static_cast<MetricsHttpServer*>(cls);
    constexpr const char* kText = "text/plain; charset=utf-8";
    *upload_data_size = 0;  // a body is not read
    if (std::strcmp(url, "/metrics") != 0) {
      return Respond(connection, MHD_HTTP_NOT_FOUND, "404 not found: pvemud serves /metrics\n",
                     kText);
    }
    if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0) {
      return Respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "405: use GET /metrics\n", kText,
                     "GET, HEAD");
    }
    return Respond(connection, MHD_HTTP_OK, server->render_(),
                   "text/plain; version=0.0.4; charset=utf-8");
  }
};

absl::StatusOr<HostPort> ParseMetricsAddress(absl::string_view address) {
  HostPort out;
  absl::string_view port;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return BadAddress(address, "no closing ']'");
    out.host = std::string(address.substr(1, close - 1));
    absl::string_view rest = address.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return BadAddress(address, "no port");
    port = rest.substr(1);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return BadAddress(address, "no port");
    out.host = std::string(address.substr(0, colon));
    if (out.host.find(':') != std::string::npos) {
      return BadAddress(address, "an IPv6 address goes in brackets");
    }
    port = address.substr(colon + 1);
  }
  if (out.host.empty()) {
    return BadAddress(address, "no host (pvemud binds exactly the host given; 0.0.0.0 for all)");
  }
  uint32_t number = 0;
  if (port.empty()) return BadAddress(address, "no port");
  if (!absl::SimpleAtoi(port, &number) || number > 65535) {
    return BadAddress(address, absl::StrCat("port '", port, "' is not 0..65535"));
  }
  out.port = static_cast<uint16_t>(number);
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    absl::string_view address, std::function<std::string()> render) {
  auto parsed = ParseMetricsAddress(address);
  if (!parsed.ok()) return parsed.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(parsed->port);
  if (int rc = getaddrinfo(parsed->host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics=", address, ": host '",
                                                   parsed->host, "': ", gai_strerror(rc)));
  }
  // The first address the name resolves to, exactly: no wildcard fallback.
  const int family = found->ai_family;
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 64) != 0) error = errno;
  }
  freeaddrinfo(found);
  if (error != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat(
        "--metrics=", address, ": cannot listen: ", std::strerror(error),
        error == EADDRINUSE ? " (another process has the port; pick another)"
        : error == EADDRNOTAVAIL ? " (not an address of this host)"
                                  : ""));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  char host[INET6_ADDRSTRLEN] = "";
  uint16_t bound_port = 0;
  if (bound.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&bound);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    bound_port = ntohs(a->sin6_port);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&bound);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    bound_port = ntohs(a->sin_port);
  }

  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(std::move(render)));
  server->address_ = bound.ss_family == AF_INET6 ? absl::StrCat("[", host, "]:", bound_port)
                                                 : absl::StrCat(host, ":", bound_port);
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD;
  if (family == AF_INET6) flags |= MHD_USE_IPv6;
  // MHD owns the socket from here (MHD_stop_daemon closes it).
  server->daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &MetricsHttpHandler::Handle,
                                     server.get(), MHD_OPTION_LISTEN_SOCKET, fd,
                                     MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("--metrics=", address, ": libmicrohttpd could not start"));
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace pvemu::server
