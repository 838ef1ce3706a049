// pvemuctl top: a live view, like kvm_stat or top, of the MSRs guests touch.
// Each refresh takes GetStats --msrs, subtracts the previous sample for the
// accesses per second, and names the rule that decides each (domain, MSR)
// through the Explain RPC (cached per policy generation).
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/flags.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "pvemu/v1/service.grpc.pb.h"

namespace pvemu::client {
namespace {

// (domain, MSR); "other" rows use values no real key has.
using RowKey = std::pair<uint64_t, uint64_t>;
constexpr uint64_t kOther = uint64_t{1} << 32;

struct Sample {
  std::map<RowKey, v1::MsrStats> rows;
  uint64_t generation = 0;
  absl::Time when;
};

struct Row {
  RowKey key;
  const v1::MsrStats* stats;
  double rate;
  std::string action;
  std::string rule;
};

class Top {
 public:
  explicit Top(std::shared_ptr<grpc::Channel> channel, std::optional<uint32_t> domain)
      : emulator_(v1::EmulatorService::NewStub(channel)),
        policy_(v1::PolicyService::NewStub(channel)),
        domain_(domain) {}

  absl::StatusOr<Sample> Take() {
    v1::StatsRequest request;
    request.set_msrs(true);
    if (domain_.has_value()) request.set_domain(*domain_);
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::StatsResponse response;
    RETURN_IF_ERROR(FromGrpc(emulator_->GetStats(&context, request, &response)));
    Sample sample;
    sample.when = absl::Now();
    sample.generation = response.generation();
    for (const v1::MsrStats& m : response.msrs()) {
      RowKey key{m.domain_other() ? kOther : m.domain(), m.msr_other() ? kOther : m.msr()};
      sample.rows[key] = m;
    }
    return sample;
  }

  // The rows of `now`, sorted by accesses per second, then count.
  absl::StatusOr<std::vector<Row>> Rows(const Sample& before, const Sample& now) {
    if (now.generation != cached_generation_) {
      rules_.clear();
      cached_generation_ = now.generation;
    }
    const double seconds = std::max(absl::ToDoubleSeconds(now.when - before.when), 1e-3);
    std::vector<Row> rows;
    for (const auto& [key, m] : now.rows) {
      Row row{key, &m, 0, "", ""};
      uint64_t earlier = 0;
      if (auto it = before.rows.find(key); it != before.rows.end()) {
        earlier = it->second.reads() + it->second.writes();
      }
      const uint64_t total = m.reads() + m.writes();
      row.rate = total >= earlier ? static_cast<double>(total - earlier) / seconds : 0;
      row.action = Actions(m);
      ASSIGN_OR_RETURN(row.rule, Rule(key, m));
      rows.push_back(std::move(row));
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      const uint64_t na = a.stats->reads() + a.stats->writes();
      const uint64_t nb = b.stats->reads() + b.stats->writes();
      return std::tie(b.rate, nb, a.key) < std::tie(a.rate, na, b.key);
    });
    return rows;
  }

 private:
  // The action per access, by most accesses: "ZERO", or "r:ZERO w:GP" when
  // reads and writes differ.
  static std::string Actions(const v1::MsrStats& m) {
    std::string best[2];
    uint64_t most[2] = {0, 0};
    for (const v1::MsrStats::ActionCount& a : m.actions()) {
      const int w = a.access() == "write";
      if (a.count() > most[w]) {
        most[w] = a.count();
        best[w] = a.action();
      }
    }
    if (best[0].empty() || best[1].empty() || best[0] == best[1]) {
      return best[0].empty() ? best[1] : best[0];
    }
    return absl::StrCat("r:", best[0], " w:", best[1]);
  }

  // "FILE:LINE (layer)" of the rule deciding each access the row saw.
  absl::StatusOr<std::string> Rule(RowKey key, const v1::MsrStats& m) {
    if (key.first == kOther || key.second == kOther) return std::string("-");
    std::string access[2];
    for (int w = 0; w < 2; ++w) {
      if ((w ? m.writes() : m.reads()) == 0) continue;
      auto [it, fresh] = rules_.try_emplace(std::tuple(key.first, key.second, w));
      if (fresh) {
        v1::ExplainRequest request;
        request.set_domain(static_cast<uint32_t>(key.first));
        request.set_msr(HexString(key.second));
        if (w) request.set_write_value(0);
        grpc::ClientContext context;
        SetDeadline(&context);
        v1::ExplainResponse response;
        absl::Status status = FromGrpc(policy_->Explain(&context, request, &response));
        if (!status.ok()) {
          rules_.erase(it);
          return status;
        }
        it->second = response.source().empty()
                         ? response.layer()
                         : absl::StrCat(response.source(), " (", response.layer(), ")");
      }
      access[w] = it->second;
    }
    if (access[0].empty() || access[1].empty() || access[0] == access[1]) {
      return access[0].empty() ? access[1] : access[0];
    }
    return absl::StrCat("r:", access[0], " w:", access[1]);
  }

