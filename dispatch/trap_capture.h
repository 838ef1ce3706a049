// Capturing traps to a trap log (pvemud --capture=FILE): an observer of
// the dispatcher, like audit.
#ifndef PVEMU_DISPATCH_TRAP_CAPTURE_H_
#define PVEMU_DISPATCH_TRAP_CAPTURE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dispatch/observer.h"
#include "emulator/decoder.h"
#include "emulator/trap.h"

namespace pvemu::dispatch {

// Records every handled trap with its outcome as an expectation, to a trap
// log (pvemud --capture=FILE): an observer, active from Open to Close.
// Thread-safe: appends serialise on a mutex, which is why capture is off
// unless asked for. A write that fails stops the capture; the failure is
// reported once to `on_stop` (may be null) and again by Close().
class TrapCapture final : public TrapObserver {
 public:
  // Opens `path` (.traps or .textproto, see traplog/encoding.h).
  static absl::StatusOr<std::unique_ptr<TrapCapture>> Open(
      const std::string& path, std::function<void(const absl::Status&)> on_stop = nullptr);
  ~TrapCapture() override;
  void OnTrap(const emulator::Trap& trap, const emulator::Outcome& outcome,
              const emulator::Instruction& insn, emulator::DecodeError error) override;
  // Makes the log durable and complete; later Record calls are dropped.
  absl::Status Close();
  uint64_t records() const;

 private:
  struct Impl;
  TrapCapture(std::unique_ptr<Impl> impl, std::function<void(const absl::Status&)> on_stop);
  std::unique_ptr<Impl> impl_;
  const std::function<void(const absl::Status&)> on_stop_;
};

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_TRAP_CAPTURE_H_
