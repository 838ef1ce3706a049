// What the metrics tests share: a free loopback port, a tiny HTTP/1.0 GET
// over a socket, and sums of samples in the
// Prometheus text format.
#ifndef PVEMU_TESTS_SERVER_METRICS_HELPERS_H_
#define PVEMU_TESTS_SERVER_METRICS_HELPERS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace pvemu::testing {

// A port nobody listens on now on 127.0.0.1 (the kernel's pick).
inline uint16_t FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

struct HttpResponse {
  int status = 0;  // 0: no answer
  std::string body;
};

// GET `target` (path and query) from 127.0.0.1:`port`, HTTP/1.0.
inline HttpResponse HttpGet(uint16_t port, const std::string& target) {
  HttpResponse out;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return out;
  }
  const std::string request = absl::StrCat("GET ", target, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  (void)write(fd, request.data(), request.size());
  std::string raw;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return out;
  const std::string status_line = raw.substr(0, raw.find("\r\n"));  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> words = absl::StrSplit(status_line, ' ');
  if (words.size() >= 2) (void)absl::SimpleAtoi(words[1], &out.status);
  out.body = raw.substr(end + 4);
  return out;
}

// The sum of the samples of `name` (exactly: "name{" or "name ") whose
// label set contains every one of `labels` ("domain=\"7\"", ...).
inline double SumSamples(absl::string_view text, absl::string_view name,
                         std::initializer_list<absl::string_view> labels = {}) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name)) continue;
    const absl::string_view rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;
    bool match = true;
    for (absl::string_view l : labels) match = match && absl::StrContains(rest, l);
    double v = 0;
    if (match && absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
  }
  return sum;
}

// How many samples of `name` there are.
inline int CountSamples(absl::string_view text, absl::string_view name) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, absl::StrCat(name, "{")) ||
        absl::StartsWith(line, absl::StrCat(name, " "))) {
      ++n;
    }
  }
  return n;
}

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_SERVER_METRICS_HELPERS_H_
