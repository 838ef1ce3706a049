// pvemud under systemd (dist/systemd/): readiness for Type=notify and socket
// activation by pvemud.socket, through libsystemd. Started any other way
// (no NOTIFY_SOCKET, no LISTEN_FDS) nothing here does anything.
#ifndef PVEMU_SERVER_SYSTEMD_H_
#define PVEMU_SERVER_SYSTEMD_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pvemu::server {

// The socket systemd passed to this process (sd_listen_fds: LISTEN_FDS with
// LISTEN_PID naming us; the variables are then unset), or -1 if none.
// InvalidArgument if it passed more than one: pvemud serves one socket.
// What the fd is gets checked by UnixListener::Adopt.
absl::StatusOr<int> SystemdListenFd();

// READY=1 with STATUS=`status` (one short line): pvemud answers on its socket.
void NotifyReady(absl::string_view status);
// STOPPING=1: a stop signal arrived, pvemud is shutting down.
void NotifyStopping();

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_SYSTEMD_H_
