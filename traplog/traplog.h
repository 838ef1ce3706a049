// Trap logs: files of v1.TrapRecord, in two encodings chosen by extension.
//
//   .textproto  a v1.TrapLog in protobuf text format ("record { ... }" blocks),
//               for people, hand-written cases and golden files.
//   .traps      binary, read and written as a stream: a log of any length
//               costs the memory of one read buffer. Two versions, told apart
//               by the file's first 8 bytes:
//                 "PVTRAPS2"  fixed-layout records (below); what the writer
//                             produces, and what replay reads fastest.
//                 "PVTRAPS1"  varint-length-delimited v1.TrapRecord messages
//                             (each at most kMaxTrapRecordBytes); still read.
//
// PVTRAPS2 records follow the magic back to back; the file ends cleanly
// exactly at a record boundary. Integers are unsigned little-endian. Offsets
// are from the start of the record:
//
//   offset  size  field          holds
//   0       4     body_bytes     bytes after this field: 216 + S + N;
//                                at most kMaxTrapRecordBytes
//   4       4     domain         trap.domain
//   8       4     vcpu           trap.vcpu
//   12      1     mode           trap.mode, the v1.CpuMode number (0..4)
//   13      1     cpl            trap.cpl (0..3)
//   14      1     insn_len       bytes in trap.insn (0..15)
//   15      1     flags          presence bits, below
//   16      15    insn           trap.insn: insn_len bytes, then zeros
//   31      1     expect_kind    expect.kind, the v1.Outcome.Kind number (0..3)
//   32      1     expect_vector  expect.vector, the v1.Vector number
//   33      3     (zero)
//   36      144   regs           18 x u64 in v1.Registers field order: rax rcx
//                                rdx rbx rsp rbp rsi rdi r8 .. r15 rip rflags
//   180     8     host_tsc       trap.host_tsc
//   188     8     expect_value   expect.value
//   196     16    expect_cpuid   4 x u32: expect.cpuid eax ebx ecx edx
//   212     4     source_len     S
//   216     4     note_len       N
//   220     S     source         TrapRecord.source, UTF-8
//   220+S   N     note           TrapRecord.note, UTF-8
//
//   flags  0x01 expect set          0x10 trap set
//          0x02 expect.vector set   0x20 trap.regs set
//          0x04 expect.value set    0xc0 reserved (zero)
//          0x08 expect.cpuid set
//
// Every record has exactly one encoding, and a reader refuses any other
// (see TrapLogReader): the padding, the insn bytes past insn_len, and every
// field whose flag is clear are zero (trap clear: offsets 4..14, insn,
// regs, host_tsc; trap.regs clear: regs; expect clear: expect_kind; each
// expect part clear: its field); 0x20 needs 0x10, and 0x02/0x04/0x08 need
// 0x01. rflags is stored as recorded (readers of the trap set bit 1, as
// TrapFromProto does). Fields this schema does not know are not stored.
//
// Also CheckExpectation(): whether an outcome matches what a log recorded.
#ifndef PVEMU_TRAPLOG_TRAPLOG_H_
#define PVEMU_TRAPLOG_TRAPLOG_H_

#include <cstddef>
#include <cstdint>
#include <istream>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "emulator/trap.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::traplog {

// The first 8 bytes of a .traps file: the version the writer produces, and
// the older one the reader still accepts.
inline constexpr absl::string_view kTrapsMagic = "PVTRAPS2";
inline constexpr absl::string_view kTrapsMagicV1 = "PVTRAPS1";

// A record longer than this is corrupt: real records are a few hundred bytes,
// and a reader must never allocate what a damaged length prefix asks for.
// (PVTRAPS2: the body_bytes limit; PVTRAPS1: the message length limit.)
inline constexpr size_t kMaxTrapRecordBytes = size_t{1} << 20;

// What a record says the host did: v1.Expectation as a plain struct, for the
// trap path (TrapLogReader::NextTrap, the struct CheckExpectation). Only the
// fields whose has_ flag is set are compared.
struct ExpectedOutcome {
  bool has_kind = false;
  pvemu::v1::Outcome::Kind kind = pvemu::v1::Outcome::KIND_UNSPECIFIED;
  bool has_vector = false;
  pvemu::v1::Vector vector = pvemu::v1::DE;  // EXCEPTION: the vector
  bool has_value = false;
  uint64_t value = 0;  // RDMSR: EDX:EAX; IN: AL/AX/EAX
  bool has_cpuid = false;
  uint32_t cpuid[4] = {};  // CPUID: eax, ebx, ecx, edx

  friend bool operator==(const ExpectedOutcome&,
                         const ExpectedOutcome&) = default;
};

// The struct form of `expect`: has_kind is kind != KIND_UNSPECIFIED, the
// other has_ flags are the message's presence. Every v1.Expectation converts,
// enum values this schema does not name included.
ExpectedOutcome ExpectedOutcomeFromProto(const pvemu::v1::Expectation& expect);

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
// reader parses the whole file at Open (text logs are for small, hand-made
// cases; use .traps for captures).
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

  // The fast form for replay: fills `trap` as TrapFromProto(record.trap())
  // would and `expect` (may be null) as ExpectedOutcomeFromProto(
  // record.expect()) would, skipping source and note. A record whose trap
  // TrapFromProto refuses is InvalidArgument naming the record, sticky like
  // damage. PVTRAPS2 is decoded straight from the read buffer into the
  // structs, without protobuf or allocation; the other encodings read the
  // message and convert it. Calls may be mixed with Next(); each reads the
  // next record.
  absl::StatusOr<bool> NextTrap(emulator::Trap* trap, ExpectedOutcome* expect);

  int64_t records_read() const { return records_; }
  TrapLogEncoding encoding() const { return encoding_; }

  class Impl;  // one per encoding (and .traps version), in traplog.cc

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

// The same on the trap-path structs, for replaying millions of records; it
// allocates nothing on a match. Learns the instruction from `trap` (its
// bytes and mode) only: there is no decoded instruction to fall back on when
// the bytes are not RDMSR, CPUID or IN. Otherwise its statuses and messages
// are the record form's for the equivalent messages (one implementation).
absl::Status CheckExpectation(const ExpectedOutcome& expect, const emulator::Trap& trap,
                              const emulator::Outcome& outcome);

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_TRAPLOG_H_
