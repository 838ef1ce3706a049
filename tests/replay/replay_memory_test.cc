// Replay in flat memory: `pvemuctl replay` of a trap log of any length costs
// the memory of one read buffer, never the log's. The built pvemuctl reads a
// log from a FIFO that a writer thread here fills with records it makes as
// it goes (kept nowhere): a capture's records, each expecting what an
// in-process dispatcher of the same policy and host answered. Two lengths
// per encoding; the longer one's peak resident memory (wait4's ru_maxrss of
// the child) must be the shorter one's within a small margin, and under a
// bound no log length moves. The summary must count every record written,
// by outcome, with no mismatch.
//
// The larger .traps log is 1 GiB (~4.9M records, a few seconds on two
// cores); PVEMU_REPLAY_MEMORY_MIB=10240 makes it 10 GiB for a manual run:
//   PVEMU_REPLAY_MEMORY_MIB=10240 meson test -C build replay-memory -v
//
// The text encoding streams too (traplog/text_format.h: TextLogPieces), so
// the last tests check that reading it a piece at a time gives what one
// parse of the whole text gives, records and errors alike.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/textproto.h"
#include "dispatch/dispatch.h"
#include "emulator/decoder.h"
#include "emulator/trap_convert.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "hosts/open_host.h"
#include "hosts/sim_host.h"
#include "policy/shipped.h"
#include "policy/store.h"
#include "tests/bench/recorded_expectation.h"
#include "tests/bench/trap_mix.h"
#include "tests/sanitizers.h"
#include "traplog/encoding.h"
#include "traplog/reader.h"
#include "traplog/text_format.h"
#include "traplog/traps_format.h"

namespace pvemu::testing {
namespace {

using std::chrono::steady_clock;

constexpr uint64_t kMiB = uint64_t{1} << 20;
// What pvemuctl replays under: its defaults, spelled out.
constexpr char kPolicy[] = "default";
constexpr char kHostProfile[] = "intel-xeon-e-2136";
// MSR indexes no rule names and no CPU has, one more every fourth record:
// a replay that kept state per distinct MSR would grow with the log.
constexpr uint32_t kSweepBase = 0x00100000;
constexpr uint32_t kSweepMsrs = uint32_t{1} << 24;

// Peak resident memory no log length may move pvemuctl's above (it replays
// in ~16 MiB), and how far the longer log's may lie above the shorter one's.
// 4 MiB is under one byte per record of the 1 GiB log. (The one state of
// replay that grows with what a log holds is the dispatcher's SHADOW
// registers, 4 KiB per (domain, vCPU) up to a fixed 16384 vCPUs, ~64 MiB;
// the mix here has 32 vCPUs.)
constexpr uint64_t kMaxRssKiB = 64 * 1024;
constexpr uint64_t kGrowthKiB = 4 * 1024;

std::string Pvemuctl() { return std::string(std::getenv("PVEMU_BUILD_ROOT")) + "/client/pvemuctl"; }

enum class Format { kTraps, kText };

const char* Extension(Format f) { return f == Format::kTraps ? ".traps" : ".textproto"; }

// What a writer wrote: records, by outcome as pvemuctl's summary counts
// them, and bytes (header included).
struct Written {
  uint64_t records = 0, completed = 0, exceptions = 0, unhandled = 0, bytes = 0;
  std::string error;  // empty unless writing failed
};

// Makes record i of an endless capture: the benchmarks' trap mix (RDMSR,
// WRMSR, CPUID, RDTSC, IN/OUT, others; prefixes, 32-bit guests; 4 domains of
// 8 vCPUs), every fourth record's RCX a fresh MSR index, decided in order by
// a dispatcher of the policy and host pvemuctl replays under.
class Generator {
 public:
  Generator() : mix_(bench::MakeTrapMix()) {
    auto host = hosts::OpenSimHost(kHostProfile);
    if (!host.ok()) {
      error_ = host.status().ToString();
      return;
    }
    host_ = *std::move(host);
    auto loaded = policy::LoadPolicyByNameOrFile(kPolicy);
    if (!loaded.ok()) {
      error_ = loaded.status().ToString();
      return;
    }
    auto store = policy::Store::FromPolicy(loaded->policy, loaded->source, host_->vendor());
    if (!store.ok()) {
      error_ = store.status().ToString();
      return;
    }
    store_ = *std::move(store);
    dispatcher_ = std::make_unique<dispatch::Dispatcher>(*store_, *host_, nullptr,
                                                         dispatch::DispatchOptions());
    session_ = dispatcher_->NewSession();
  }

