#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
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

unsigned int MetricsConnectionLimit(uint64_t nofile_soft) {
  if (nofile_soft == static_cast<uint64_t>(RLIM_INFINITY)) {
    return MetricsHttpLimits::kMaxConnections;
  }
  return static_cast<unsigned int>(std::clamp<uint64_t>(
      nofile_soft / 2, 1, MetricsHttpLimits::kMaxConnections));
}

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
    // The listen queue: SOMAXCONN (the kernel caps it at net.core.somaxconn),
    // not a few dozen, so that a burst of connections (1,000 idle peers
    // opening at once) is queued, not dropped to SYN retries of 1 s, 3 s ...
    // that a scraper arriving in the burst would wait out too.
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      error = errno;
    }
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
  rlimit nofile{};
  server->connection_limit_ = MetricsConnectionLimit(
      getrlimit(RLIMIT_NOFILE, &nofile) == 0 ? static_cast<uint64_t>(nofile.rlim_cur) : 1024);

  // One thread of MHD's own; epoll(7), else poll(2), never select(2): select
  // cannot watch a descriptor numbered FD_SETSIZE (1024) or above, and MHD
  // in select mode closes every connection it accepts on one. pvemud's gRPC
  // clients, MSR devices and files number many of its descriptors, and
  // 1,000 idle peers alone pass 1024: in select mode the scraper would be
  // shut out by descriptor numbers alone, whatever the connection limit.
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD;
  flags |= MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL : MHD_USE_POLL;
  if (family == AF_INET6) flags |= MHD_USE_IPv6;
  using Limits = MetricsHttpLimits;
  // An array, not MHD's varargs: each value's type is then MHD's to convert
  // (a size_t option given an int through varargs is undefined behaviour).
  MHD_OptionItem options[] = {
      // MHD owns the socket from here (MHD_stop_daemon closes it).
      {MHD_OPTION_LISTEN_SOCKET, fd, nullptr},
      // Connections at once: above the 1,000 idle peers the endpoint is made
      // to hold with room for scrapes (a scraper is shut out only when the
      // limit is full: the kernel then keeps new connections in the listen
      // queue until a connection ends, at the latest at the idle timeout),
      // and never more than half of the process's descriptors, so that a
      // flood of HTTP peers cannot take the descriptors pvemud's gRPC
      // clients, MSR devices and files need (see MetricsConnectionLimit).
      {MHD_OPTION_CONNECTION_LIMIT, static_cast<intptr_t>(server->connection_limit_), nullptr},
      // No limit per address (0), on purpose: --metrics is mostly bound to
      // loopback, where every peer, the scraper too, is 127.0.0.1 or ::1; a
      // per-address limit below the total would then shut the scraper out
      // as soon as local idle peers reached it, which the total alone does
      // not. The total and the idle timeout bound what any peer can hold.
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, 0, nullptr},
      // Memory per connection: the request line and headers as read and
      // parsed, and the response's header lines, must fit; the body is
      // apart (copied into the response). A Prometheus scrape's request is
      // under 1 KiB, a bearer token a few KiB more: 16 KiB (half MHD's
      // default of 32 KiB) fits them with room, and bounds what held
      // connections cost: kMaxConnections x 16 KiB = 32 MiB at most, plus
      // MHD's record of each (about 0.5 KiB). A longer request line gets
      // 414, longer headers 431 (or a close).
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(Limits::kConnectionMemoryBytes),
       nullptr},
      // Idle timeout: Prometheus' default scrape_timeout is 10 s, so a
      // scraper gives up on a connection idle that long anyway; a scraper
      // sends its request at once, so a shorter one would buy nothing
      // against idle peers (the connection limit is what keeps room for
      // scrapes) but risk cutting slow links. MHD counts in whole seconds.
      {MHD_OPTION_CONNECTION_TIMEOUT, static_cast<intptr_t>(Limits::kIdleTimeoutSeconds), nullptr},
      // Strict parsing: an HTTP/1.1 request without Host gets 400 (RFC 9112
      // 3.2 requires it) and a URL with a space is refused; every scraper
      // sends Host, and a request two parsers could read two ways (a proxy
      // in front, MHD behind) is better refused than guessed at.
      {MHD_OPTION_STRICT_FOR_CLIENT, 1, nullptr},
      {MHD_OPTION_END, 0, nullptr},
  };
  struct stat listening {};
  fstat(fd, &listening);
  server->daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &MetricsHttpHandler::Handle,
                                     server.get(), MHD_OPTION_ARRAY, options, MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    // MHD 0.9.75 closes the socket when it fails late (its thread would not
    // start) and not when it refuses early: close `fd` only if it is still
    // this socket, never a descriptor another thread has opened since under
    // the same number.
    struct stat now {};
    if (fstat(fd, &now) == 0 && now.st_dev == listening.st_dev &&
        now.st_ino == listening.st_ino) {
      close(fd);
    }
    return absl::UnavailableError(
        absl::StrCat("--metrics=", address, ": libmicrohttpd could not start"));
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

}  // namespace pvemu::server
