// EventLoop: the thread a Xen trap source (XenMonitor's vm_event ring,
// XenPortServer's ioreq page) runs on: wait on the source's event channel,
// answer everything pending, until stopped or the channel breaks.
#ifndef PVEMU_SERVER_XEN_EVENT_LOOP_H_
#define PVEMU_SERVER_XEN_EVENT_LOOP_H_

#include <atomic>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace pvemu::server {

// Thread-safety: Start/Stop from one controlling thread; status() from any.
class EventLoop {
 public:
  ~EventLoop() { Stop(); }

  // Runs `wait(timeout_ms)` then `poll()` on a thread of its own until Stop,
  // or until `wait` fails: its status is kept and logged to stderr as
  // "pvemud: WHAT stopped: ERROR" (the domain went away, ...), for the
  // operator. No-op while running.
  void Start(std::string what, absl::AnyInvocable<absl::Status(int)> wait,
             absl::AnyInvocable<void()> poll);
  // Joins the thread. Idempotent. The owner answers what is still pending
  // afterwards, so no vCPU stays paused.
  void Stop();
  // The error the loop ended on, or OK.
  absl::Status status() const;

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_XEN_EVENT_LOOP_H_
