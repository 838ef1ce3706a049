// The .textproto encoding of trap logs: a v1.TrapLog in protobuf text format
// ("record { ... }" blocks), for people, hand-written cases and golden files.
// It is written a record at a time (the file is a valid TrapLog after every
// record) but read whole: text logs are small; captures use .traps.
#ifndef PVEMU_TRAPLOG_TEXT_FORMAT_H_
#define PVEMU_TRAPLOG_TEXT_FORMAT_H_

#include <istream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::traplog {

// What a text log starts with: comments that tell editors and people what
// schema the file follows.
inline constexpr absl::string_view kTextLogHeader =
    "# proto-file: pvemu/v1/trap.proto\n"
    "# proto-message: pvemu.v1.TrapLog\n";

// `record` as one "record { ... }" block of a TrapLog, into *out (replacing
// its contents). Fields this schema does not name are left out.
void FormatTextRecord(const pvemu::v1::TrapRecord& record, std::string* out);

// Reads all of `in` as a text TrapLog into *log. Errors name `name`:
// "NAME:LINE:COL: ..." for a parse error, DataLoss when reading fails.
absl::Status ParseTextLog(std::istream* in, absl::string_view name,
                          pvemu::v1::TrapLog* log);

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_TEXT_FORMAT_H_
