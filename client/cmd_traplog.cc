// Trap-log commands: import (host logs → trap log), replay (trap log →
// outcomes, compared with what the log expected), suggest (host logs → a
// draft domain policy).
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <map>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/offline.h"
#include "traplog/import.h"
#include "emulator/trap_convert.h"
#include "traplog/expectations.h"
#include "traplog/reader.h"
#include "traplog/writer.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "x86/msr_catalog.h"
#include "base/status_macros.h"
#include "pvemu/v1/service.grpc.pb.h"

namespace pvemu::client {
namespace {

void PrintImportSummary(const traplog::ImportStats& stats) {
  if (JsonOutput()) {
    JsonLine by_format;
    for (const auto& [format, n] : stats.by_format) by_format.Num(format, static_cast<double>(n));
    JsonLine()
        .Num("lines", static_cast<double>(stats.lines))
        .Num("traps", static_cast<double>(stats.traps))
        .Num("skipped", static_cast<double>(stats.skipped))
        .Num("malformed", static_cast<double>(stats.malformed))
        .Obj("by_format", by_format)
        .Print();
  } else {
    std::string formats;
    for (const auto& [format, n] : stats.by_format) absl::StrAppend(&formats, " ", format, "=", n);
    std::printf("%lld lines: %lld traps (%s), %lld skipped, %lld malformed\n",
                static_cast<long long>(stats.lines), static_cast<long long>(stats.traps),
                formats.empty() ? "none" : formats.substr(1).c_str(),
                static_cast<long long>(stats.skipped), static_cast<long long>(stats.malformed));
  }
}

// Imports every log through `sink`, reporting malformed lines on stderr.
absl::StatusOr<traplog::ImportStats> ImportAll(const Args& logs,
                                                const traplog::TrapSink& sink) {
  std::string format = absl::GetFlag(FLAGS_from);
  traplog::ImportStats total;
  for (const std::string& log : logs) {
    ASSIGN_OR_RETURN(traplog::ImportStats stats, traplog::ImportLogFile(format, log, sink));
    for (const traplog::MalformedLine& m : stats.malformed_lines) {
      std::fprintf(stderr, "%s:%lld: skipped a malformed trap line: %s\n", log.c_str(),
                   static_cast<long long>(m.line), m.reason.c_str());
    }
    traplog::MergeImportStats(stats, &total);
  }
  return total;
}

absl::Status Import(const Args& logs) {
  std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("import needs --out=FILE (.textproto or .traps)");
  ASSIGN_OR_RETURN(std::unique_ptr<traplog::TrapLogWriter> writer,
                   traplog::TrapLogWriter::Open(out));
  ASSIGN_OR_RETURN(traplog::ImportStats total,
                   ImportAll(logs, [&](v1::TrapRecord&& rec) { return writer->Append(rec); }));
  RETURN_IF_ERROR(writer->Close());
  PrintImportSummary(total);
  return absl::OkStatus();
}

struct ReplaySummary {
  uint64_t traps = 0, completed = 0, exceptions = 0, unhandled = 0, checked = 0, mismatches = 0;
  void Count(const v1::Outcome& o) {
    ++traps;
    if (o.kind() == v1::Outcome::COMPLETED) ++completed;
    if (o.kind() == v1::Outcome::EXCEPTION) ++exceptions;
    if (o.kind() == v1::Outcome::UNHANDLED) ++unhandled;
  }
};

// A progress line on a terminal's stderr, redrawn at most every 64Ki records.
class Progress {
 public:
  Progress() : on_(absl::GetFlag(FLAGS_progress) && isatty(STDERR_FILENO)) {}
  void Tick(const std::string& file, uint64_t n, uint64_t mismatches) {
    if (!on_ || (n & 0xffff) != 0) return;
    std::fprintf(stderr, "\r%s: %llu records, %llu mismatches", file.c_str(),
                 static_cast<unsigned long long>(n), static_cast<unsigned long long>(mismatches));
  }
  void Done() {
    if (on_) std::fprintf(stderr, "\n");
  }

