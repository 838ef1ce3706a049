// Log importers. Each family is parsed by hand-written tokenising keyed on the
// fixed words of the printk format that produced the line, searched anywhere
// in the line: whatever the log tool put in front (dmesg "[ 12.34]", journal
// "Sep 04 22:56:17 host kernel:", syslog "[ID 123 kern.notice]", "(XEN) [ts]")
// is then irrelevant, and a new prefix style needs no code.
//
// Sources of the formats (wording checked against the kernel and Xen trees):
#include "traplog/import.h"

#include <fstream>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "traplog/import_line_parser.h"

namespace pvemu::traplog {

namespace {

using import_internal::LineParser;
using import_internal::NewFtraceParser;
using import_internal::NewKvmDmesgParser;
using import_internal::NewXenConsoleParser;
using import_internal::Verdict;
namespace v1 = ::pvemu::v1;

// Notes keep at most this much of the line.
constexpr size_t kMaxNoteBytes = 2048;

// Text for a proto3 string field, which must be valid UTF-8: valid sequences
// are kept, anything else (and control characters) becomes "\xNN".
std::string CleanText(absl::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(s.size() < max_bytes ? s.size() : max_bytes);
  size_t i = 0;
  while (i < s.size()) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\t') {
      out += ' ';
      ++i;
      continue;
    }
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    }
    bool valid = len > 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) valid = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (valid) {
      // No overlong forms, no surrogates, nothing past U+10FFFF.
      if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
          (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
        valid = false;
      }
    }
    if (valid) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      ++i;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// The driver.

class Importer {
 public:
  // `parsers`: one family's, or for "auto" every family's, most specific
  // first.
  Importer(std::vector<std::unique_ptr<LineParser>> parsers, bool auto_detect,
           absl::string_view source_name, const TrapSink& sink)
      : parsers_(std::move(parsers)),
        auto_detect_(auto_detect),
        source_(CleanText(source_name, 1024)),
        sink_(sink) {}

  absl::Status Line(absl::string_view raw, int64_t line_no,
                    ImportStats* stats) {
    ++stats->lines;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    // '#' starts ftrace/trace-cmd headers and comments in captured files;
    // no kernel or Xen message does.
    if (line.empty() || line[0] == '#') {
      ++stats->skipped;
      return absl::OkStatus();
    }
    LineParser* parser = auto_detect_ ? Claimant(line) : parsers_[0].get();
    v1::TrapRecord rec;
    std::string why;
    const Verdict v =
        parser == nullptr ? Verdict::kSkip : parser->Parse(line, &rec, &why);
    switch (v) {
      case Verdict::kSkip:
        ++stats->skipped;
        return absl::OkStatus();
      case Verdict::kMalformed:
        ++stats->malformed;
        if (stats->malformed_lines.size() < kMaxMalformedReported) {
          stats->malformed_lines.push_back(
              {line_no, absl::StrCat(parser->format(), ": ", why)});
        }
        return absl::OkStatus();
      case Verdict::kTrap:
        break;
    }
    ++stats->traps;
    ++stats->by_format[std::string(parser->format())];
    rec.set_source(absl::StrCat(source_, ":", line_no));
    rec.set_note(CleanText(line, kMaxNoteBytes));
    return sink_(std::move(rec));
  }

 private:
  // The first parser that claims `line`, or null.
  LineParser* Claimant(absl::string_view line) const {
    for (const auto& parser : parsers_) {
      if (parser->Claims(line)) return parser.get();
    }
    return nullptr;
  }

  std::vector<std::unique_ptr<LineParser>> parsers_;
  bool auto_detect_;
  std::string source_;
  const TrapSink& sink_;
};

absl::StatusOr<std::unique_ptr<Importer>> NewImporter(
    absl::string_view format, absl::string_view source_name,
    const TrapSink& sink) {
  std::vector<std::unique_ptr<LineParser>> parsers;
  const bool auto_detect = format == kImportFormatAuto || format.empty();
  if (auto_detect) {
    // Most specific first: "(XEN)" and ftrace event names are unambiguous;
    // the KVM words are searched anywhere.
    parsers.push_back(NewFtraceParser());
    parsers.push_back(NewXenConsoleParser());
    parsers.push_back(NewKvmDmesgParser());
  } else if (format == kImportFormatKvm) {
    parsers.push_back(NewKvmDmesgParser());
  } else if (format == kImportFormatXen) {
    parsers.push_back(NewXenConsoleParser());
  } else if (format == kImportFormatFtrace) {
    parsers.push_back(NewFtraceParser());
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log format \"", format, "\"; use ", kImportFormatAuto, ", ",
        kImportFormatKvm, ", ", kImportFormatXen, " or ", kImportFormatFtrace));
  }
  return std::make_unique<Importer>(std::move(parsers), auto_detect,
                                    source_name, sink);
}

}  // namespace

absl::StatusOr<ImportStats> ImportLog(absl::string_view format,
                                      std::istream& in,
                                      absl::string_view source_name,
                                      const TrapSink& sink) {
  ASSIGN_OR_RETURN(std::unique_ptr<Importer> importer,
                   NewImporter(format, source_name, sink));
  ImportStats stats;
  // One fixed buffer: a line longer than it is skipped without being stored.
  std::string buf(kMaxImportLineBytes + 1, '\0');
  int64_t line_no = 0;
  while (true) {
    in.getline(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got == 0 && in.eof()) break;
    ++line_no;
    if (in.fail() && !in.eof() && !in.bad()) {
      // The buffer filled before the newline: drop the rest of the line.
      in.clear();
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      ++stats.lines;
      ++stats.skipped;
      ++stats.too_long;
      if (in.eof()) break;
      continue;
    }
    if (in.bad()) {
      return absl::DataLossError(
          absl::StrCat(source_name, ":", line_no, ": read failed"));
    }
    // gcount counts the newline when one was consumed.
    size_t len = static_cast<size_t>(got);
    if (!in.eof() && len > 0) --len;
    RETURN_IF_ERROR(
        importer->Line(absl::string_view(buf.data(), len), line_no, &stats));
    if (in.eof()) break;
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(source_name, ": read failed"));
  }
  return stats;
}

absl::StatusOr<ImportStats> ImportLogFile(absl::string_view format,
                                          const std::string& path,
                                          const TrapSink& sink) {
  std::ifstream in;
  RETURN_IF_ERROR(OpenForReading(path, &in));
  return ImportLog(format, in, path, sink);
}

void MergeImportStats(const ImportStats& from, ImportStats* into) {
  into->lines += from.lines;
  into->traps += from.traps;
  into->skipped += from.skipped;
  into->too_long += from.too_long;
  into->malformed += from.malformed;
  for (const auto& [name, n] : from.by_format) into->by_format[name] += n;
  for (const MalformedLine& m : from.malformed_lines) {
    if (into->malformed_lines.size() >= kMaxMalformedReported) break;
    into->malformed_lines.push_back(m);
  }
}

}  // namespace pvemu::traplog
