// Trap logs are files of v1.TrapRecord in one of two encodings, chosen by
// the file's extension:
//   .textproto  a v1.TrapLog in protobuf text format (text_format.h), for
//               people, hand-written cases and golden files;
//   .traps      binary (traps_format.h), streamed, for captures and replay.
// Also the one rule on a record's contents that both encodings enforce.
#ifndef PVEMU_TRAPLOG_ENCODING_H_
#define PVEMU_TRAPLOG_ENCODING_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::traplog {

enum class TrapLogEncoding { kText, kBinary };

// ".textproto" -> kText, ".traps" -> kBinary; anything else is
// InvalidArgument naming the path.
absl::StatusOr<TrapLogEncoding> TrapLogEncodingForPath(absl::string_view path);

// proto3 string fields must hold UTF-8: the binary parser rejects a record
// whose source or note does not, while the text parser and the serializer let
// it through. Checked by the writer and by the readers of every encoding, so
// that whatever a writer accepts, a reader returns. InvalidArgument whose
// message starts with `where` ("NAME: record N: "). (A TrapRecord has no
// other string fields.)
absl::Status CheckRecordStrings(const pvemu::v1::TrapRecord& record,
                                absl::string_view where);

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_ENCODING_H_
