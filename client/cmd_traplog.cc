// Trap-log commands: import (host logs → trap log), replay (trap log →
// outcomes, compared with what the log expected), suggest (host logs → a
// draft domain policy).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/cli.h"
#include "client/learn.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/offline.h"
#include "dispatch/replay.h"
#include "policy/suggest.h"
#include "traplog/import.h"
#include "emulator/trap_convert.h"
#include "traplog/expectations.h"
#include "traplog/reader.h"
#include "traplog/writer.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "x86/msr_catalog.h"
#include "base/status_macros.h"
#include "base/textproto.h"
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

using ReplaySummary = dispatch::ReplayTotals;

// A progress line on a terminal's stderr, redrawn now and then (every 64Ki
// records).
class Progress {
 public:
  Progress() : on_(absl::GetFlag(FLAGS_progress) && isatty(STDERR_FILENO)) {}
  void Draw(const std::string& file, int64_t n, uint64_t mismatches) {
    if (!on_) return;
    std::fprintf(stderr, "\r%s: %lld records, %llu mismatches", file.c_str(),
                 static_cast<long long>(n), static_cast<unsigned long long>(mismatches));
  }
  void Done() {
    if (on_) std::fprintf(stderr, "\n");
  }

 private:
  bool on_;
};

// "FILE record N" or "FILE record N (SOURCE)": where a mismatch is.
std::string RecordWhere(const std::string& file, int64_t index, const std::string& source) {
  return source.empty() ? absl::StrCat(file, " record ", index)
                        : absl::StrCat(file, " record ", index, " (", source, ")");
}

void PrintMismatch(const std::string& where, absl::string_view diff, const std::string& detail) {
  if (JsonOutput()) {
    JsonLine().Str("mismatch", where).Str("diff", std::string(diff)).Str("detail", detail).Print();
  } else {
    std::printf("MISMATCH %s: %s\n  %s\n", where.c_str(), std::string(diff).c_str(),
                detail.c_str());
  }
}

// Compares one outcome with its record's expectation and reports a mismatch.
void Check(const std::string& file, int64_t index, const v1::TrapRecord& rec,
           const v1::Outcome& outcome, ReplaySummary* summary) {
  summary->Count(static_cast<emulator::OutcomeKind>(outcome.kind()));
  if (traplog::ExpectedOutcomeFromProto(rec.expect()).empty()) return;  // as in process
  ++summary->checked;
  std::string diff;
  absl::Status match = traplog::CheckExpectation(rec, outcome, &diff);
  if (match.ok()) return;
  ++summary->mismatches;
  PrintMismatch(RecordWhere(file, index, rec.source()),
                diff.empty() ? match.message() : absl::string_view(diff), outcome.detail());
}

// --jobs: a number of threads, or 0 for one per CPU.
absl::StatusOr<int> JobsFromFlag() {
  const std::string flag = absl::GetFlag(FLAGS_jobs);
  int jobs = 0;
  if (!absl::SimpleAtoi(flag, &jobs) || jobs < 0 || jobs > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--jobs=", flag, ": give the number of threads to replay on (1 to 1024), or 0 for one "
        "per CPU"));
  }
  if (jobs == 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return jobs;
}

