// A Host decorator that reports host MSR faults to the operator once per
// (access, MSR), so a misconfigured PASSTHROUGH rule or a missing msr driver
// shows up in the log without a guest being able to flood it. The normal
// path adds nothing; only a failed access takes a lock (to remember it).
#ifndef PVEMU_SERVER_FAULT_LOGGING_HOST_H_
#define PVEMU_SERVER_FAULT_LOGGING_HOST_H_

#include <cstdio>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "emulator/host.h"

namespace pvemu::server {

class FaultLoggingHost final : public emulator::Host {
 public:
  // `log` receives one line per first fault (default: stderr).
  explicit FaultLoggingHost(std::unique_ptr<emulator::Host> inner, std::FILE* log = stderr)
      : inner_(std::move(inner)), log_(log) {}

  pvemu::v1::Vendor vendor() const override { return inner_->vendor(); }
  absl::string_view description() const override { return inner_->description(); }
  uint64_t tsc_khz() const override { return inner_->tsc_khz(); }
  bool ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) override {
    if (inner_->ReadMsr(cpu, index, value)) return true;
    Report("read", cpu, index);
    return false;
  }
  bool WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) override {
    if (inner_->WriteMsr(cpu, index, value)) return true;
    Report("write", cpu, index);
    return false;
  }
  emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) override {
    return inner_->Cpuid(leaf, subleaf);
  }
  bool PortIo(uint16_t port, uint8_t width, bool write, uint32_t* value) override {
    return inner_->PortIo(port, width, write, value);
  }

  emulator::Host& inner() { return *inner_; }
  // How many distinct (access, MSR) faults were reported.
  size_t reported() const {
    absl::MutexLock lock(&mu_);
    return seen_.size();
  }

 private:
  void Report(const char* access, uint32_t cpu, uint32_t index) {
    const uint64_t key = (uint64_t{access[0] == 'w'} << 32) | index;
    {
      absl::MutexLock lock(&mu_);
      if (!seen_.insert(key).second) return;
    }
    std::fprintf(log_,
                 "pvemud: host %s of MSR 0x%x faulted (first seen on CPU %u); guests get "
                 "#GP(0) for it. Check the PASSTHROUGH rule or the host backend "
                 "(further faults of this MSR are not logged)\n",
                 access, index, cpu);
  }

  std::unique_ptr<emulator::Host> inner_;
  std::FILE* log_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<uint64_t> seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_FAULT_LOGGING_HOST_H_