  // Empty when the world came up.
  const std::string& error() const { return error_; }

  void Make(uint64_t i, v1::TrapRecord* rec, Written* tally) {
    emulator::Trap trap = mix_[i % mix_.size()];
    if (i % 4 == 3) {
      trap.regs.gpr[emulator::kRcx] = kSweepBase + static_cast<uint32_t>((i / 4) % kSweepMsrs);
    }
    emulator::Instruction insn;
    emulator::DecodeError error = emulator::DecodeError::kOk;
    const emulator::Outcome out = session_->Handle(trap, &insn, &error);
    rec->Clear();
    emulator::TrapToProto(trap, rec->mutable_trap());
    bench::SetExpectation(trap, out, insn, error, rec->mutable_expect());
    if (tally == nullptr) return;
    ++tally->records;
    if (out.kind == emulator::OutcomeKind::kCompleted) ++tally->completed;
    if (out.kind == emulator::OutcomeKind::kException) ++tally->exceptions;
    if (out.kind == emulator::OutcomeKind::kUnhandled) ++tally->unhandled;
  }

 private:
  std::vector<emulator::Trap> mix_;
  std::string error_;
  std::unique_ptr<hosts::SimHost> host_;
  std::unique_ptr<policy::Store> store_;
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
  std::unique_ptr<dispatch::Dispatcher::Session> session_;
};

bool WriteAll(int fd, absl::string_view bytes, std::string* error) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = absl::StrCat("write to the FIFO: ", std::strerror(errno));
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Fills the FIFO at `path` with records until `bytes` are written, in 1 MiB
// writes. Waits for the reader without blocking (so that a replay that never
// opens the FIFO cannot hang the writer), until `stop`.
void WriteLog(const std::string& path, Format format, uint64_t bytes, const std::atomic<bool>& stop,
              Written* w) {
  Generator gen;
  if (!gen.error().empty()) {
    w->error = gen.error();
    return;
  }
  int fd = -1;
  while (!stop.load()) {
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 || errno != ENXIO) break;  // ENXIO: no reader yet
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (fd < 0) {
    w->error = stop.load() ? "the replay never opened the FIFO"
                           : absl::StrCat("open ", path, ": ", std::strerror(errno));
    return;
  }
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out(format == Format::kTraps ? traplog::kTrapsMagic : traplog::kTextLogHeader);
  v1::TrapRecord rec;
  std::string one;
  for (uint64_t i = 0; w->bytes + out.size() < bytes; ++i) {
    gen.Make(i, &rec, w);
    if (format == Format::kTraps) {
      absl::Status encoded = traplog::EncodeTrapsRecord(rec, "generated", &one);
      if (!encoded.ok()) {
        w->error = encoded.ToString();
        break;
      }
    } else {
      traplog::FormatTextRecord(rec, &one);
    }
    out += one;
    if (out.size() >= kMiB) {
      if (!WriteAll(fd, out, &w->error)) break;
      w->bytes += out.size();
      out.clear();
    }
  }
  if (w->error.empty() && WriteAll(fd, out, &w->error)) w->bytes += out.size();
  ::close(fd);
}

// One pvemuctl replay of a log streamed through a FIFO.
struct Replayed {
  Written written;
  int exit_status = -1;  // 128 + signal when killed
  uint64_t max_rss_kib = 0;
  double seconds = 0;
  std::string summary;  // the last line of stdout: the JSON summary
  std::string out_head, err_head;
};

// Appends what `fd` has to *head (up to `cap` bytes kept) and the last
// line of it to *last; false at EOF.
bool Drain(int fd, size_t cap, std::string* head, std::string* tail) {
  char buf[65536];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) return false;
  const size_t got = static_cast<size_t>(n);
  if (head->size() < cap) head->append(buf, std::min(got, cap - head->size()));
  if (tail != nullptr) {
    tail->append(buf, got);
    if (tail->size() > 8192) tail->erase(0, tail->size() - 8192);
  }
  return true;
}

// Runs `pvemuctl replay -o json` on the FIFO DIR/log.EXT while a writer
// thread fills it with `bytes` of records.
Replayed ReplayThroughFifo(const std::string& dir, Format format, uint64_t bytes) {
  Replayed r;
  const std::string fifo = absl::StrCat(dir, "/log", Extension(format));
  if (::mkfifo(fifo.c_str(), 0600) != 0) {
    r.written.error = absl::StrCat("mkfifo ", fifo, ": ", std::strerror(errno));
    return r;
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.written.error = absl::StrCat("pipe2: ", std::strerror(errno));
    return r;
  }
  const std::string binary = Pvemuctl();
  const std::string policy = absl::StrCat("--policy=", kPolicy);
  const std::string host = absl::StrCat("--host-profile=", kHostProfile);
  const char* argv[] = {binary.c_str(), "replay", "-o", "json", policy.c_str(), host.c_str(),
                        fifo.c_str(), nullptr};
  const auto start = steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    (void)::dup2(out_pipe[1], STDOUT_FILENO);
    (void)::dup2(err_pipe[1], STDERR_FILENO);
    ::execv(binary.c_str(), const_cast<char* const*>(argv));
    std::_Exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  std::atomic<bool> stop{false};
  std::thread writer([&] { WriteLog(fifo, format, bytes, stop, &r.written); });
  std::string tail;
  bool out_open = pid > 0, err_open = pid > 0;
  while (out_open || err_open) {
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      out_open = Drain(out_pipe[0], 16384, &r.out_head, &tail);
    }
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      err_open = Drain(err_pipe[0], 16384, &r.err_head, nullptr);
    }
  }
  if (pid > 0) {
    int wstatus = 0;
    struct rusage usage {};
    if (::wait4(pid, &wstatus, 0, &usage) == pid) {
      r.exit_status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
      r.max_rss_kib = static_cast<uint64_t>(usage.ru_maxrss);  // KiB on Linux
    }
  }
  r.seconds = std::chrono::duration<double>(steady_clock::now() - start).count();
  // The replay is gone: a writer still waiting for it gives up (a blocked
  // write fails with EPIPE once the FIFO has no reader).
  stop.store(true);
  writer.join();
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  ::unlink(fifo.c_str());
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  const size_t nl = tail.rfind('\n');
  r.summary = nl == std::string::npos ? tail : tail.substr(nl + 1);
  return r;
}

