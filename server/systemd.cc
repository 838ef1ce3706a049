#include "server/systemd.h"

#include <systemd/sd-daemon.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace pvemu::server {

absl::StatusOr<int> SystemdListenFd() {
  int n = sd_listen_fds(/*unset_environment=*/1);
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LISTEN_FDS/LISTEN_PID from systemd are unusable: ", std::strerror(-n)));
  }
  if (n == 0) return -1;
  if (n > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "systemd passed ", n, " sockets (LISTEN_FDS); pvemud serves one: give "
        "pvemud.socket a single ListenStream="));
  }
  return SD_LISTEN_FDS_START;
}

void NotifyReady(absl::string_view status) {
  sd_notify(0, absl::StrCat("READY=1\nSTATUS=", status).c_str());
}

void NotifyStopping() { sd_notify(0, "STOPPING=1\nSTATUS=stopping"); }

}  // namespace pvemu::server
