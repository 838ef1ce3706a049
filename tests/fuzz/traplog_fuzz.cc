// Fuzzes the trap-log readers through in-memory streams: the input is read as
// a .traps file (as is, and behind each version's magic) and as a
// .textproto, with Next() and with NextTrap(), which must agree. Whatever
// records come out must be written and read back identical (and a PVTRAPS2
// file that reads cleanly must come back byte for byte), the writer must
// refuse exactly what PVTRAPS2 cannot hold, and CheckExpectation must answer
// for each record, the struct form as the record form does.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/textproto.h"
#include "emulator/trap_convert.h"
#include "traplog/encoding.h"
#include "traplog/expectations.h"
#include "traplog/reader.h"
#include "traplog/text_format.h"
#include "traplog/traps_format.h"
#include "traplog/writer.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace {

namespace v1 = ::pvemu::v1;
using ::pvemu::traplog::CheckExpectation;
using ::pvemu::traplog::ExpectedOutcome;
using ::pvemu::traplog::ExpectedOutcomeFromProto;
using ::pvemu::traplog::kTrapsMagic;
using ::pvemu::traplog::kTrapsMagicV1;
using ::pvemu::emulator::Outcome;
using ::pvemu::emulator::OutcomeKind;
using ::pvemu::emulator::Trap;
using ::pvemu::emulator::TrapFromProto;
using ::pvemu::traplog::TrapLogEncoding;
using ::pvemu::traplog::TrapLogReader;
using ::pvemu::traplog::TrapLogWriter;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "traplog_fuzz: %s\n", what);
    std::abort();
  }
}

void IgnoreLog(google::protobuf::LogLevel, const char*, int,
               const std::string&) {}
const bool kQuiet = (google::protobuf::SetLogHandler(IgnoreLog), true);

struct Records {
  std::vector<v1::TrapRecord> records;
  absl::Status end;  // OK at a clean end
};

Records ReadAll(const std::string& bytes, TrapLogEncoding enc) {
  Records out;
  std::istringstream in(bytes);
  auto reader = TrapLogReader::ForStream(&in, enc, "fuzz");
  if (!reader.ok()) {
    Check(!reader.status().message().empty(), "error without a message");
    out.end = reader.status();
    return out;
  }
  v1::TrapRecord rec;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&rec);
    if (!more.ok()) {
      // Sticky: the same error again, from either call.
      absl::StatusOr<bool> again = (*reader)->Next(&rec);
      Check(!again.ok() && again.status() == more.status(), "error not sticky");
      Trap trap;
      absl::StatusOr<bool> fast = (*reader)->NextTrap(&trap, nullptr);
      Check(!fast.ok() && fast.status() == more.status(),
            "error not sticky for NextTrap");
      out.end = more.status();
      break;
    }
    if (!*more) break;
    out.records.push_back(rec);
  }
  Check((*reader)->records_read() == static_cast<int64_t>(out.records.size()),
        "records_read miscounts");
  return out;
}

bool SameTrap(const Trap& a, const Trap& b) {
  return a.domain == b.domain && a.vcpu == b.vcpu && a.mode == b.mode &&
         a.cpl == b.cpl && a.insn_len == b.insn_len &&
         std::memcmp(a.insn, b.insn, sizeof(a.insn)) == 0 &&
         std::memcmp(a.regs.gpr, b.regs.gpr, sizeof(a.regs.gpr)) == 0 &&
         a.regs.rip == b.regs.rip && a.regs.rflags == b.regs.rflags &&
         a.host_tsc == b.host_tsc;
}

