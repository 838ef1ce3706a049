#include "base/textproto.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"

namespace pvemu {
namespace {

// Collects the parser's complaints with their positions instead of letting
// protobuf print them to stderr.
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  Collector(absl::string_view source, int64_t first_line)
      : source_(source), first_line_(first_line) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(absl::StrCat(source_, ":", first_line_ + line + 1, ":", column + 1,
                                   ": ", message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    AddError(line, column, message);
  }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string source_;
  int64_t first_line_;
  std::vector<std::string> errors_;
};

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view source_name,
                            google::protobuf::Message* msg,
                            google::protobuf::TextFormat::ParseInfoTree* info,
                            int64_t first_line) {
  msg->Clear();
  Collector collector(source_name, first_line);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  parser.AllowUnknownField(false);
  parser.AllowUnknownExtension(false);
  if (info != nullptr) parser.WriteLocationsTo(info);
  bool ok = parser.ParseFromString(std::string(text), msg);
  if (ok && collector.errors().empty()) return absl::OkStatus();
  if (collector.errors().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": not a valid ", msg->GetTypeName(),
                     " in protobuf text format"));
  }
  return absl::InvalidArgumentError(absl::StrJoin(collector.errors(), "\n"));
}

absl::Status OpenForReading(const std::string& path, std::ifstream* in) {
  // A directory opens, then reads as empty: an empty policy is valid, so
  // reading one would silently stand for "no rules at all".
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory; give a file's path"));
  }
  in->open(path, std::ios::binary);
  if (*in) return absl::OkStatus();
  int err = errno;
  std::string why = absl::StrCat(path, ": cannot open: ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(why);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(why);
  return absl::UnavailableError(why);
}

absl::Status ReadFileToString(const std::string& path, std::string* out) {
  std::ifstream in;
  absl::Status opened = OpenForReading(path, &in);
  if (!opened.ok()) return opened;
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(
        absl::StrCat(path, ": read failed: ", std::strerror(errno)));
  }
  *out = std::move(buf).str();
  return absl::OkStatus();
}

absl::Status ParseTextProtoFile(const std::string& path,
                                google::protobuf::Message* msg,
                                google::protobuf::TextFormat::ParseInfoTree* info) {
  std::string text;
  absl::Status read = ReadFileToString(path, &text);
  if (!read.ok()) return read;
  return ParseTextProto(text, path, msg, info);
}

std::string ToTextProto(const google::protobuf::Message& msg) {
  std::string out;
  google::protobuf::TextFormat::Printer printer;
  printer.SetUseShortRepeatedPrimitives(true);
  printer.PrintToString(msg, &out);
  return out;
}

}  // namespace pvemu
