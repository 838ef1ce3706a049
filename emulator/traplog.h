// Trap logs: files of v1.TrapRecord, in two encodings chosen by extension.
//
//   .textproto  a v1.TrapLog in protobuf text format ("record { ... }" blocks),
//               for people, hand-written cases and golden files.
//   .traps      binary: the 8-byte magic "PVTRAPS1", then a stream of
//               varint-length-delimited v1.TrapRecord messages (each at most
//               kMaxTrapRecordBytes). Read and written as a stream, so a log
//               of any length costs the memory of one record.
//
// Also CheckExpectation(): whether an outcome matches what a log recorded.
#ifndef PVEMU_EMULATOR_TRAPLOG_H_
#define PVEMU_EMULATOR_TRAPLOG_H_

#include <cstddef>
#include <cstdint>
#include <istream>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::emulator {

// The first 8 bytes of every .traps file.
inline constexpr absl::string_view kTrapsMagic = "PVTRAPS1";

// A record longer than this is corrupt: real records are a few hundred bytes,
// and a reader must never allocate what a damaged length prefix asks for.
inline constexpr size_t kMaxTrapRecordBytes = size_t{1} << 20;

enum class TrapLogEncoding { kText, kBinary };

// ".textproto" -> kText, ".traps" -> kBinary; anything else is
// InvalidArgument naming the path.
absl::StatusOr<TrapLogEncoding> TrapLogEncodingForPath(absl::string_view path);

// Writes a trap log. Not thread-safe.
//
// For a file, records go to "PATH.tmp" and Close() flushes, fsyncs, renames it
// to PATH and fsyncs the directory: PATH is either absent (or its old
// contents) or the complete new log, never a torn one. A writer destroyed
// without Close() removes its temporary file.
//
// Both encodings stream: each Append() formats the record at once (the text
// encoding as one "record { ... }" block), so memory stays flat.
class TrapLogWriter {
 public:
  // Creates the writer for `path`, encoding chosen by its extension.
  static absl::StatusOr<std::unique_ptr<TrapLogWriter>> Open(
      const std::string& path);
  // Writes to a caller-owned stream (tests, fuzzing, stdout). `name` is used
  // in errors. Close() flushes `out` but does not close it.
  static std::unique_ptr<TrapLogWriter> ForStream(std::ostream* out,
                                                  TrapLogEncoding encoding,
                                                  absl::string_view name);

  TrapLogWriter(const TrapLogWriter&) = delete;
  TrapLogWriter& operator=(const TrapLogWriter&) = delete;
  ~TrapLogWriter();

  // REQUIRES: Close() not called yet. A record larger than
  // kMaxTrapRecordBytes is InvalidArgument (a reader would refuse it).
  absl::Status Append(const pvemu::v1::TrapRecord& record);

  // Makes everything appended durable (see the class comment). Calling it
  // twice is FailedPrecondition.
  absl::Status Close();

  int64_t records_written() const { return records_; }
  TrapLogEncoding encoding() const { return encoding_; }

 private:
  TrapLogWriter(TrapLogEncoding encoding, std::string name);
  absl::Status Write(absl::string_view bytes);
  absl::Status FlushBuffer();

  TrapLogEncoding encoding_;
  std::string name_;             // the final path, or the stream's name
  std::string tmp_path_;         // files only
  int fd_ = -1;                  // files only
  std::ostream* out_ = nullptr;  // streams only
  std::string buffer_;           // pending bytes for fd_
  std::string scratch_;          // one serialized record, reused
  int64_t records_ = 0;
  bool closed_ = false;
};

// Reads a trap log record by record. Not thread-safe.
//
// Errors name the source and say where: for .traps "FILE: record N at byte
// offset O: ..." (N counts from 1; O is where the record's length prefix
// starts); for .textproto "FILE:LINE:COL: ...". A damaged .traps file yields
// every intact record before the damage, then the error (DataLoss for a
// truncated or undecodable record, InvalidArgument for a bad magic or an
// oversized length), then the same error again on every later call.
//
// The .traps reader holds one record's bytes at a time. The .textproto reader
// parses the whole file at Open (text logs are for small, hand-made cases;
// use .traps for captures).
class TrapLogReader {
 public:
  static absl::StatusOr<std::unique_ptr<TrapLogReader>> Open(
      const std::string& path);
  // Reads from a caller-owned stream that must outlive the reader.
  static absl::StatusOr<std::unique_ptr<TrapLogReader>> ForStream(
      std::istream* in, TrapLogEncoding encoding, absl::string_view name);

  TrapLogReader(const TrapLogReader&) = delete;
  TrapLogReader& operator=(const TrapLogReader&) = delete;
  ~TrapLogReader();

  // Fills `record` (cleared first; reuse one object to keep memory flat) and
  // returns true, or returns false at a clean end of the log.
  absl::StatusOr<bool> Next(pvemu::v1::TrapRecord* record);

  int64_t records_read() const { return records_; }
  TrapLogEncoding encoding() const { return encoding_; }

  class Impl;  // one per encoding, in traplog.cc

 private:
  TrapLogReader(TrapLogEncoding encoding, std::string name);

  TrapLogEncoding encoding_;
  std::string name_;
  std::unique_ptr<Impl> impl_;
  int64_t records_ = 0;
  absl::Status sticky_error_;  // once broken, always broken
};

// Compares `outcome` with what the log expected. Only set fields count:
//   kind    when not KIND_UNSPECIFIED;
//   vector  when set: the outcome must be an EXCEPTION with that vector;
//   value   when set: the outcome must be COMPLETED and the instruction's
//           result must equal it: RDMSR (0f 32) -> EDX:EAX, i.e.
//           (rdx << 32) | (rax & 0xffffffff); IN (e4/e5/ec/ed) -> RAX masked
//           to the operand width;
//   cpuid   when set: the outcome must be COMPLETED with EAX/EBX/ECX/EDX equal.
// Returns OK on a match (and clears *diff). A mismatch returns
// FailedPrecondition whose message, also stored in *diff, reads like
// "expected EXCEPTION #GP, got COMPLETED rax=0x0 rdx=0x0". An expectation that
// cannot be checked (a `value` for an instruction that reads none) is
// InvalidArgument.
//
// This form learns the instruction from `record.trap` (its bytes and mode),
// which is how replay calls it; the decoder is not needed for that.
absl::Status CheckExpectation(const pvemu::v1::TrapRecord& record,
                              const pvemu::v1::Outcome& outcome,
                              std::string* diff);

// The same, learning the instruction from `outcome.instruction()` (mnemonic
// and operand size, as the emulator fills them in).
absl::Status CheckExpectation(const pvemu::v1::Expectation& expect,
                              const pvemu::v1::Outcome& outcome,
                              std::string* diff);

}  // namespace pvemu::emulator

#endif  // PVEMU_EMULATOR_TRAPLOG_H_
