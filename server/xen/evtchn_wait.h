// Waiting on a libxenevtchn handle, for the two trap sources' libxc halves
// (xen_vm_event_libxc.cc, xen_ioreq_libxc.cc). Include only after
// <xenevtchn.h>, in files compiled with Xen's headers.
#ifndef PVEMU_SERVER_XEN_EVTCHN_WAIT_H_
#define PVEMU_SERVER_XEN_EVTCHN_WAIT_H_

#include <poll.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pvemu::server {

// Blocks until a port bound on `xce` fires or `timeout_ms` passes; then
// takes and unmasks every pending port, so the next notification wakes the
// next wait. The caller then scans its ring or ioreq slots. OK on timeout
// and on a signal; Unavailable naming `what` when the handle broke.
inline absl::Status WaitOnEventChannel(xenevtchn_handle* xce, int timeout_ms, const char* what) {
  pollfd p = {};
  p.fd = xenevtchn_fd(xce);
  p.events = POLLIN | POLLERR;
  int n = poll(&p, 1, timeout_ms);
  auto broke = [what](const char* call) {
    const int err = errno != 0 ? errno : EIO;
    return absl::UnavailableError(
        absl::StrCat(call, " on ", what, ": ", std::strerror(err)));
  };
  if (n < 0) return errno == EINTR ? absl::OkStatus() : broke("poll");
  while (n > 0) {
    errno = 0;
    const xenevtchn_port_or_error_t port = xenevtchn_pending(xce);
    if (port < 0) return broke("xenevtchn_pending");
    if (xenevtchn_unmask(xce, port) < 0) return broke("xenevtchn_unmask");
    pollfd again = p;
    n = poll(&again, 1, 0);
  }
  return absl::OkStatus();
}

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_XEN_EVTCHN_WAIT_H_
