// Reading protobuf text format with errors people can act on. Shared by the
// policy loader, the host-profile loader and the trap-log reader.
#ifndef PVEMU_BASE_TEXTPROTO_H_
#define PVEMU_BASE_TEXTPROTO_H_

#include <fstream>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"

namespace pvemu {

// Parses `text` into `msg` (cleared first). `source_name` is used in errors,
// which read "SOURCE:LINE:COL: message" (1-based) and come back as
// InvalidArgument. Unknown fields are errors. If `info` is not null it gets
// every field's position, for validators that report their own errors.
// `first_line` is the line (from 0) of text[0] in the source, when `text` is
// a piece of it (a trap log read in pieces).
absl::Status ParseTextProto(absl::string_view text, absl::string_view source_name,
                            google::protobuf::Message* msg,
                            google::protobuf::TextFormat::ParseInfoTree* info = nullptr,
                            int64_t first_line = 0);

// Reads and parses a file. NotFound / PermissionDenied name the file.
absl::Status ParseTextProtoFile(const std::string& path,
                                google::protobuf::Message* msg,
                                google::protobuf::TextFormat::ParseInfoTree* info = nullptr);

// Opens `path` for binary reading. NotFound / PermissionDenied / Unavailable
// name the file and give the errno text; a directory is InvalidArgument.
absl::Status OpenForReading(const std::string& path, std::ifstream* in);

// Reads a whole file. Errors name the file and the reason (errno text).
absl::Status ReadFileToString(const std::string& path, std::string* out);

// Text format for people and files: one field a line.
std::string ToTextProto(const google::protobuf::Message& msg);

}  // namespace pvemu

#endif  // PVEMU_BASE_TEXTPROTO_H_