// In process, through the trap-path structs (TrapLogReader::NextTrapIn), on
// --jobs threads split by vCPU (dispatch/replay.h).
absl::Status ReplayInProcess(const Args& logs, ReplaySummary* summary) {
  ASSIGN_OR_RETURN(Offline offline, OfflineFromFlags());
  dispatch::ReplayOptions options;
  ASSIGN_OR_RETURN(options.jobs, JobsFromFlag());
  options.on_mismatch = [](const dispatch::ReplayMismatch& m) {
    v1::Outcome outcome;  // for its sentence: allocates, so only on a mismatch
    dispatch::FillOutcome(m.trap, m.outcome, m.insn, m.error, m.generation, &outcome);
    PrintMismatch(RecordWhere(m.log, m.record, m.source), m.verdict.message(), outcome.detail());
  };
  Progress progress;
  options.on_progress = [&progress](const std::string& log, int64_t records, uint64_t mismatches) {
    progress.Draw(log, records, mismatches);
  };
  absl::Status status = dispatch::ReplayLogs(*offline.dispatcher, logs, options, summary);
  progress.Done();
  return status;
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
      if ((index & 0xffff) == 0) progress.Draw(log, index, summary->mismatches);
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

// The MSR access a record shows, for the drafter; false for CPUID and the
// other instructions, which no MSR rule decides.
bool ToMsrAccess(v1::TrapRecord&& rec, policy::MsrAccess* access) {
  const std::string& insn = rec.trap().insn();
  if (insn.size() < 2 || insn[0] != 0x0f || (insn[1] != 0x32 && insn[1] != 0x30)) return false;
  access->domain = rec.trap().domain();
  access->msr = static_cast<uint32_t>(rec.trap().regs().rcx());
  access->write = insn[1] == 0x30;
  access->outcome = policy::MsrAccess::Outcome::kUnknown;
  access->vector.reset();
  access->value.reset();
  if (rec.has_expect()) {
    const v1::Expectation& expect = rec.expect();
    if (expect.kind() == v1::Outcome::EXCEPTION) {
      access->outcome = policy::MsrAccess::Outcome::kException;
      if (expect.has_vector()) access->vector = expect.vector();
    } else {
      access->outcome = policy::MsrAccess::Outcome::kCompleted;
    }
    if (expect.has_value()) access->value = expect.value();
  }
  access->source = std::move(*rec.mutable_source());
  return true;
}

void PrintSuggestionJson(const policy::DraftedRule& drafted) {
  const v1::MsrRule& rule = drafted.rule;
  JsonLine line;
  line.Num("domain", drafted.domain).Hex("msr", drafted.msr).Str("name", x86::MsrName(drafted.msr));
  if (drafted.reads.has_value()) {
    line.Str("read", v1::ReadAction::Action_Name(rule.read()))
        .Num("reads", static_cast<double>(drafted.reads->count))
        .Str("first_read", drafted.reads->first_source);
  }
  if (drafted.writes.has_value()) {
    line.Str("write", v1::WriteAction::Action_Name(rule.write()))
        .Num("writes", static_cast<double>(drafted.writes->count))
        .Str("first_write", drafted.writes->first_source);
  }
  if (rule.read() == v1::ReadAction::CONST) line.Str("value", HexString(rule.value()));
  line.Print();
}

absl::Status Suggest(const Args& logs) {
  std::optional<uint32_t> domain;
  if (std::string flag = absl::GetFlag(FLAGS_domain); !flag.empty()) {
    ASSIGN_OR_RETURN(domain, ParseNumber32(flag, "--domain"));
  }
  policy::PolicyDrafter drafter;
  policy::MsrAccess access;
  const auto add_msr = [&](v1::TrapRecord&& rec) {
    if (!ToMsrAccess(std::move(rec), &access)) return;
    if (domain.has_value()) access.domain = *domain;
    drafter.Add(access);
  };
  // Captures (a PVTRAPS header, or a .textproto trap log) and host logs,
  // mixed freely: a capture's relaxed records are learned evidence.
  policy::LearnedDrafter learned;
  Args host_logs;
  uint64_t capture_records = 0;
  for (const std::string& log : logs) {
    if (!IsTrapLog(log)) {
      host_logs.push_back(log);
      continue;
    }
    RETURN_IF_ERROR(ReadCapture(log, domain, &learned, [&](v1::TrapRecord&& rec) {
      ++capture_records;
      add_msr(std::move(rec));
    }));
  }
  ASSIGN_OR_RETURN(traplog::ImportStats stats,
                   ImportAll(host_logs, [&](v1::TrapRecord&& rec) -> absl::Status {
                     add_msr(std::move(rec));
                     return absl::OkStatus();
                   }));
  if (!learned.empty()) {
    // Learned evidence says exactly what a domain needs beyond its policy:
    // the draft is that, and not a copy of what the policy already allowed.
    PrintLearnedDraft(
        learned.Draft(),
        absl::StrCat("# Drafted by pvemuctl suggest from ", learned.accesses(),
                     " distinct accesses learning domains made that ENFORCE would fault\n"
                     "# (the relaxed records of ", logs.size() - host_logs.size(),
                     " capture(s)); accesses the policy allowed need no rule.\n"
                     "# Put it after the policy it was learned under (a domain with a layer of "
                     "its own there:\n# add these rules to that layer), then switch the domain "
                     "to ENFORCE.\n"));
    return absl::OkStatus();
  }
  if (JsonOutput()) {
    for (const policy::DraftedRule& drafted : drafter.Rules()) PrintSuggestionJson(drafted);
    return absl::OkStatus();
  }
  std::printf("# Drafted by pvemuctl suggest from %lld trap lines of %zu log(s).\n"
              "# Each rule reproduces what the host did; review before applying.\n%s",
              static_cast<long long>(stats.traps + capture_records), logs.size(),
              domain.has_value() ? ""
                                 : "# Domains are as the logs name them (KVM: the VMM's pid); "
                                   "--domain=N drafts them all for domain N.\n");
  std::fputs(ToTextProto(drafter.Draft()).c_str(), stdout);
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
  if (absl::GetFlag(FLAGS_changes)) return RunReplayChanges(args);
  if (args.empty()) return UsageError("replay needs TRAPLOG...");
  if (!absl::GetFlag(FLAGS_server).empty() && absl::GetFlag(FLAGS_jobs) != "1") {
    return UsageError(
        "replay --jobs splits a replay in process; with --server pvemud decides each trap: drop "
        "--jobs");
  }
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
  if (!absl::GetFlag(FLAGS_server).empty()) {
    if (!args.empty()) return UsageError("suggest --server drafts from pvemud alone: drop LOG...");
    return RunSuggestFromServer();
  }
  if (args.empty()) return UsageError("suggest needs LOG... (or --server=ADDR)");
  absl::Status status = Suggest(args);
  return status.ok() ? kExitOk : Fail(status);
}

}  // namespace pvemu::client