// NextTrap over the same bytes must give TrapFromProto and
// ExpectedOutcomeFromProto of what Next() gave, up to the first record whose
// trap does not convert (an error there), else up to Next()'s own end.
void CheckNextTrap(const std::string& bytes, TrapLogEncoding enc,
                   const Records& by_next) {
  std::istringstream in(bytes);
  auto reader = TrapLogReader::ForStream(&in, enc, "fuzz");
  if (!reader.ok()) {
    Check(reader.status() == by_next.end, "Open differs");
    return;
  }
  size_t i = 0;
  while (true) {
    Trap trap;
    ExpectedOutcome expect;
    absl::StatusOr<bool> more = (*reader)->NextTrap(&trap, &expect);
    if (i < by_next.records.size()) {
      const v1::TrapRecord& rec = by_next.records[i];
      absl::StatusOr<Trap> want = TrapFromProto(rec.trap());
      if (!want.ok()) {
        Check(more.status().code() == absl::StatusCode::kInvalidArgument,
              "NextTrap took a trap TrapFromProto refuses");
        return;
      }
      Check(more.ok() && *more, "NextTrap stopped before Next did");
      Check(SameTrap(trap, *want), "NextTrap's trap differs");
      Check(expect == ExpectedOutcomeFromProto(rec.expect()),
            "NextTrap's expectation differs");
      ++i;
      continue;
    }
    Check(more.status() == by_next.end, "NextTrap ends differently");
    Check(!more.ok() || !*more, "NextTrap went past Next's end");
    return;
  }
}

// Whether PVTRAPS2 can hold `r`: what the writer must accept (records from a
// reader have UTF-8 strings already).
bool V2CanHold(const v1::TrapRecord& r) {
  const v1::Trap& t = r.trap();
  return t.insn().size() <= 15 && t.cpl() <= 3 &&
         v1::CpuMode_IsValid(t.mode()) &&
         (!r.has_trap() || TrapFromProto(t).ok()) &&
         v1::Outcome_Kind_IsValid(r.expect().kind()) &&
         (!r.expect().has_vector() ||
          v1::Vector_IsValid(r.expect().vector())) &&
         216 + r.source().size() + r.note().size() <=
             pvemu::traplog::kMaxTrapRecordBytes;
}

// Writes what `enc` can hold of `records` and reads it back identical.
// Returns the bytes written.
std::string RoundTrip(const std::vector<v1::TrapRecord>& records,
                      TrapLogEncoding enc) {
  std::stringstream buf;
  auto writer = TrapLogWriter::ForStream(&buf, enc, "mem");
  std::vector<v1::TrapRecord> kept;
  for (const v1::TrapRecord& r : records) {
    absl::Status s = writer->Append(r);
    if (enc == TrapLogEncoding::kText) {
      Check(s.ok(), "text writer refused a record the reader accepted");
    } else {
      Check(s.ok() == V2CanHold(r),
            "binary writer refuses other than what PVTRAPS2 cannot hold");
      Check(s.ok() || s.code() == absl::StatusCode::kInvalidArgument,
            "binary writer refusal is not InvalidArgument");
    }
    if (!s.ok()) continue;
    kept.push_back(r);
    // Neither encoding keeps fields this schema does not know.
    kept.back().DiscardUnknownFields();
  }
  Check(writer->Close().ok(), "writer close");
  Records back = ReadAll(buf.str(), enc);
  Check(back.end.ok(), "what the writer wrote does not read back");
  Check(back.records.size() == kept.size(),
        "round trip changed the record count");
  for (size_t i = 0; i < back.records.size(); ++i) {
    Check(google::protobuf::util::MessageDifferencer::Equals(kept[i],
                                                             back.records[i]),
          "round trip changed a record");
  }
  CheckNextTrap(buf.str(), enc, back);
  return buf.str();
}

Outcome StructOutcome(const v1::Outcome& o) {
  Outcome out;
  out.kind = static_cast<OutcomeKind>(o.kind());
  out.vector = static_cast<pvemu::emulator::Vector>(o.exception().vector());
  // The registers an instruction can write (EAX..EDX), as the message has
  // them after it, and RIP and RFLAGS.
  pvemu::emulator::Regs after;
  pvemu::emulator::RegsFromProto(o.regs(), &after);
  for (pvemu::emulator::Gpr r : {pvemu::emulator::kRax, pvemu::emulator::kRbx,
                                 pvemu::emulator::kRcx, pvemu::emulator::kRdx}) {
    out.WriteGpr(r, after.gpr[r]);
  }
  out.rip = after.rip;
  out.rflags = after.rflags;
  return out;
}

