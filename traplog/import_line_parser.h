// Inside the importers (import.h): the interface each log family's line
// parser implements (import_kvm.cc, import_xen.cc, import_ftrace.cc), and
// what they share: tokenising helpers and the builders of the records they
// make. Not for use outside traplog/.
#ifndef PVEMU_TRAPLOG_IMPORT_LINE_PARSER_H_
#define PVEMU_TRAPLOG_IMPORT_LINE_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::traplog::import_internal {

// What a parser made of one line.
enum class Verdict { kSkip, kTrap, kMalformed };

// One log family's parser. It sees the lines of one log in order (ftrace's
// keeps per-task state across them); the driver (import.cc) has trimmed each
// and dropped blanks and '#' comments.
class LineParser {
 public:
  explicit LineParser(absl::string_view format) : format_(format) {}
  virtual ~LineParser() = default;

  // The family's name in import.h (kImportFormatKvm, ...).
  absl::string_view format() const { return format_; }

  // For format "auto": a cheap test whether `line` may be this family's.
  virtual bool Claims(absl::string_view line) const = 0;

  // kTrap: *rec (empty on entry) holds the trap and what the host did;
  // kMalformed: *why says what is wrong; kSkip: not a trap line.
  virtual Verdict Parse(absl::string_view line, pvemu::v1::TrapRecord* rec,
                        std::string* why) = 0;

 private:
  absl::string_view format_;
};

// The LineParser of a family whose lines parse on their own, from its two
// functions (KVM and Xen; ftrace keeps state across lines in its own class).
class StatelessLineParser final : public LineParser {
 public:
  using ClaimsFn = bool (*)(absl::string_view line);
  using ParseFn = Verdict (*)(absl::string_view line,
                              pvemu::v1::TrapRecord* rec, std::string* why);

  StatelessLineParser(absl::string_view format, ClaimsFn claims, ParseFn parse)
      : LineParser(format), claims_(claims), parse_(parse) {}

  bool Claims(absl::string_view line) const override { return claims_(line); }
  Verdict Parse(absl::string_view line, pvemu::v1::TrapRecord* rec,
                std::string* why) override {
    return parse_(line, rec, why);
  }

 private:
  ClaimsFn claims_;
  ParseFn parse_;
};

std::unique_ptr<LineParser> NewKvmDmesgParser();    // import_kvm.cc
std::unique_ptr<LineParser> NewXenConsoleParser();  // import_xen.cc
std::unique_ptr<LineParser> NewFtraceParser();      // import_ftrace.cc

// ---------------------------------------------------------------------------
// Tokenising helpers. All take the remaining text by pointer and advance it
// only on success.

bool IsDigit(char c);
bool IsWordChar(char c);  // letters, digits, '_'
void SkipSpaces(absl::string_view* s);

// A hex number with optional "0x"; at most 64 bits of significant digits and
// not glued to a following letter or digit ("0x64g" is not a number).
bool ConsumeHex(absl::string_view* s, uint64_t* value);
bool ConsumeHex32(absl::string_view* s, uint32_t* value);
// A decimal number of at most 18 digits.
bool ConsumeDec(absl::string_view* s, uint64_t* value);
bool ConsumeDec32(absl::string_view* s, uint32_t* value);

// "LABEL VALUE": `label`, blanks, then a hex value as `consume` reads it
// (ConsumeHex unless given): "= 0x..." and "at 0x..." in ftrace's events,
// "val 0x...", "from VALUE" and "to VALUE" (ConsumeXenValue) in Xen's.
bool ConsumeLabeled(
    absl::string_view* s, absl::string_view label, uint64_t* value,
    bool (*consume)(absl::string_view*, uint64_t*) = &ConsumeHex);

// Finds `word` in `s` and returns the text after it in *rest (and where
// `word` starts in *at).
bool After(absl::string_view s, absl::string_view word, absl::string_view* rest,
           size_t* at = nullptr);

// ---------------------------------------------------------------------------
// Record builders (the trap's fields are described in import.h).

// What a line says about the guest that trapped.
struct Context {
  uint32_t domain = 0;
  uint32_t vcpu = 0;
  bool has_rip = false;
  uint64_t rip = 0;
};

void InitTrap(const Context& ctx, absl::string_view insn,
              pvemu::v1::TrapRecord* rec);
void MakeRdmsr(const Context& ctx, uint32_t msr, pvemu::v1::TrapRecord* rec);
void MakeWrmsr(const Context& ctx, uint32_t msr, uint64_t value,
               pvemu::v1::TrapRecord* rec);
void MakeCpuid(const Context& ctx, uint32_t leaf, uint32_t subleaf,
               pvemu::v1::TrapRecord* rec);

void ExpectGp(pvemu::v1::TrapRecord* rec);
void ExpectCompleted(pvemu::v1::TrapRecord* rec);
// COMPLETED, reading `value`.
void ExpectRead(uint64_t value, pvemu::v1::TrapRecord* rec);

}  // namespace pvemu::traplog::import_internal

#endif  // PVEMU_TRAPLOG_IMPORT_LINE_PARSER_H_
