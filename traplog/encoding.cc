#include "traplog/encoding.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/common.h"

namespace pvemu::traplog {

namespace v1 = ::pvemu::v1;

absl::StatusOr<TrapLogEncoding> TrapLogEncodingForPath(absl::string_view path) {
  if (absl::EndsWith(path, ".textproto")) return TrapLogEncoding::kText;
  if (absl::EndsWith(path, ".traps")) return TrapLogEncoding::kBinary;
  return absl::InvalidArgumentError(
      absl::StrCat(path,
                   ": unknown trap-log extension; use .textproto (text) "
                   "or .traps (binary)"));
}

absl::Status CheckRecordStrings(const v1::TrapRecord& record,
                                absl::string_view where) {
  for (const auto& [field, text] :
       {std::pair<absl::string_view, const std::string*>{"source",
                                                         &record.source()},
        {"note", &record.note()}}) {
    if (!google::protobuf::internal::IsStructurallyValidUTF8(
            text->data(), static_cast<int>(text->size()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, field, " is not valid UTF-8 (a proto3 string must be)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pvemu::traplog
