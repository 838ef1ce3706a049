// TrapLogWriter: writes a trap log, in the encoding its path names
// (encoding.h).
#ifndef PVEMU_TRAPLOG_WRITER_H_
#define PVEMU_TRAPLOG_WRITER_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pvemu/v1/trap.pb.h"
#include "traplog/encoding.h"

namespace pvemu::traplog {

// Writes a trap log. Not thread-safe.
//
// For a file, records go to "PATH.tmp" and Close() flushes, fsyncs, renames it
// to PATH and fsyncs the directory: PATH is either absent (or its old
// contents) or the complete new log, never a torn one. A writer destroyed
// without Close() removes its temporary file.
//
// Both encodings stream: each Append() formats the record at once (the text
// encoding as one "record { ... }" block), so memory stays flat. A .traps
// file is always written as PVTRAPS2.
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

  // REQUIRES: Close() not called yet. InvalidArgument, naming the record
  // and the field, for what a reader would refuse or the encoding cannot
  // hold: a source or note that is not UTF-8; for .traps also a record whose
  // body exceeds kMaxTrapRecordBytes, more than 15 insn bytes or a cpl above
  // 3 (the limits TrapFromProto enforces), and a mode, expect.kind or
  // expect.vector number its enum does not name. Fields unknown to this
  // schema are dropped, as the text encoding drops them.
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
  std::string scratch_;          // one encoded record, reused
  int64_t records_ = 0;
  bool closed_ = false;
};

// Reads a trap log record by record. Not thread-safe.
//
// Errors name the source and say where: for .traps "FILE: record N at byte
// offset O: ..." (N counts from 1; O is where the record's length prefix
// starts); for .textproto "FILE:LINE:COL: ..." at Open and "FILE: record N:
// ..." for a record that fails later. A damaged .traps file yields every
// intact record before the damage, then the error, then the same error again
// on every later call (of Next or NextTrap). DataLoss for a truncated or
// undecodable record (PVTRAPS2: a body shorter than the fixed part, insn_len
// above 15, cpl above 3, a mode, kind or vector number its enum does not
// name, reserved flag bits, string lengths that do not fill the body, a
// string that is not UTF-8, a non-zero byte where the format wants zero);
// InvalidArgument for a bad magic or a length over kMaxTrapRecordBytes.
//
// A PVTRAPS2 file is read through one buffer of about kMaxTrapRecordBytes,
// refilled in large chunks; NextTrap() decodes straight from it without
// allocating. A PVTRAPS1 file is read one message at a time. The .textproto

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_WRITER_H_