// The number after "KEY": in a one-line JSON object.
std::optional<uint64_t> Field(const std::string& json, absl::string_view key) {
  const std::string k = absl::StrCat("\"", key, "\":");
  size_t at = json.find(k);
  if (at == std::string::npos) return std::nullopt;
  at += k.size();
  size_t end = at;
  while (end < json.size() && std::isdigit(static_cast<unsigned char>(json[end]))) ++end;
  uint64_t v = 0;
  if (!absl::SimpleAtoi(absl::string_view(json).substr(at, end - at), &v)) return std::nullopt;
  return v;
}

// A temporary directory (under TEST_TMPDIR, as gtest's TempDir() finds it),
// removed at the end with what is left in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "replay_memory_test.XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void Print(const char* what, const Replayed& r) {
  const double records = static_cast<double>(r.written.records);
  const double mib = static_cast<double>(r.written.bytes) / static_cast<double>(kMiB);
  std::printf(
      "replay-memory: %s %8.1f MiB, %9llu records: %6.2f s (%.2fM records/s, %.0f MiB/s), "
      "pvemuctl max RSS %llu KiB\n",
      what, mib, static_cast<unsigned long long>(r.written.records), r.seconds,
      r.seconds > 0 ? records / r.seconds / 1e6 : 0.0, r.seconds > 0 ? mib / r.seconds : 0.0,
      static_cast<unsigned long long>(r.max_rss_kib));
  std::fflush(stdout);
}

// The replay ran clean and its summary counts every record written.
void ExpectCountedEveryRecord(const Replayed& r) {
  ASSERT_TRUE(r.written.error.empty()) << r.written.error << "\nstderr: " << r.err_head;
  ASSERT_EQ(r.exit_status, 0) << "stderr: " << r.err_head << "\nstdout: " << r.out_head;
  ASSERT_GT(r.written.records, 0u);
  const std::string& s = r.summary;
  EXPECT_EQ(Field(s, "traps"), r.written.records) << s;
  EXPECT_EQ(Field(s, "checked"), r.written.records) << s;
  EXPECT_EQ(Field(s, "mismatches"), 0u) << s << "\n" << r.out_head;
  EXPECT_EQ(Field(s, "completed"), r.written.completed) << s;
  EXPECT_EQ(Field(s, "exceptions"), r.written.exceptions) << s;
  EXPECT_EQ(Field(s, "unhandled"), r.written.unhandled) << s;
}

