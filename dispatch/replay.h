// Replay: trap logs run through a Dispatcher as a trap source runs its traps,
// each outcome compared with what the log expected (traplog/expectations.h).
//
// With jobs > 1 a log is split by vCPU number over that many threads
// (traplog::VcpuShare), each with a session and a reader of its own: every
// trap whose answer could depend on another's (the same vCPU's SHADOW MSRs,
// the same host CPU's PASSTHROUGH MSRs) is replayed by one thread, in the
// log's order, so the answers are the serial replay's. What changes is the
// order mismatches are reported in between vCPUs. A log that is not a
// regular binary file (a FIFO, a .textproto) is replayed by one thread:
// a FIFO cannot be read twice, and parsing text would be repeated by each.
#ifndef PVEMU_DISPATCH_REPLAY_H_
#define PVEMU_DISPATCH_REPLAY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "dispatch/dispatch.h"
#include "emulator/decoder.h"
#include "emulator/trap.h"

namespace pvemu::dispatch {

struct ReplayTotals {
  uint64_t traps = 0;
  uint64_t completed = 0;
  uint64_t exceptions = 0;
  uint64_t unhandled = 0;
  uint64_t checked = 0;     // records with an expectation
  uint64_t mismatches = 0;  // of those, the ones whose outcome differs
  // One more trap, answered with `kind` (a v1.Outcome.Kind converts: the
  // numbers are equal).
  void Count(emulator::OutcomeKind kind) {
    ++traps;
    completed += kind == emulator::OutcomeKind::kCompleted;
    exceptions += kind == emulator::OutcomeKind::kException;
    unhandled += kind == emulator::OutcomeKind::kUnhandled;
  }
  ReplayTotals& operator+=(const ReplayTotals& other);
};

// One record whose outcome is not what its log expected, for the caller to
// report. Valid only during the call that receives it.
struct ReplayMismatch {
  const std::string& log;
  int64_t record;      // counted from 1 in its log
  std::string source;  // where an importer found the trap; may be empty
  const emulator::Trap& trap;
  const emulator::Outcome& outcome;
  const emulator::Instruction& insn;
  emulator::DecodeError error;
  uint64_t generation;  // the policy generation that decided it
  // CheckExpectation's verdict: FailedPrecondition saying what differs, or
  // InvalidArgument for an expectation the instruction cannot meet.
  absl::Status verdict;
};

struct ReplayOptions {
  int jobs = 1;  // threads a regular binary log is split over, >= 1
  // Each mismatch, one call at a time, from the thread that found it.
  std::function<void(const ReplayMismatch&)> on_mismatch;
  // Now and then (every 64Ki records a thread replays), one call at a time:
  // the log, how far into it replay is, the mismatches so far.
  std::function<void(const std::string& log, int64_t records, uint64_t mismatches)> on_progress;
};

// Replays `logs` in order, adding to *totals. Stops at the first error (a log
// that cannot be opened, a damaged record, a trap that cannot be converted:
// the reader's error, naming the log, record and byte offset), after the
// records before it; with jobs > 1 other vCPUs' records past it may have been
// replayed too.
absl::Status ReplayLogs(Dispatcher& dispatcher, absl::Span<const std::string> logs,
                        const ReplayOptions& options, ReplayTotals* totals);

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_REPLAY_H_
