// Fuzzes the trap-log readers through in-memory streams: the input is read as
// a .traps file and as a .textproto. Whatever records come out must be
// written and read back identical, and CheckExpectation must answer for each.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "emulator/traplog.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace {

namespace v1 = ::pvemu::v1;
using ::pvemu::emulator::CheckExpectation;
using ::pvemu::emulator::TrapLogEncoding;
using ::pvemu::emulator::TrapLogReader;
using ::pvemu::emulator::TrapLogWriter;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "traplog_fuzz: %s\n", what);
    std::abort();
  }
}

void IgnoreLog(google::protobuf::LogLevel, const char*, int,
               const std::string&) {}
const bool kQuiet = (google::protobuf::SetLogHandler(IgnoreLog), true);

std::vector<v1::TrapRecord> ReadAll(const std::string& bytes,
                                    TrapLogEncoding enc) {
  std::vector<v1::TrapRecord> out;
  std::istringstream in(bytes);
  auto reader = TrapLogReader::ForStream(&in, enc, "fuzz");
  if (!reader.ok()) {
    Check(!reader.status().message().empty(), "error without a message");
    return out;
  }
  v1::TrapRecord rec;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&rec);
    if (!more.ok()) {
      // Sticky: the same error again.
      absl::StatusOr<bool> again = (*reader)->Next(&rec);
      Check(!again.ok() && again.status() == more.status(), "error not sticky");
      break;
    }
    if (!*more) break;
    out.push_back(rec);
  }
  Check((*reader)->records_read() == static_cast<int64_t>(out.size()),
        "records_read miscounts");
  return out;
}

void RoundTrip(const std::vector<v1::TrapRecord>& records,
               TrapLogEncoding enc) {
  std::stringstream buf;
  auto writer = TrapLogWriter::ForStream(&buf, enc, "mem");
  for (const v1::TrapRecord& r : records) {
    Check(writer->Append(r).ok(),
          "writer refused a record the reader accepted");
  }
  Check(writer->Close().ok(), "writer close");
  std::vector<v1::TrapRecord> back = ReadAll(buf.str(), enc);
  Check(back.size() == records.size(), "round trip changed the record count");
  for (size_t i = 0; i < back.size(); ++i) {
    Check(
        google::protobuf::util::MessageDifferencer::Equals(records[i], back[i]),
        "round trip changed a record");
  }
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
    for (const v1::Outcome* o : {&done, &fault}) {
      std::string diff;
      absl::Status s = CheckExpectation(r, *o, &diff);
      if (s.ok()) Check(diff.empty(), "diff on a match");
      if (s.code() == absl::StatusCode::kFailedPrecondition) {
        Check(!diff.empty() && diff == s.message(),
              "mismatch without its diff");
      }
      s = CheckExpectation(r.expect(), *o, &diff);
      (void)s;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kQuiet;
  const std::string input(reinterpret_cast<const char*>(data), size);
  // As binary: also with the magic prepended, so the fuzzer need not find it.
  for (const std::string& bytes : {input, std::string("PVTRAPS1") + input}) {
    std::vector<v1::TrapRecord> records =
        ReadAll(bytes, TrapLogEncoding::kBinary);
    RoundTrip(records, TrapLogEncoding::kBinary);
    // Text cannot carry fields this schema does not know; the writer drops
    // them.
    for (v1::TrapRecord& r : records) r.DiscardUnknownFields();
    RoundTrip(records, TrapLogEncoding::kText);
    CheckAll(records);
  }
  if (size <= 64 * 1024) {
    std::vector<v1::TrapRecord> records =
        ReadAll(input, TrapLogEncoding::kText);
    RoundTrip(records, TrapLogEncoding::kBinary);
    CheckAll(records);
  }
  return 0;
}