// Both lengths of one encoding: counted in full, and the longer log's peak
// resident memory that of the shorter within kGrowthKiB, under kMaxRssKiB.
void CheckFlat(Format format, uint64_t small_bytes, uint64_t large_bytes) {
  ::signal(SIGPIPE, SIG_IGN);  // a write to a FIFO whose reader died: EPIPE
  TempDir dir;
  ASSERT_FALSE(dir.path().empty()) << "mkdtemp: " << std::strerror(errno);
  const char* name = format == Format::kTraps ? ".traps    " : ".textproto";
  const Replayed small = ReplayThroughFifo(dir.path(), format, small_bytes);
  Print(name, small);
  ExpectCountedEveryRecord(small);
  const Replayed large = ReplayThroughFifo(dir.path(), format, large_bytes);
  Print(name, large);
  ExpectCountedEveryRecord(large);
  if (::testing::Test::HasFatalFailure()) return;
  if (kUnderAddressSanitizer) {
    std::printf("replay-memory: AddressSanitizer keeps freed memory resident; "
                "the resident-memory bounds are checked by the plain build\n");
    return;
  }
  std::printf("replay-memory: %s max RSS %+lld KiB from %.0f to %.0f MiB of log\n", name,
              static_cast<long long>(large.max_rss_kib) - static_cast<long long>(small.max_rss_kib),
              static_cast<double>(small.written.bytes) / kMiB,
              static_cast<double>(large.written.bytes) / kMiB);
  EXPECT_LT(large.max_rss_kib, kMaxRssKiB)
      << "pvemuctl replay of " << large.written.bytes << " bytes peaked at " << large.max_rss_kib
      << " KiB resident";
  EXPECT_LE(large.max_rss_kib, small.max_rss_kib + kGrowthKiB)
      << "pvemuctl's peak resident memory grew with the log: " << small.max_rss_kib << " KiB for "
      << small.written.bytes << " bytes, " << large.max_rss_kib << " KiB for "
      << large.written.bytes << " bytes";
}

uint64_t LargeTrapsBytes() {
  if (const char* mib = std::getenv("PVEMU_REPLAY_MEMORY_MIB"); mib != nullptr) {
    uint64_t n = 0;
    if (absl::SimpleAtoi(mib, &n) && n > 0) return n * kMiB;
  }
  // Under ASan pvemuctl is several times slower; its memory is not judged.
  return kUnderAddressSanitizer ? 128 * kMiB : 1024 * kMiB;
}

TEST(ReplayMemoryTest, TrapsLogThroughAFifoReplaysInFlatMemory) {
  CheckFlat(Format::kTraps, kUnderAddressSanitizer ? 16 * kMiB : 64 * kMiB, LargeTrapsBytes());
}

// Text is read some 25 times slower per record than PVTRAPS2, hence the
// shorter logs; the longer is still 256 pieces of text
// (traplog::TextLogPieces::kPieceBytes).
TEST(ReplayMemoryTest, TextLogThroughAFifoReplaysInFlatMemory) {
  CheckFlat(Format::kText, kUnderAddressSanitizer ? 4 * kMiB : 16 * kMiB,
            kUnderAddressSanitizer ? 32 * kMiB : 256 * kMiB);
}

// A text log in every top-level shape the text format allows: the writer's
// blocks, a field name on its own line, `:` before the value, `<...>`, lists,
// separators on the next line, comments and strings with brackets in them,
// concatenated strings across lines; at least `min_bytes` long.
std::string VariedTextLog(size_t min_bytes) {
  static const char* const kShapes[] = {
      "record\n{\n  trap { domain: 1 mode: MODE_64 insn: \"\\x0f\\x32\" regs { rcx: 0x1b0 } }\n}\n",
      "record {\n  note: \"a } note { with \\\" brackets # and a hash\"\n}\n;\n",
      "# a comment } with { brackets and a \" quote\n"
      "record: { note: 'single' } , record < note: \"angle\" >\n",
      "record: [ { note: \"list 1\" },\n  { note: \"list 2\" } ]\n\n# a trailing } comment\n",
      "record { note: \"con\" \"cat\"\n  \"enated\" };\n",
      "record {}\n,\nrecord <>\n",
  };
  Generator gen;
  std::string text(traplog::kTextLogHeader);
  v1::TrapRecord rec;
  std::string one;
  for (uint64_t i = 0; text.size() < min_bytes; ++i) {
    gen.Make(i, &rec, nullptr);
    traplog::FormatTextRecord(rec, &one);
    text += one;
    if (i % 5 == 0) text += kShapes[(i / 5) % (sizeof(kShapes) / sizeof(kShapes[0]))];
  }
  return text;
}

