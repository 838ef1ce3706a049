#include "traplog/text_format.h"

#include <iterator>

#include "absl/strings/str_cat.h"
#include "base/textproto.h"
#include "google/protobuf/text_format.h"

namespace pvemu::traplog {

void FormatTextRecord(const pvemu::v1::TrapRecord& record, std::string* out) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetInitialIndentLevel(1);
  printer.SetUseShortRepeatedPrimitives(true);
  // Fields from a newer schema would print as bare numbers, which the
  // reader rejects; the text form keeps only what this schema names.
  printer.SetHideUnknownFields(true);
  *out = "record {\n";
  std::string body;
  printer.PrintToString(record, &body);
  *out += body;
  *out += "}\n";
}

absl::Status ParseTextLog(std::istream* in, absl::string_view name,
                          pvemu::v1::TrapLog* log) {
  std::string text(std::istreambuf_iterator<char>(*in), {});
  if (in->bad()) {
    return absl::DataLossError(absl::StrCat(name, ": read failed"));
  }
  return ParseTextProto(text, name, log);
}

}  // namespace pvemu::traplog
