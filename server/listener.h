// Serving gRPC on a Unix socket with peer credentials.
//
// gRPC's own unix: listener does not expose the peer's uid/gid, so pvemud
// accepts connections itself, reads SO_PEERCRED, records it in a PeerTable
// under the connection's fd and hands the fd to the gRPC server. The RPC
// handlers see the peer as "fd:N" and look the credentials up (server/auth.h).
#ifndef PVEMU_SERVER_LISTENER_H_
#define PVEMU_SERVER_LISTENER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/auth.h"

namespace grpc {
class Server;
}

namespace pvemu::server {

class UnixListener {
 public:
  // Creates the socket's directory if missing (mode 0755), removes a stale
  // socket left by a dead daemon (refusing if a live one answers), binds,
  // sets the socket's mode to `mode` and listens.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(
      const std::string& path, unsigned mode);
  // Serves on `fd`, a socket someone else bound and listens on (systemd's
  // socket activation, server/systemd.h), after checking that it is a
  // listening AF_UNIX SOCK_STREAM socket; FailedPrecondition saying what it
  // is otherwise. Takes `fd` over; Stop() leaves the socket file in place
  // (it belongs to pvemud.socket).
  static absl::StatusOr<std::unique_ptr<UnixListener>> Adopt(int fd);
  ~UnixListener();

  // Starts accepting in a thread; every connection goes to `server`.
  void Start(grpc::Server* server, PeerTable* peers);
  // Stops accepting and removes the socket file it bound. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }

 private:
  UnixListener(std::string path, int fd, int wake_read, int wake_write, bool owns_path);
  // Takes `fd` (closed on failure) and makes the wake pipe.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Make(std::string path, int fd,
                                                            bool owns_path);
  void AcceptLoop(grpc::Server* server, PeerTable* peers);

  std::string path_;
  int fd_;
  bool owns_path_;  // bound here: Stop() unlinks it
  int wake_read_;   // a pipe, so Stop() can interrupt poll()
  int wake_write_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

// Parses --listen: "unix:///path" or "unix:/path" → the path; anything else
// is a TCP address (host:port) → empty path.
std::string UnixSocketPath(absl::string_view listen);

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_LISTENER_H_