void CheckAll(const std::vector<v1::TrapRecord>& records) {
  for (const v1::TrapRecord& r : records) {
    // The registers at the trap as a completed outcome, and a #GP.
    v1::Outcome done;
    done.set_kind(v1::Outcome::COMPLETED);
    *done.mutable_regs() = r.trap().regs();
    v1::Outcome fault;
    fault.set_kind(v1::Outcome::EXCEPTION);
    fault.mutable_exception()->set_vector(v1::GP);
    absl::StatusOr<Trap> trap = TrapFromProto(r.trap());
    for (const v1::Outcome* o : {&done, &fault}) {
      std::string diff;
      absl::Status s = CheckExpectation(r, *o, &diff);
      if (s.ok()) Check(diff.empty(), "diff on a match");
      if (s.code() == absl::StatusCode::kFailedPrecondition) {
        Check(!diff.empty() && diff == s.message(),
              "mismatch without its diff");
      }
      // The struct form: the same verdict and message (for a mode this
      // schema names; the record form reads others as 32-bit).
      if (trap.ok() && v1::CpuMode_IsValid(r.trap().mode())) {
        absl::Status fast = CheckExpectation(
            ExpectedOutcomeFromProto(r.expect()), *trap, StructOutcome(*o));
        Check(fast == s, "struct CheckExpectation differs");
      }
      s = CheckExpectation(r.expect(), *o, &diff);
      (void)s;
    }
  }
}

}  // namespace

// The text reader parses in pieces (TextLogPieces): at every piece size,
// the records and the first error must be what one parse of the whole text
// gives. `piece` is small so that pieces end wherever they may.
void CheckPieces(const std::string& text, size_t piece) {
  v1::TrapLog whole;
  const absl::Status whole_status = ::pvemu::ParseTextProto(text, "fuzz.textproto", &whole);
  std::istringstream in(text);
  ::pvemu::traplog::TextLogPieces pieces(&in, "fuzz.textproto", piece);
  v1::TrapLog part;
  int at = 0;
  absl::StatusOr<bool> more = true;
  while (true) {
    more = pieces.Next(&part);
    if (!more.ok() || !*more) break;
    for (const v1::TrapRecord& r : part.record()) {
      Check(at < whole.record_size(), "pieces gave more records than the whole text");
      Check(google::protobuf::util::MessageDifferencer::Equals(r, whole.record(at++)),
            "a piece's record differs from the whole text's");
    }
  }
  if (whole_status.ok()) {
    Check(more.ok(), "pieces refused a text that parses whole");
    Check(at == whole.record_size(), "pieces gave fewer records than the whole text");
  } else {
    Check(!more.ok(), "pieces accepted a text that does not parse whole");
    // The first error, as one parse names it; one parse of the whole goes on
    // to name later ones too (a control character, then the next field), a
    // piece stops with its own.
    const auto first_line = [](absl::string_view m) { return m.substr(0, m.find('\n')); };
    if (first_line(more.status().message()) != first_line(whole_status.message())) {
      std::fprintf(stderr, "whole: %s\npieces: %s\n", std::string(whole_status.message()).c_str(),
                   std::string(more.status().message()).c_str());
      Check(false, "pieces and the whole text name different errors");
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kQuiet;
  const std::string input(reinterpret_cast<const char*>(data), size);
  // As binary: also behind each magic, so the fuzzer need not find them.
  for (const std::string& bytes : {input, std::string(kTrapsMagicV1) + input,
                                   std::string(kTrapsMagic) + input}) {
    Records read = ReadAll(bytes, TrapLogEncoding::kBinary);
    CheckNextTrap(bytes, TrapLogEncoding::kBinary, read);
    const std::string written =
        RoundTrip(read.records, TrapLogEncoding::kBinary);
    // Each PVTRAPS2 record has one encoding: a clean file of records the
    // writer accepts comes back byte for byte.
    bool all_held = true;
    for (const v1::TrapRecord& r : read.records) all_held &= V2CanHold(r);
    if (absl::StartsWith(bytes, kTrapsMagic) && read.end.ok() && all_held) {
      Check(written == bytes, "a clean PVTRAPS2 file was not rewritten as is");
    }
    RoundTrip(read.records, TrapLogEncoding::kText);
    CheckAll(read.records);
  }
  if (size <= 64 * 1024) {
    Records read = ReadAll(input, TrapLogEncoding::kText);
    CheckNextTrap(input, TrapLogEncoding::kText, read);
    RoundTrip(read.records, TrapLogEncoding::kBinary);
    CheckAll(read.records);
    CheckPieces(input, 1 + (size > 0 ? data[0] % 64 : 0));
  }
  return 0;
}