 private:
  bool on_;
};

// Compares one outcome with its record's expectation and reports a mismatch.
void Check(const std::string& file, int64_t index, const v1::TrapRecord& rec,
           const v1::Outcome& outcome, ReplaySummary* summary) {
  summary->Count(outcome);
  if (!rec.has_expect()) return;
  ++summary->checked;
  std::string diff;
  absl::Status match = traplog::CheckExpectation(rec, outcome, &diff);
  if (match.ok()) return;
  ++summary->mismatches;
  std::string where = rec.source().empty() ? absl::StrCat(file, " record ", index)
                                           : absl::StrCat(file, " record ", index, " (", rec.source(), ")");
  if (JsonOutput()) {
    JsonLine()
        .Str("mismatch", where)
        .Str("diff", diff.empty() ? std::string(match.message()) : diff)
        .Str("detail", outcome.detail())
        .Print();
  } else {
    std::printf("MISMATCH %s: %s\n  %s\n", where.c_str(),
                (diff.empty() ? std::string(match.message()) : diff).c_str(),
                outcome.detail().c_str());
  }
}

absl::Status ReplayInProcess(const Args& logs, ReplaySummary* summary) {
  ASSIGN_OR_RETURN(Offline offline, OfflineFromFlags());
  auto session = offline.dispatcher->NewSession();
  v1::TrapRecord rec;
  v1::Outcome outcome;
  Progress progress;
  for (const std::string& log : logs) {
    ASSIGN_OR_RETURN(auto reader, traplog::TrapLogReader::Open(log));
    int64_t index = 0;
    while (true) {
      ASSIGN_OR_RETURN(bool more, reader->Next(&rec));
      if (!more) break;
      ++index;
      absl::StatusOr<emulator::Trap> trap = emulator::TrapFromProto(rec.trap());
      if (!trap.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(log, " record ", index, ": ", trap.status().message()));
      }
      emulator::Instruction insn;
      emulator::DecodeError error;
      emulator::Outcome out = session->Handle(*trap, &insn, &error);
      outcome.Clear();
      dispatch::FillOutcome(*trap, out, insn, error, session->generation(), &outcome);
      Check(log, index, rec, outcome, summary);
      progress.Tick(log, index, summary->mismatches);
    }
  }
  progress.Done();
  return absl::OkStatus();
}

// Through pvemud: one EmulateStream per log. A writer thread sends traps
// while this thread reads outcomes, with at most kWindow records in flight,
// so memory stays flat on any log size.
absl::Status ReplayThroughServer(const Args& logs, ReplaySummary* summary) {
  constexpr size_t kWindow = 4096;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, Connect());
  auto stub = v1::EmulatorService::NewStub(channel);
  Progress progress;
  for (const std::string& log : logs) {
    ASSIGN_OR_RETURN(auto reader, traplog::TrapLogReader::Open(log));
    grpc::ClientContext context;
    auto stream = stub->EmulateStream(&context);
    absl::Mutex mu;
    std::deque<v1::TrapRecord> in_flight;  // guarded by mu
    absl::Status read_status;              // written by the sender only
    std::thread sender([&] {
      v1::TrapRecord rec;
      while (true) {
        absl::StatusOr<bool> more = reader->Next(&rec);
        if (!more.ok() || !*more) {
          if (!more.ok()) read_status = more.status();
          break;
        }
        {
          absl::MutexLock lock(&mu);
          auto room = [&] { return in_flight.size() < kWindow; };
          mu.Await(absl::Condition(&room));
          in_flight.push_back(rec);
        }
        if (!stream->Write(rec.trap())) break;
      }
      stream->WritesDone();
    });
    v1::Outcome outcome;
    int64_t index = 0;
    while (stream->Read(&outcome)) {
      v1::TrapRecord rec;
      {
        absl::MutexLock lock(&mu);
        rec = std::move(in_flight.front());
        in_flight.pop_front();
      }
      ++index;
      Check(log, index, rec, outcome, summary);
      progress.Tick(log, index, summary->mismatches);
    }
    {
      // Unblock a sender waiting for room if the stream ended early.
      absl::MutexLock lock(&mu);
      in_flight.clear();
    }
    sender.join();
    absl::Status finished = FromGrpc(stream->Finish());
    if (!finished.ok() && !absl::IsUnavailable(finished)) {
      return absl::Status(finished.code(), absl::StrCat(log, ": ", finished.message()));
    }
    RETURN_IF_ERROR(finished);
    RETURN_IF_ERROR(read_status);
  }
  progress.Done();
  return absl::OkStatus();
}

// What suggest learns per (MSR, access) from the logs.
struct Seen {
  uint64_t count = 0;
  std::string first_source;
  std::map<std::string, uint64_t> outcomes;  // "GP", "0x0", "completed"
  uint64_t last_value = 0;
  bool has_value = false;
};

std::string Describe(const v1::TrapRecord& rec) {
  if (!rec.has_expect()) return "unknown";
  const v1::Expectation& e = rec.expect();
  if (e.kind() == v1::Outcome::EXCEPTION) {
    return absl::StrCat("#", e.has_vector() ? v1::Vector_Name(e.vector()) : "exception");
  }
  if (e.has_value()) return absl::StrCat("read ", HexString(e.value()));
  return "completed";
}

