// TrapLogReader: reads a trap log in any encoding (encoding.h), as messages
// or, for replay, straight into the trap-path structs.
#ifndef PVEMU_TRAPLOG_READER_H_
#define PVEMU_TRAPLOG_READER_H_

#include <cstdint>
#include <istream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "emulator/trap.h"
#include "pvemu/v1/trap.pb.h"
#include "traplog/encoding.h"
#include "traplog/expectations.h"

namespace pvemu::traplog {

// One of `count` shares of a log's records, split by vCPU number: vCPU n of
// every domain falls in share n % count, and a share keeps its records in the
// log's order. Replay splits a log this way over worker threads
// (dispatch/replay.h). By vCPU number, not by (domain, vCPU): a vCPU's SHADOW
// MSRs are its domain's and its own, but PASSTHROUGH reaches the host CPU of
// the same number, which every domain's vCPU n shares (the emulator passes the
// vCPU number to Host::ReadMsr/WriteMsr as the CPU), so an answer depends
// only on the earlier records of its share.
struct VcpuShare {
  uint32_t index = 0;  // 0 .. count-1
  uint32_t count = 1;
  bool Owns(uint32_t vcpu) const {
    // Most splits are a power of two: a mask, not a division.
    return ((count & (count - 1)) == 0 ? vcpu & (count - 1) : vcpu % count) == index;
  }
};

// Reads a trap log record by record. Not thread-safe.
//
// Errors name the source and say where: for .traps "FILE: record N at byte
// offset O: ..." (N counts from 1; O is where the record's length prefix
// starts); for .textproto "FILE:LINE:COL: ..." for text that does not parse
// and "FILE: record N: ..." for a record that fails later. A damaged .traps
// file yields every intact record before the damage, then the error, then
// the same error again on every later call (of Next or NextTrap); so does a
// .textproto whose text fails to parse past its first piece (TextLogPieces,
// text_format.h: 1 MiB of text), while an error in the first piece (all of a
// log up to 1 MiB, as hand-made logs are) fails Open. DataLoss for a truncated or
// undecodable record (PVTRAPS2: a body shorter than the fixed part, insn_len
// above 15, cpl above 3, a mode, kind or vector number its enum does not
// name, reserved flag bits, string lengths that do not fill the body, a
// string that is not UTF-8, a non-zero byte where the format wants zero);
// InvalidArgument for a bad magic or a length over kMaxTrapRecordBytes.
//
// A PVTRAPS2 regular file is mapped 4 MiB at a time (mmap windows), and
// NextTrap() decodes straight from the mapping, without copying or
// allocating; the file's size is looked up again at the end of what is
// mapped, so a capture still being appended to replays as far as it is
// written. A file cut shorter while it is read is the reader's SIGBUS, as
// with any mapping: replay a copy of a log something may truncate. A
// PVTRAPS2 stream (a FIFO, ForStream) is read through one buffer of about
// kMaxTrapRecordBytes, refilled in large chunks. A PVTRAPS1 file is read one message at a time. A .textproto
// is parsed a piece of whole records at a time (TextLogPieces). Every
// encoding streams: a log of any length, read from a file or a pipe (a FIFO
// named *.traps or *.textproto), costs the memory of one window, buffer or
// piece, never the log's; text is many times slower to read than PVTRAPS2, so
// captures are best written as .traps.
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

  // NextTrap for one share of the log: reads past the records of other
  // shares to the next of `share`'s. Records passed over are framed and, in
  // PVTRAPS2, checked for damage as NextTrap checks them (so damage stops
  // every share at the same record), but not converted: a trap that
  // TrapFromProto refuses is an error only for the share it is in.
  // records_read() counts the records passed over too, so it is the number
  // of the record returned. NextTrap is NextTrapIn(VcpuShare{}): the share
  // that is the whole log.
  absl::StatusOr<bool> NextTrapIn(const VcpuShare& share, emulator::Trap* trap,
                                  ExpectedOutcome* expect);
  // The source (v1.TrapRecord.source: where an importer found the trap) of
  // the record NextTrap or NextTrapIn returned last; empty if it has none.
  // For reports of the rare record that needs it: it copies.
  std::string LastSource() const;
  int64_t records_read() const { return records_; }
  TrapLogEncoding encoding() const { return encoding_; }

  class Impl;  // one per encoding (and .traps version), in reader.cc

 private:
  TrapLogReader(TrapLogEncoding encoding, std::string name);

  TrapLogEncoding encoding_;
  std::string name_;
  std::unique_ptr<Impl> impl_;
  int64_t records_ = 0;
  absl::Status sticky_error_;  // once broken, always broken
};

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_READER_H_
