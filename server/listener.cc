#include "server/listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/server.h"
#include "grpcpp/server_posix.h"

namespace pvemu::server {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  int err = errno;
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat(msg, " (run as root, or choose --listen in a writable directory)"));
  }
  if (err == EADDRINUSE) {
    return absl::AlreadyExistsError(
        absl::StrCat(msg, " (another pvemud is serving there; stop it or choose another --listen)"));
  }
  return absl::UnavailableError(msg);
}

// True if something accepts connections on the socket at `path`.
bool SomeoneListens(const sockaddr_un& addr) {
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return false;
  bool live = connect(probe, reinterpret_cast<const sockaddr*>(&addr),
                      sizeof(addr)) == 0;
  close(probe);
  return live;
}

}  // namespace

std::string UnixSocketPath(absl::string_view listen) {
  if (absl::ConsumePrefix(&listen, "unix://")) return std::string(listen);
  if (absl::ConsumePrefix(&listen, "unix:")) return std::string(listen);
  return "";
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(
    const std::string& path, unsigned mode) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen: the socket path '", path, "' must be 1..",
        sizeof(addr.sun_path) - 1, " bytes long"));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);

  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat(
          "cannot create the socket directory ", dir.string(), ": ", ec.message()));
    }
  }

  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(absl::StrCat(
          path, " exists and is not a socket; remove it or choose another --listen"));
    }
    if (SomeoneListens(addr)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "another daemon is serving on ", path,
          "; stop it or choose another --listen"));
    }
    unlink(path.c_str());  // stale, from a daemon that died
  }

  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket for", path);
  // Bind under a restrictive umask so the socket is never briefly open to all.
  mode_t old_umask = umask(0177);
  int rc = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  umask(old_umask);
  if (rc != 0) {
    absl::Status status = Errno("bind", path);
    close(fd);
    return status;
  }
  if (chmod(path.c_str(), mode) != 0 || listen(fd, 128) != 0) {
    absl::Status status = Errno("listen on", path);
    close(fd);
    unlink(path.c_str());
    return status;
  }
  absl::StatusOr<std::unique_ptr<UnixListener>> listener = Make(path, fd, true);
  if (!listener.ok()) unlink(path.c_str());
  return listener;
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Adopt(int fd) {
  const std::string what = absl::StrCat("the socket passed as fd ", fd, " (LISTEN_FDS)");
  auto refuse = [&](absl::string_view why) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", why, "; pvemud.socket must pass one listening Unix stream socket "
        "(ListenStream=/path, Accept=no)"));
  };
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(what, " is not open: ", std::strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) return refuse("is not a socket");
  int family = 0, type = 0, listening = 0;
  socklen_t len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) != 0 || family != AF_UNIX) {
    return refuse(absl::StrCat("is not a Unix socket (family ", family, ")"));
  }
  len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
    return refuse(absl::StrCat("is not a stream socket (type ", type, ")"));
  }
  len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0) {
    return refuse("is not listening (a connection, as Accept=yes passes?)");
  }
  sockaddr_un addr{};
  socklen_t addr_len = sizeof(addr);
  std::string path = absl::StrCat("fd ", fd);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) == 0 &&
      addr_len > offsetof(sockaddr_un, sun_path) && addr.sun_path[0] != 0) {
    path.assign(addr.sun_path, strnlen(addr.sun_path, sizeof(addr.sun_path)));
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return Make(std::move(path), fd, false);
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Make(std::string path, int fd,
                                                                 bool owns_path) {
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    absl::Status status = Errno("pipe for", path);
    close(fd);
    return status;
  }
  return std::unique_ptr<UnixListener>(
      new UnixListener(std::move(path), fd, wake[0], wake[1], owns_path));
}

UnixListener::UnixListener(std::string path, int fd, int wake_read, int wake_write,
                           bool owns_path)
    : path_(std::move(path)),
      fd_(fd),
      owns_path_(owns_path),
      wake_read_(wake_read),
      wake_write_(wake_write) {}

UnixListener::~UnixListener() {
  Stop();
  close(fd_);
  close(wake_read_);
  close(wake_write_);
}

void UnixListener::Start(grpc::Server* server, PeerTable* peers) {
  thread_ = std::thread([this, server, peers] { AcceptLoop(server, peers); });
}

void UnixListener::Stop() {
  if (stopped_.exchange(true)) return;
  char byte = 0;
  (void)!write(wake_write_, &byte, 1);
  if (thread_.joinable()) thread_.join();
  if (owns_path_) unlink(path_.c_str());
}

void UnixListener::AcceptLoop(grpc::Server* server, PeerTable* peers) {
  while (!stopped_.load()) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "pvemud: poll on %s: %s\n", path_.c_str(), std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        std::fprintf(stderr, "pvemud: accept on %s: %s\n", path_.c_str(), std::strerror(errno));
        // EMFILE and friends: back off rather than spin.
        poll(nullptr, 0, 100);
      }
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(conn);
      continue;
    }
    // Record before handing over: gRPC may dispatch a call at once.
    peers->Set(conn, PeerCred{cred.pid, cred.uid, cred.gid});
    grpc::AddInsecureChannelFromFd(server, conn);
  }
}

}  // namespace pvemu::server