absl::Status Suggest(const Args& logs) {
  std::map<std::pair<uint32_t, bool>, Seen> seen;  // (msr, write)
  ASSIGN_OR_RETURN(traplog::ImportStats stats,
                   ImportAll(logs, [&](v1::TrapRecord&& rec) -> absl::Status {
                     const std::string& insn = rec.trap().insn();
                     if (insn.size() < 2 || insn[0] != 0x0f || (insn[1] != 0x32 && insn[1] != 0x30)) {
                       return absl::OkStatus();  // CPUID and others: no MSR rule
                     }
                     const bool write = insn[1] == 0x30;
                     Seen& s = seen[{static_cast<uint32_t>(rec.trap().regs().rcx()), write}];
                     if (s.count++ == 0) s.first_source = rec.source();
                     ++s.outcomes[Describe(rec)];
                     if (!write && rec.has_expect() && rec.expect().has_value()) {
                       s.last_value = rec.expect().value();
                       s.has_value = true;
                     }
                     return absl::OkStatus();
                   }));
  std::string domain = absl::GetFlag(FLAGS_domain);
  if (!JsonOutput()) {
    std::printf("# Drafted by pvemuctl suggest from %lld trap lines of %zu log(s).\n"
                "# Each rule reproduces what the host did; review before applying.\n"
                "domain {\n  domain: %s\n",
                static_cast<long long>(stats.traps), logs.size(),
                domain.empty() ? "1  # set the domain id" : domain.c_str());
  }
  // One rule per MSR, combining its read and write observations.
  std::map<uint32_t, std::pair<const Seen*, const Seen*>> by_msr;
  for (const auto& [key, s] : seen) {
    auto& slot = by_msr[key.first];
    (key.second ? slot.second : slot.first) = &s;
  }
  for (const auto& [msr, halves] : by_msr) {
    const auto& [read, write] = halves;
    std::string read_action, write_action, value;
    if (read != nullptr) {
      if (read->outcomes.count("#GP")) {
        read_action = "GP";
      } else if (read->has_value && read->last_value != 0) {
        read_action = "CONST";
        value = HexString(read->last_value);
      } else {
        read_action = "ZERO";
      }
    }
    if (write != nullptr) write_action = write->outcomes.count("#GP") ? "GP" : "IGNORE";
    absl::string_view name = x86::MsrName(msr);
    std::string target = name.empty() ? HexString(msr) : std::string(name);
    if (JsonOutput()) {
      JsonLine line;
      line.Hex("msr", msr).Str("name", name);
      if (read != nullptr) {
        line.Str("read", read_action).Num("reads", static_cast<double>(read->count))
            .Str("first_read", read->first_source);
      }
      if (write != nullptr) {
        line.Str("write", write_action).Num("writes", static_cast<double>(write->count))
            .Str("first_write", write->first_source);
      }
      if (!value.empty()) line.Str("value", value);
      line.Print();
      continue;
    }
    std::printf("  msr {\n");
    for (const Seen* s : {read, write}) {
      if (s == nullptr) continue;
      std::string seen_as;
      for (const auto& [what, n] : s->outcomes) absl::StrAppend(&seen_as, seen_as.empty() ? "" : ", ", what, " x", n);
      std::printf("    # %s %llu time(s), first at %s; host: %s\n", s == read ? "read" : "written",
                  static_cast<unsigned long long>(s->count), s->first_source.c_str(), seen_as.c_str());
    }
    std::printf("    msr: \"%s\"\n", target.c_str());
    if (!read_action.empty()) std::printf("    read: %s\n", read_action.c_str());
    if (!value.empty()) std::printf("    value: %s\n", value.c_str());
    if (!write_action.empty()) std::printf("    write: %s\n", write_action.c_str());
    std::printf("  }\n");
  }
  if (!JsonOutput()) std::printf("}\n");
  return absl::OkStatus();
}

}  // namespace

int RunImport(const Args& args) {
  if (args.empty()) return UsageError("import needs LOG... and --out=FILE");
  if (absl::GetFlag(FLAGS_out).empty()) return UsageError("import needs --out=FILE (.textproto or .traps)");
  absl::Status status = Import(args);
  return status.ok() ? kExitOk : Fail(status);
}

int RunReplay(const Args& args) {
  if (args.empty()) return UsageError("replay needs TRAPLOG...");
  ReplaySummary summary;
  absl::Status status = absl::GetFlag(FLAGS_server).empty()
                            ? ReplayInProcess(args, &summary)
                            : ReplayThroughServer(args, &summary);
  if (!status.ok()) return Fail(status);
  if (JsonOutput()) {
    JsonLine()
        .Num("traps", static_cast<double>(summary.traps))
        .Num("completed", static_cast<double>(summary.completed))
        .Num("exceptions", static_cast<double>(summary.exceptions))
        .Num("unhandled", static_cast<double>(summary.unhandled))
        .Num("checked", static_cast<double>(summary.checked))
        .Num("mismatches", static_cast<double>(summary.mismatches))
        .Print();
  } else {
    std::printf("%llu traps: %llu completed, %llu exceptions, %llu unhandled; "
                "%llu checked, %llu mismatches\n",
                static_cast<unsigned long long>(summary.traps),
                static_cast<unsigned long long>(summary.completed),
                static_cast<unsigned long long>(summary.exceptions),
                static_cast<unsigned long long>(summary.unhandled),
                static_cast<unsigned long long>(summary.checked),
                static_cast<unsigned long long>(summary.mismatches));
  }
  return summary.mismatches == 0 ? kExitOk : kExitInvalid;
}

int RunSuggest(const Args& args) {
  if (args.empty()) return UsageError("suggest needs LOG...");
  absl::Status status = Suggest(args);
  return status.ok() ? kExitOk : Fail(status);
}

}  // namespace pvemu::client