TEST(ReplayMemoryTest, TextReadInPiecesIsOneParse) {
  const std::string text = VariedTextLog(3 * kMiB + 12345);
  v1::TrapLog whole;
  ASSERT_TRUE(ParseTextProto(text, "v.textproto", &whole).ok());
  for (size_t piece_bytes : {size_t{1}, size_t{97}, size_t{4096}, traplog::TextLogPieces::kPieceBytes}) {
    SCOPED_TRACE(absl::StrCat("pieces of ", piece_bytes, " bytes"));
    std::istringstream in(text);
    traplog::TextLogPieces pieces(&in, "v.textproto", piece_bytes);
    v1::TrapLog log;
    int n = 0, count = 0;
    while (true) {
      absl::StatusOr<bool> more = pieces.Next(&log);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      ++count;
      for (const v1::TrapRecord& got : log.record()) {
        ASSERT_LT(n, whole.record_size());
        ASSERT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, whole.record(n)))
            << "record " << n + 1 << ": " << got.ShortDebugString() << "\nwant "
            << whole.record(n).ShortDebugString();
        ++n;
      }
    }
    EXPECT_EQ(n, whole.record_size());
    // A piece ends within a record block (< 2 KiB here) past its size.
    EXPECT_GE(static_cast<size_t>(count), text.size() / (piece_bytes + 2048));
    std::printf("%zu bytes of text: %d records in %d pieces of at least %zu bytes\n", text.size(),
                n, count, piece_bytes);
  }
  // And through the reader, which pvemuctl uses.
  std::istringstream in(text);
  auto reader = traplog::TrapLogReader::ForStream(&in, traplog::TrapLogEncoding::kText, "v.textproto");
  ASSERT_TRUE(reader.ok()) << reader.status();
  v1::TrapRecord rec;
  int n = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&rec);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ASSERT_LT(n, whole.record_size());
    ASSERT_TRUE(google::protobuf::util::MessageDifferencer::Equals(rec, whole.record(n)));
    ++n;
  }
  EXPECT_EQ(n, whole.record_size());
}

// An error reads as one parse of the whole text words it, line and column
// in the whole text: from Open in the first piece (as before pieces, when
// the whole log was parsed at Open), else after every record before it.
TEST(ReplayMemoryTest, TextErrorsSayWhereAsOneParse) {
  const std::string text = VariedTextLog(3 * kMiB);
  // `what` put at the first line start at or after `at` where a record
  // block begins, or cut there (empty `what`).
  struct Case {
    const char* name;
    size_t at;
    std::string what;
    bool at_open;
  };
  const Case cases[] = {
      {"unknown field, first piece", 100000, "record { bogus: 1 }\n", true},
      {"unknown field, third piece", 2 * kMiB + 500000, "record { bogus: 1 }\n", false},
      {"stray closing bracket", kMiB + 500000, "}\n", false},
      {"string across lines", 2 * kMiB + 1000, "record { note: \"open\n}\n", false},
      {"field name without a value", kMiB + 300000, "record\n", false},
      {"cut inside a record", text.size() - 40, "", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string bad = text.substr(0, c.at);
    if (!c.what.empty()) {
      const size_t at = text.find("\nrecord {\n", c.at);
      ASSERT_NE(at, std::string::npos);
      bad = text.substr(0, at + 1) + c.what + text.substr(at + 1);
    }
    v1::TrapLog whole;
    const absl::Status want = ParseTextProto(bad, "e.textproto", &whole);
    ASSERT_FALSE(want.ok());
    std::printf("%s: %s\n", c.name, std::string(want.message()).c_str());
    std::istringstream in(bad);
    auto reader = traplog::TrapLogReader::ForStream(&in, traplog::TrapLogEncoding::kText, "e.textproto");
    if (c.at_open) {
      ASSERT_FALSE(reader.ok());
      EXPECT_EQ(reader.status(), want);
      continue;
    }
    ASSERT_TRUE(reader.ok()) << reader.status();
    v1::TrapRecord rec;
    int n = 0;
    absl::Status end;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&rec);
      if (!more.ok()) {
        end = more.status();
        break;
      }
      if (!*more) break;
      ++n;
    }
    EXPECT_EQ(end, want);
    EXPECT_GT(n, 1000) << "the records before the error come first";
  }
}

}  // namespace
}  // namespace pvemu::testing
