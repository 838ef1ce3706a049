// The .textproto encoding of trap logs: a v1.TrapLog in protobuf text format
// ("record { ... }" blocks), for people, hand-written cases and golden files.
// It is written a record at a time (the file is a valid TrapLog after every
// record) and read a piece at a time (TextLogPieces), so a text log of any
// length, a capture written as .textproto included, costs the memory of one
// piece.
#ifndef PVEMU_TRAPLOG_TEXT_FORMAT_H_
#define PVEMU_TRAPLOG_TEXT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// Reads a text TrapLog from a stream in pieces of whole top-level fields
// (record blocks), each parsed as a TrapLog on its own. Not thread-safe.
//
// A piece ends at the end of a line where a top-level field has just ended:
// after its closing bracket (when the next token is not the `;` or `,` that
// belongs to it) or after that separator, and only once the piece holds at
// least kPieceBytes of text; the last piece ends with the stream. Records
// are what one parse of the whole text would give, in order, and so are the
// errors: "NAME:LINE:COL: message" with the line and column in the whole
// text (InvalidArgument, as ParseTextProto words them), DataLoss
// "NAME: read failed". A text of at most kPieceBytes is one piece, so its
// errors all come from the first Next(); a longer one's come from the piece
// that has them, after every record before it.
//
// Memory: one piece's text and records, plus a 64 KiB read. A top-level
// field is never split, so a field longer than a piece (a "record: [ ... ]"
// list around the whole log) makes a longer piece; protobuf's parser takes
// at most 2 GiB, and a piece that would be longer is InvalidArgument.
class TextLogPieces {
 public:
  static constexpr size_t kPieceBytes = size_t{1} << 20;

  // `in` must outlive this; `name` is used in errors. `piece_bytes` (at
  // least 1) is for tests: 1 ends a piece wherever one may end.
  TextLogPieces(std::istream* in, absl::string_view name,
                size_t piece_bytes = kPieceBytes);

  // Parses the next piece into *log (cleared first) and returns true, or
  // returns false at the end of the stream (nothing left to parse). A piece
  // of only comments and blank lines gives no records. After an error, call
  // no more.
  absl::StatusOr<bool> Next(pvemu::v1::TrapLog* log);

 private:
  // The last token seen at the top level (depth 0).
  enum class Last : uint8_t { kNothing, kCloser, kSeparator, kOther };

  // Scans the text read so far from scan_; true with *end when a piece ends
  // there (at or past piece_bytes_, or a closing bracket without an opening
  // one, which no parse gets past).
  bool Scan(size_t* end);
  // Appends up to one read's worth of the stream to text_.
  absl::Status Fill();
  // Parses text_[0, end) into *log and drops it from text_.
  absl::Status Parse(size_t end, pvemu::v1::TrapLog* log);

  std::istream* in_;
  std::string name_;
  size_t piece_bytes_;
  std::string text_;       // read, not yet parsed: the current piece and more
  size_t scan_ = 0;        // text_[0, scan_) is scanned
  int64_t first_line_ = 0;  // text_[0]'s line in the whole text, from 0
  bool eof_ = false;

  // The scanner's state at scan_: the tokenizer's (strings, # comments,
  // brackets) as far as it decides where top-level fields end.
  int64_t depth_ = 0;   // open brackets: {, < and [
  char quote_ = 0;      // inside a string opened by this quote
  bool escape_ = false;  // after a backslash in a string
  bool comment_ = false;
  Last last_ = Last::kNothing;
  // A line end after a top-level closing bracket, where a piece may end
  // unless the next token is ; or , (npos: none).
  size_t pending_ = std::string::npos;
};

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_TEXT_FORMAT_H_
