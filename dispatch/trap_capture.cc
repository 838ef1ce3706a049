#include "dispatch/trap_capture.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "emulator/trap_convert.h"
#include "pvemu/v1/trap.pb.h"
#include "traplog/writer.h"

namespace pvemu::dispatch {

struct TrapCapture::Impl {
  absl::Mutex mu;
  std::unique_ptr<traplog::TrapLogWriter> writer ABSL_GUARDED_BY(mu);
  absl::Status error ABSL_GUARDED_BY(mu);  // the first failure; later records are dropped
  v1::TrapRecord record ABSL_GUARDED_BY(mu);  // reused
  uint64_t records ABSL_GUARDED_BY(mu) = 0;
};

TrapCapture::TrapCapture(std::unique_ptr<Impl> impl,
                         std::function<void(const absl::Status&)> on_stop)
    : impl_(std::move(impl)), on_stop_(std::move(on_stop)) {
  SetActive(true);
}
TrapCapture::~TrapCapture() { (void)Close(); }

absl::StatusOr<std::unique_ptr<TrapCapture>> TrapCapture::Open(
    const std::string& path, std::function<void(const absl::Status&)> on_stop) {
  auto impl = std::make_unique<Impl>();
  absl::StatusOr<std::unique_ptr<traplog::TrapLogWriter>> writer =
      traplog::TrapLogWriter::Open(path);
  if (!writer.ok()) return writer.status();
  {
    absl::MutexLock lock(&impl->mu);
    impl->writer = std::move(*writer);
  }
  return std::unique_ptr<TrapCapture>(new TrapCapture(std::move(impl), std::move(on_stop)));
}

void TrapCapture::OnTrap(const emulator::Trap& trap, const emulator::Outcome& outcome,
                         const emulator::Instruction& insn, emulator::DecodeError error) {
  absl::MutexLock lock(&impl_->mu);
  if (impl_->writer == nullptr || !impl_->error.ok()) return;
  v1::TrapRecord& rec = impl_->record;
  rec.Clear();
  emulator::TrapToProto(trap, rec.mutable_trap());
  v1::Expectation* expect = rec.mutable_expect();
  expect->set_kind(static_cast<v1::Outcome::Kind>(outcome.kind));
  if (outcome.kind == emulator::OutcomeKind::kException) {
    expect->set_vector(static_cast<v1::Vector>(outcome.vector));
  } else if (outcome.kind == emulator::OutcomeKind::kCompleted &&
             error == emulator::DecodeError::kOk && insn.kind == emulator::InsnKind::kRdmsr) {
    expect->set_value((outcome.GprAfter(emulator::kRdx, trap.regs) << 32) |
                      (outcome.GprAfter(emulator::kRax, trap.regs) & 0xffffffffu));
  }
  // A learning domain's access ENFORCE would fault: the answer above is the
  // relaxed one, and replay --changes and suggest read this bit.
  if (outcome.relaxed) expect->set_relaxed(true);
  absl::Status status = impl_->writer->Append(rec);
  if (!status.ok()) {
    impl_->error = status;
    if (on_stop_) on_stop_(status);
    return;
  }
  ++impl_->records;
}

absl::Status TrapCapture::Close() {
  SetActive(false);
  absl::MutexLock lock(&impl_->mu);
  if (impl_->writer == nullptr) return impl_->error;
  absl::Status status = impl_->writer->Close();
  impl_->writer.reset();
  if (impl_->error.ok()) impl_->error = status;
  return status;
}

uint64_t TrapCapture::records() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->records;
}

}  // namespace pvemu::dispatch
