#include "dispatch/replay.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/mutex.h"
#include "traplog/expectations.h"
#include "traplog/reader.h"

namespace pvemu::dispatch {
namespace {

constexpr int64_t kNoError = std::numeric_limits<int64_t>::max();
constexpr uint64_t kProgressEvery = 1 << 16;

// What the threads replaying one log share.
struct LogRun {
  LogRun(const std::string& log, const ReplayOptions& options) : log(log), options(options) {}
  const std::string& log;
  const ReplayOptions& options;
  absl::Mutex report_mu;  // one on_mismatch or on_progress call at a time
  int64_t furthest ABSL_GUARDED_BY(report_mu) = 0;  // the last progress's record
  std::atomic<uint64_t> mismatches{0};  // for on_progress
  // The lowest record number a thread failed at: the others stop on
  // passing it, as a serial replay would have stopped there.
  std::atomic<int64_t> failed_at{kNoError};
};

// The same log split into shares (or whole, share 0 of 1) for this thread.
// Written once, when the thread stops (ReplayShare counts on its own stack:
// the threads' results sit side by side in one vector).
struct ShareResult {
  ReplayTotals totals;
  absl::Status status;
  int64_t failed_at = kNoError;
};

void ReplayShare(Dispatcher& dispatcher, LogRun& run, traplog::VcpuShare share,
                 ShareResult* result) {
  absl::StatusOr<std::unique_ptr<traplog::TrapLogReader>> opened =
      traplog::TrapLogReader::Open(run.log);
  if (!opened.ok()) {
    result->status = opened.status();
    result->failed_at = 0;
    return;
  }
  traplog::TrapLogReader& reader = **opened;
  std::unique_ptr<Dispatcher::Session> session = dispatcher.NewSession();
  // Counted on the thread's own stack and handed over when it stops.
  ReplayTotals totals;
  absl::Cleanup hand_over = [&] { result->totals = totals; };
  emulator::Trap trap;
  traplog::ExpectedOutcome expect;
  emulator::Instruction insn;
  emulator::DecodeError error = emulator::DecodeError::kOk;
  while (true) {
    absl::StatusOr<bool> more = reader.NextTrapIn(share, &trap, &expect);
    if (!more.ok()) {
      result->status = more.status();
      result->failed_at = reader.records_read() + 1;
      int64_t seen = run.failed_at.load(std::memory_order_relaxed);
      while (result->failed_at < seen &&
             !run.failed_at.compare_exchange_weak(seen, result->failed_at)) {
      }
      return;
    }
    if (!*more) return;
    const int64_t record = reader.records_read();
    if (record > run.failed_at.load(std::memory_order_relaxed)) return;
    const emulator::Outcome out = session->Handle(trap, &insn, &error);
    totals.Count(out.kind);
    if (!expect.empty()) {
      ++totals.checked;
      absl::Status verdict = traplog::CheckExpectation(expect, trap, insn, error, out);
      if (!verdict.ok()) [[unlikely]] {
        ++totals.mismatches;
        run.mismatches.fetch_add(1, std::memory_order_relaxed);
        if (run.options.on_mismatch) {
          ReplayMismatch mismatch{run.log,  record, reader.LastSource(), trap,
                                  out,      insn,   error,               session->generation(),
                                  std::move(verdict)};
          absl::MutexLock lock(&run.report_mu);
          run.options.on_mismatch(mismatch);
        }
      }
    }
    if (run.options.on_progress && totals.traps % kProgressEvery == 0) [[unlikely]] {
      // Any thread's (a log's vCPUs may all be another's), as far as the
      // furthest has come.
      absl::MutexLock lock(&run.report_mu);
      run.furthest = std::max(run.furthest, record);
      run.options.on_progress(run.log, run.furthest,
                              run.mismatches.load(std::memory_order_relaxed));
    }
  }
}

// Whether `log` may be read by several threads at once: a regular file of
// binary records (not a FIFO, which one reader drains; not text, which each
// thread would parse again).
bool Splittable(const std::string& log) {
  struct stat st;
  if (stat(log.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  absl::StatusOr<traplog::TrapLogEncoding> encoding = traplog::TrapLogEncodingForPath(log);
  return encoding.ok() && *encoding == traplog::TrapLogEncoding::kBinary;
}

}  // namespace

ReplayTotals& ReplayTotals::operator+=(const ReplayTotals& other) {
  traps += other.traps;
  completed += other.completed;
  exceptions += other.exceptions;
  unhandled += other.unhandled;
  checked += other.checked;
  mismatches += other.mismatches;
  return *this;
}

absl::Status ReplayLogs(Dispatcher& dispatcher, absl::Span<const std::string> logs,
                        const ReplayOptions& options, ReplayTotals* totals) {
  for (const std::string& log : logs) {
    const uint32_t jobs =
        Splittable(log) ? static_cast<uint32_t>(std::max(options.jobs, 1)) : 1u;
    LogRun run(log, options);
    std::vector<ShareResult> results(jobs);
    std::vector<std::thread> threads;
    threads.reserve(jobs - 1);
    for (uint32_t i = 1; i < jobs; ++i) {
      threads.emplace_back(ReplayShare, std::ref(dispatcher), std::ref(run),
                           traplog::VcpuShare{i, jobs}, &results[i]);
    }
    ReplayShare(dispatcher, run, traplog::VcpuShare{0, jobs}, &results[0]);
    for (std::thread& t : threads) t.join();
    // Every share stops at damage, at the same record; the error to report
    // is the earliest any share met.
    const ShareResult* first_error = nullptr;
    for (const ShareResult& r : results) {
      *totals += r.totals;
      if (!r.status.ok() && (first_error == nullptr || r.failed_at < first_error->failed_at)) {
        first_error = &r;
      }
    }
    if (first_error != nullptr) return first_error->status;
  }
  return absl::OkStatus();
}

}  // namespace pvemu::dispatch
