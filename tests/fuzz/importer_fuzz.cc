// Fuzzes the log importers: the input is a log, read in every format. Checks
// the stats add up, every record is one the .traps writer and reader carry
// unchanged (valid UTF-8 strings, bounded size), and nothing crashes.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "traplog/import.h"
#include "traplog/encoding.h"
#include "traplog/reader.h"
#include "traplog/writer.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace {

namespace v1 = ::pvemu::v1;
using ::pvemu::traplog::ImportLog;
using ::pvemu::traplog::ImportStats;
using ::pvemu::traplog::TrapLogEncoding;
using ::pvemu::traplog::TrapLogReader;
using ::pvemu::traplog::TrapLogWriter;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "importer_fuzz: %s\n", what);
    std::abort();
  }
}

// protobuf logs every invalid-UTF-8 parse; that noise slows fuzzing down.
void IgnoreLog(google::protobuf::LogLevel, const char*, int,
               const std::string&) {}
const bool kQuiet = (google::protobuf::SetLogHandler(IgnoreLog), true);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kQuiet;
  const std::string input(reinterpret_cast<const char*>(data), size);
  for (const char* format : {"auto", "kvm-dmesg", "xen-console", "ftrace"}) {
    std::istringstream in(input);
    std::vector<v1::TrapRecord> records;
    absl::StatusOr<ImportStats> stats =
        ImportLog(format, in, "fuzz.log", [&](v1::TrapRecord&& r) {
          records.push_back(std::move(r));
          return absl::OkStatus();
        });
    Check(stats.ok(), "ImportLog failed on an in-memory stream");
    Check(stats->lines == stats->traps + stats->skipped + stats->malformed,
          "lines != traps + skipped + malformed");
    Check(stats->traps == static_cast<int64_t>(records.size()),
          "traps != records handed to the sink");
    Check(
        stats->malformed_lines.size() <= pvemu::traplog::kMaxMalformedReported,
        "malformed details not capped");
    int64_t by_format = 0;
    for (const auto& [name, n] : stats->by_format) by_format += n;
    Check(by_format == stats->traps, "by_format does not add up to traps");

    // Every record survives the binary trap-log format unchanged.
    std::stringstream buf;
    auto writer =
        TrapLogWriter::ForStream(&buf, TrapLogEncoding::kBinary, "mem");
    for (const v1::TrapRecord& r : records) {
      Check(!r.source().empty() && !r.trap().insn().empty(),
            "record without source/insn");
      Check(writer->Append(r).ok(), "writer refused an imported record");
    }
    Check(writer->Close().ok(), "writer close");
    auto reader =
        TrapLogReader::ForStream(&buf, TrapLogEncoding::kBinary, "mem");
    Check(reader.ok(), "reader open");
    v1::TrapRecord back;
    for (const v1::TrapRecord& r : records) {
      absl::StatusOr<bool> more = (*reader)->Next(&back);
      Check(more.ok() && *more, "record lost in the round trip");
      Check(google::protobuf::util::MessageDifferencer::Equals(r, back),
            "record changed in the round trip");
    }
    absl::StatusOr<bool> end = (*reader)->Next(&back);
    Check(end.ok() && !*end, "extra record after the round trip");
  }
  return 0;
}