  std::unique_ptr<v1::EmulatorService::Stub> emulator_;
  std::unique_ptr<v1::PolicyService::Stub> policy_;
  std::optional<uint32_t> domain_;
  uint64_t cached_generation_ = ~uint64_t{0};
  std::map<std::tuple<uint64_t, uint64_t, int>, std::string> rules_;
};

std::string KeyText(uint64_t v, bool hex) {
  if (v == kOther) return "other";
  return hex ? HexString(v) : absl::StrCat(v);
}

void PrintJson(const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    JsonLine line;
    if (r.key.first == kOther) {
      line.Str("domain", "other");
    } else {
      line.Num("domain", static_cast<double>(r.key.first));
    }
    line.Str("msr", KeyText(r.key.second, true))
        .Str("name", r.stats->name())
        .Num("rate", r.rate)
        .Num("reads", static_cast<double>(r.stats->reads()))
        .Num("writes", static_cast<double>(r.stats->writes()))
        .Str("action", r.action)
        .Str("rule", r.rule)
        .Print();
  }
}

// The table; at most `max_rows` rows (0: all).
void PrintTable(const std::vector<Row>& rows, size_t max_rows) {
  std::printf("%-7s %-11s %-28s %9s %10s %10s  %-16s %s\n", "DOMAIN", "MSR", "NAME", "ACC/S",
              "READS", "WRITES", "ACTION", "RULE");
  size_t shown = 0;
  for (const Row& r : rows) {
    if (max_rows != 0 && shown++ >= max_rows) break;
    std::printf("%-7s %-11s %-28s %9.1f %10llu %10llu  %-16s %s\n",
                KeyText(r.key.first, false).c_str(), KeyText(r.key.second, true).c_str(),
                r.stats->name().empty() ? "-" : r.stats->name().c_str(), r.rate,
                static_cast<unsigned long long>(r.stats->reads()),
                static_cast<unsigned long long>(r.stats->writes()), r.action.c_str(),
                r.rule.c_str());
  }
}

// The terminal as it was before raw mode, for the exit paths.
struct termios saved_termios;
bool raw_mode = false;

void RestoreTerminal() {
  if (raw_mode) {
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
    raw_mode = false;
  }
}

// SIGINT/SIGTERM: the terminal back, then the signal's default action.
void OnSignal(int sig) {
  if (raw_mode) tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
  signal(sig, SIG_DFL);
  raise(sig);
}

void EnterRawMode() {
  if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_termios) != 0) return;
  struct termios raw = saved_termios;
  raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
  raw.c_cc[VMIN] = 0;
  raw.c_cc[VTIME] = 0;
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0) raw_mode = true;
}

// Waits up to `wait` for a key; true when it was q (or stdin closed).
bool WaitForQuit(absl::Duration wait) {
  const absl::Time until = absl::Now() + wait;
  for (absl::Time now = absl::Now(); now < until; now = absl::Now()) {
    struct pollfd fd = {STDIN_FILENO, POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(until - now)) + 1;
    const int ready = poll(raw_mode ? &fd : nullptr, raw_mode ? 1 : 0, ms);
    if (ready <= 0) continue;
    char c = 0;
    const ssize_t n = read(STDIN_FILENO, &c, 1);
    if (n == 0 || c == 'q' || c == 'Q') return true;
  }
  return false;
}

size_t TerminalRows() {
  struct winsize ws = {};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 4) return 0;
  return ws.ws_row - 3;  // the header, the column names, the cursor line
}

absl::Status RunLoop(Top& top, absl::Duration interval) {
  ASSIGN_OR_RETURN(Sample before, top.Take());
  if (absl::GetFlag(FLAGS_once)) {
    absl::SleepFor(interval);
    ASSIGN_OR_RETURN(Sample now, top.Take());
    ASSIGN_OR_RETURN(std::vector<Row> rows, top.Rows(before, now));
    if (JsonOutput()) {
      PrintJson(rows);
    } else {
      PrintTable(rows, 0);
    }
    return absl::OkStatus();
  }
  EnterRawMode();
  Sample now = before;
  while (true) {
    ASSIGN_OR_RETURN(std::vector<Row> rows, top.Rows(before, now));
    if (JsonOutput()) {
      PrintJson(rows);
    } else {
      std::printf("\x1b[H\x1b[2J");
      std::printf("pvemuctl top  %s  generation %llu  every %.3gs  %zu MSRs  (q quits)\n",
                  ServerAddress().c_str(), static_cast<unsigned long long>(now.generation),
                  absl::ToDoubleSeconds(interval), rows.size());
      PrintTable(rows, TerminalRows());
    }
    std::fflush(stdout);
    if (WaitForQuit(interval)) return absl::OkStatus();
    before = std::move(now);
    ASSIGN_OR_RETURN(now, top.Take());
  }
}

}  // namespace

int RunTop(const Args& args) {
  if (!args.empty()) return UsageError("top takes no arguments");
  double seconds = 0;
  const std::string interval = absl::GetFlag(FLAGS_interval);
  if (!absl::SimpleAtod(interval, &seconds) || !(seconds > 0) || seconds > 3600) {
    return UsageError(absl::StrCat("--interval=", interval, ": give seconds, above 0"));
  }
  std::optional<uint32_t> domain;
  if (std::string d = absl::GetFlag(FLAGS_domain); !d.empty()) {
    absl::StatusOr<uint32_t> id = ParseNumber32(d, "--domain");
    if (!id.ok()) return Fail(id.status());
    domain = *id;
  }
  auto channel = Connect();
  if (!channel.ok()) return Fail(channel.status());
  Top top(*channel, domain);
  absl::Status status = RunLoop(top, absl::Seconds(seconds));
  RestoreTerminal();
  return status.ok() ? kExitOk : Fail(status);
}

}  // namespace pvemu::client
