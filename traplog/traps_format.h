// The .traps binary encoding of trap logs, read and written as a stream: a
// log of any length costs the memory of one read buffer. Two versions, told
// apart by the file's first 8 bytes:
//   "PVTRAPS2"  fixed-layout records (below); what the writer produces, and
//               what replay reads fastest.
//   "PVTRAPS1"  varint-length-delimited v1.TrapRecord messages (each at most
//               kMaxTrapRecordBytes); still read (TrapLogReader), no longer
//               written.
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
//          0x04 expect.value set    0x40 expect.relaxed (a learning
//          0x08 expect.cpuid set         domain's answer ENFORCE would fault)
//                                   0x80 reserved (zero)
//
// Every record has exactly one encoding, and a reader refuses any other
// (see TrapLogReader): the padding, the insn bytes past insn_len, and every
#ifndef PVEMU_TRAPLOG_TRAPS_FORMAT_H_
#define PVEMU_TRAPLOG_TRAPS_FORMAT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
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

// Encodes `record` as one PVTRAPS2 record into *out (reusing its capacity).
// InvalidArgument, prefixed by `where` ("NAME: record N"), for what a reader
// would refuse or the layout cannot hold (see TrapLogWriter::Append).
absl::Status EncodeTrapsRecord(const pvemu::v1::TrapRecord& record,
                               absl::string_view where, std::string* out);

// The PVTRAPS2 record at `r` as a message, into `record` (clear). `r` must be
// a whole record that traps_v2::DamageOf (traps_layout.h) found valid.
void DecodeTrapsRecord(const char* r, pvemu::v1::TrapRecord* record);

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_TRAPS_FORMAT_H_
