#include "server/xen/event_loop.h"

#include <cstdio>
#include <string>
#include <utility>

namespace pvemu::server {

void EventLoop::Start(std::string what, absl::AnyInvocable<absl::Status(int)> wait,
                      absl::AnyInvocable<void()> poll) {
  if (thread_.joinable()) return;
  stop_.store(false, std::memory_order_relaxed);
  thread_ = std::thread([this, what = std::move(what), wait = std::move(wait),
                         poll = std::move(poll)]() mutable {
    while (!stop_.load(std::memory_order_acquire)) {
      // A bounded wait, so Stop is seen within 100 ms.
      absl::Status s = wait(100);
      if (!s.ok()) {
        std::fprintf(stderr, "pvemud: %s stopped: %s\n", what.c_str(),
                     std::string(s.message()).c_str());
        absl::MutexLock lock(&mu_);
        status_ = std::move(s);
        return;
      }
      poll();
    }
  });
}

void EventLoop::Stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

absl::Status EventLoop::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace pvemu::server
