#include "traplog/text_format.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "google/protobuf/text_format.h"

namespace pvemu::traplog {
namespace {

constexpr size_t kReadBytes = size_t{64} << 10;

}  // namespace

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

TextLogPieces::TextLogPieces(std::istream* in, absl::string_view name,
                             size_t piece_bytes)
    : in_(in), name_(name), piece_bytes_(piece_bytes) {}

absl::StatusOr<bool> TextLogPieces::Next(pvemu::v1::TrapLog* log) {
  while (true) {
    size_t end;
    if (Scan(&end)) {
      if (absl::Status parsed = Parse(end, log); !parsed.ok()) return parsed;
      return true;
    }
    if (eof_) {
      if (text_.empty()) {
        log->Clear();
        return false;
      }
      if (absl::Status parsed = Parse(text_.size(), log); !parsed.ok()) {
        return parsed;
      }
      return true;
    }
    // No end yet past protobuf's limit: one top-level field is that long.
    if (text_.size() > static_cast<size_t>(INT_MAX)) {
      return Parse(text_.size(), log);
    }
    if (absl::Status filled = Fill(); !filled.ok()) return filled;
  }
}

// Mirrors io::Tokenizer (the text-format parser's, with # comments and
// single-line strings) only as far as brackets, strings and comments go:
// a line end inside a string ends it, as the tokenizer ends it (with an
// error). Where the text is valid up to a piece's end, that end is where
// one parse of the whole text is between two top-level fields.
bool TextLogPieces::Scan(size_t* end) {
  const char* const text = text_.data();
  const size_t size = text_.size();
  for (size_t i = scan_; i < size; ++i) {
    const char c = text[i];
    if (c == '\n') {
      comment_ = false;
      quote_ = 0;
      escape_ = false;
      if (depth_ < 0) {  // a closing bracket no parse gets past: stop here
        *end = i + 1;
        scan_ = i + 1;
        return true;
      }
      if (depth_ != 0) continue;
      if (last_ == Last::kCloser) {
        pending_ = i + 1;  // if the next token is not ; or ,
      } else if ((last_ == Last::kSeparator || last_ == Last::kNothing) &&
                 i + 1 >= piece_bytes_) {  // after ; or , (or only comments)
        *end = i + 1;
        scan_ = i + 1;
        return true;
      }
      continue;
    }
    if (comment_) continue;
    if (quote_ != 0) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == quote_) {
        quote_ = 0;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') continue;
    if (c == '#') {
      comment_ = true;
      continue;
    }
    // A token starts or goes on here.
    bool ends = false;
    if (pending_ != std::string::npos) {
      if (c != ';' && c != ',' && pending_ >= piece_bytes_) {
        ends = true;
        *end = pending_;
      }
      pending_ = std::string::npos;
    }
    switch (c) {
      case '{':
      case '<':
      case '[':
        ++depth_;
        last_ = Last::kOther;
        break;
      case '}':
      case '>':
      case ']':
        --depth_;
        last_ = depth_ == 0 ? Last::kCloser : Last::kOther;
        break;
      case ';':
      case ',':
        last_ = Last::kSeparator;
        break;
      case '"':
      case '\'':
        quote_ = c;
        last_ = Last::kOther;
        break;
      default:
        last_ = Last::kOther;
        break;
    }
    if (ends) {
      scan_ = i + 1;
      return true;
    }
  }
  scan_ = size;
  return false;
}

absl::Status TextLogPieces::Fill() {
  const size_t old = text_.size();
  text_.resize(old + kReadBytes);
  in_->read(text_.data() + old, static_cast<std::streamsize>(kReadBytes));
  const size_t got = static_cast<size_t>(in_->gcount());
  text_.resize(old + got);
  if (got < kReadBytes) {
    eof_ = true;
    if (in_->bad()) {
      return absl::DataLossError(absl::StrCat(name_, ": read failed"));
    }
  }
  return absl::OkStatus();
}

absl::Status TextLogPieces::Parse(size_t end, pvemu::v1::TrapLog* log) {
  if (end > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ":", first_line_ + 1, ":1: a top-level field of more than ",
        INT_MAX, " bytes: protobuf's text parser takes at most that"));
  }
  RETURN_IF_ERROR(ParseTextProto(absl::string_view(text_.data(), end), name_, log,
                                 /*info=*/nullptr, first_line_));
  first_line_ += std::count(text_.data(), text_.data() + end, '\n');
  text_.erase(0, end);
  scan_ -= end;
  if (pending_ != std::string::npos) {
    pending_ = pending_ >= end ? pending_ - end : std::string::npos;
  }
  return absl::OkStatus();
}

}  // namespace pvemu::traplog
