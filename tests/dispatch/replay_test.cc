// Replay split by vCPU (dispatch/replay.h): on any number of threads a log's
// answers are the serial replay's, for traps whose answers depend on earlier
// ones (SHADOW MSRs per vCPU, PASSTHROUGH MSRs per host CPU, which every
// domain's vCPU of that number reaches); mismatches are reported with their
// record numbers and sources; damage and unconvertible traps stop the replay
// with the reader's error at the same record as serially.
#include "dispatch/replay.h"

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dispatch/dispatch.h"
#include "emulator/trap_convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/bench/recorded_expectation.h"
#include "tests/dispatch/dispatcher_fixture.h"
#include "tests/status_matchers.h"
#include "tests/traplog/traplog_test_util.h"
#include "traplog/traps_layout.h"
#include "traplog/writer.h"

namespace pvemu::dispatch {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint32_t kEnergyPerfBias = 0x1b0;  // SHADOW in every domain below
constexpr uint32_t kThermControl = 0x19a;    // PASSTHROUGH: the host CPU's own
constexpr uint32_t kDomains = 4;
constexpr uint32_t kVcpus = 6;

// The default world with the rules whose answers depend on the traps before:
// each domain's IA32_ENERGY_PERF_BIAS is a SHADOW register of each vCPU, and
// IA32_THERM_CONTROL passes through to the host CPU of the vCPU's number,
// which every domain's vCPU of that number shares.
::pvemu::testing::DefaultWorld MakeWorld() {
  dispatch::DispatchOptions options;
  options.allow_host_writes = true;
  ::pvemu::testing::DefaultWorld world = ::pvemu::testing::MakeDefaultWorld(options);
  v1::MsrRule shadow;
  shadow.set_msr("IA32_ENERGY_PERF_BIAS");
  shadow.set_read(v1::ReadAction::SHADOW);
  shadow.set_write(v1::WriteAction::SHADOW);
  v1::MsrRule through;
  through.set_msr("IA32_THERM_CONTROL");
  through.set_read(v1::ReadAction::PASSTHROUGH);
  through.set_write(v1::WriteAction::PASSTHROUGH);
  through.set_allow_host_write(true);
  for (uint32_t domain = 1; domain <= kDomains; ++domain) {
    for (const v1::MsrRule& rule : {shadow, through}) {
      EXPECT_THAT(
          world.store->SetRule(policy::LayerRef::Domain(domain), rule, policy::EditOptions()),
          IsOk());
    }
  }
  return world;
}

// `n` RDMSRs and WRMSRs of the two MSRs by random domains and vCPUs, each
// expecting what a fresh dispatcher answers when they run in order on one
// thread; record i's source is "capture.log:i".
std::vector<v1::TrapRecord> SerialLog(int n) {
  ::pvemu::testing::DefaultWorld world = MakeWorld();
  auto session = world.dispatcher->NewSession();
  std::mt19937_64 rng(29);
  std::vector<v1::TrapRecord> records;
  // Reads of a host CPU's PASSTHROUGH MSR that another domain wrote last:
  // the traps a split by (domain, vCPU) would answer out of order.
  std::vector<uint32_t> last_writer(kVcpus, 0);
  int cross_domain_reads = 0;
  for (int i = 1; i <= n; ++i) {
    emulator::Trap t;
    t.domain = 1 + static_cast<uint32_t>(rng() % kDomains);
    t.vcpu = static_cast<uint32_t>(rng() % kVcpus);
    const bool write = rng() % 2 == 0;
    t.insn[0] = 0x0f;
    t.insn[1] = write ? 0x30 : 0x32;
    t.insn_len = 2;
    t.regs.gpr[emulator::kRcx] = rng() % 2 == 0 ? kEnergyPerfBias : kThermControl;
    // Small values: IA32_THERM_CONTROL's host profile accepts its low bits.
    t.regs.gpr[emulator::kRax] = rng() % 16;
    t.regs.rip = 0x1000 + static_cast<uint64_t>(i);
    emulator::Instruction insn;
    emulator::DecodeError error = emulator::DecodeError::kOk;
    const emulator::Outcome out = session->Handle(t, &insn, &error);
    if (t.regs.gpr[emulator::kRcx] == kThermControl &&
        out.kind == emulator::OutcomeKind::kCompleted) {
      if (write) {
        last_writer[t.vcpu] = t.domain;
      } else if (last_writer[t.vcpu] != 0 && last_writer[t.vcpu] != t.domain) {
        ++cross_domain_reads;
      }
    }
    v1::TrapRecord rec;
    emulator::TrapToProto(t, rec.mutable_trap());
    bench::SetExpectation(t, out, insn, error, rec.mutable_expect());
    rec.set_source(absl::StrCat("capture.log:", i));
    records.push_back(std::move(rec));
  }
  if (n >= 100) {
    EXPECT_GT(cross_domain_reads, n / 20) << "the log no longer depends on order across domains";
  }
  return records;
}

void Write(const std::string& path, const std::vector<v1::TrapRecord>& records) {
  auto writer = traplog::TrapLogWriter::Open(path);
  ASSERT_THAT(writer, IsOk());
  for (const v1::TrapRecord& rec : records) ASSERT_THAT((*writer)->Append(rec), IsOk());
  ASSERT_THAT((*writer)->Close(), IsOk());
}

struct Replayed {
  absl::Status status;
  ReplayTotals totals;
  std::set<int64_t> mismatched;            // record numbers
  std::vector<std::string> sources;        // of the mismatches, as reported
};

Replayed Replay(const std::vector<std::string>& logs, int jobs) {
  ::pvemu::testing::DefaultWorld world = MakeWorld();
  Replayed got;
  ReplayOptions options;
  options.jobs = jobs;
  options.on_mismatch = [&got](const ReplayMismatch& m) {
    EXPECT_TRUE(got.mismatched.insert(m.record).second) << "record " << m.record << " twice";
    got.sources.push_back(m.source);
    EXPECT_EQ(m.verdict.code(), absl::StatusCode::kFailedPrecondition) << m.verdict;
  };
  got.status = ReplayLogs(*world.dispatcher, logs, options, &got.totals);
  return got;
}

class ReplayTest : public ::testing::TestWithParam<int> {
 protected:
  traplog::test_util::TempDir dir_;
};

// The log depends on order within a vCPU number (a SHADOW write then its
// read; one domain's PASSTHROUGH write and another's read of the same host
// CPU): any split that separated such traps would answer some differently.
TEST_P(ReplayTest, AnyNumberOfThreadsGivesTheSerialAnswers) {
  const std::vector<v1::TrapRecord> records = SerialLog(6000);
  const std::string log = dir_.File("mix.traps");
  Write(log, records);
  const Replayed got = Replay({log}, GetParam());
  ASSERT_THAT(got.status, IsOk());
  EXPECT_EQ(got.totals.traps, records.size());
  EXPECT_EQ(got.totals.checked, records.size());
  EXPECT_EQ(got.totals.mismatches, 0u);
  EXPECT_EQ(got.totals.completed + got.totals.exceptions + got.totals.unhandled, records.size());
  EXPECT_GT(got.totals.completed, 0u);
}

TEST_P(ReplayTest, MismatchesAreReportedOnceWithTheirRecordAndSource) {
  std::vector<v1::TrapRecord> records = SerialLog(3000);
  std::set<int64_t> want;
  for (int i = 0; i < static_cast<int>(records.size()); i += 97) {
    v1::Expectation* expect = records[i].mutable_expect();
    if (expect->kind() != v1::Outcome::COMPLETED || !expect->has_value()) continue;
    expect->set_value(expect->value() ^ 0x100);  // a read the host never gave
    want.insert(i + 1);
  }
  ASSERT_GT(want.size(), 5u);
  const std::string log = dir_.File("wrong.traps");
  Write(log, records);
  const Replayed got = Replay({log}, GetParam());
  ASSERT_THAT(got.status, IsOk());
  EXPECT_EQ(got.mismatched, want);
  EXPECT_EQ(got.totals.mismatches, want.size());
  std::set<std::string> sources(got.sources.begin(), got.sources.end());
  for (int64_t record : want) EXPECT_TRUE(sources.count(absl::StrCat("capture.log:", record)));
}

// Writes `records` to `path` without their sources, so that every record has
// the same size, then lets `patch` change the bytes of record `index` (from
// 0), which start at the offset it is given and returns.
size_t WritePatched(const std::string& path, std::vector<v1::TrapRecord> records, size_t index,
                    const std::function<void(std::string* bytes, size_t at)>& patch) {
  for (v1::TrapRecord& rec : records) rec.clear_source();
  Write(path, records);
  std::string bytes = traplog::test_util::ReadAll(path);
  const size_t record_bytes = (bytes.size() - traplog::kTrapsMagic.size()) / records.size();
  const size_t at = traplog::kTrapsMagic.size() + index * record_bytes;
  patch(&bytes, at);
  traplog::test_util::WriteAll(path, bytes);
  return at;
}

// Damage stops every share at the damaged record, so the error is the one a
// serial replay gives, naming the record and its byte offset, after exactly
// the records before it.
TEST_P(ReplayTest, DamageIsTheSerialReplaysErrorAfterTheRecordsBeforeIt) {
  const std::string log = dir_.File("damaged.traps");
  const size_t at = WritePatched(log, SerialLog(400), 250, [](std::string* bytes, size_t at) {
    (*bytes)[at + traplog::traps_v2::kMode] = 9;  // no such mode
  });
  const Replayed got = Replay({log}, GetParam());
  EXPECT_THAT(got.status, StatusIs(absl::StatusCode::kDataLoss,
                                   HasSubstr(absl::StrCat(log, ": record 251 at byte offset ", at))));
  EXPECT_EQ(got.totals.traps, 250u);
}

// A trap TrapFromProto refuses (the reserved domain id, which the writer
// refuses too, so patched in) is its share's error, named as serial replay
// names it; a later log is not replayed.
TEST_P(ReplayTest, AnUnconvertibleTrapStopsTheReplayAtItsRecord) {
  const std::string log = dir_.File("reserved.traps");
  const size_t at = WritePatched(log, SerialLog(300), 120, [](std::string* bytes, size_t at) {
    traplog::test_util::PutLe(bytes, at + traplog::traps_v2::kDomain, 0xffffffffu, 4);
  });
  const std::string later = dir_.File("later.traps");
  Write(later, SerialLog(10));
  const Replayed got = Replay({log, later}, GetParam());
  EXPECT_THAT(got.status, StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr(absl::StrCat(": record 121 at byte offset ", at))));
  // Not all of the log: record 121's share stopped there.
  EXPECT_LT(got.totals.traps, 300u);
  if (GetParam() == 1) {
    EXPECT_EQ(got.totals.traps, 120u);
  }
}

// Several logs replay in order, each split on its own; a text log is
// replayed by one thread whatever the number asked.
TEST_P(ReplayTest, LogsOfEitherEncodingAddUp) {
  const std::vector<v1::TrapRecord> records = SerialLog(500);
  const std::string binary = dir_.File("a.traps");
  Write(binary, records);
  const std::string text = dir_.File("a.textproto");
  Write(text, records);
  const Replayed got = Replay({binary, text}, GetParam());
  ASSERT_THAT(got.status, IsOk());
  EXPECT_EQ(got.totals.traps, 2 * records.size());
  // Both were replayed whole (the second against the registers the first
  // left, so its answers may differ from its expectations).
  EXPECT_EQ(got.totals.checked, 2 * records.size());
}

// A FIFO cannot be read by several threads: it replays on one, whatever the
// number asked, and gives the serial answers.
TEST_P(ReplayTest, AFifoReplaysWholeOnOneThread) {
  const std::vector<v1::TrapRecord> records = SerialLog(3000);
  const std::string file = dir_.File("written.traps");
  Write(file, records);  // the writer replaces its path: write a file, then stream it
  const std::string bytes = traplog::test_util::ReadAll(file);
  const std::string fifo = dir_.File("live.traps");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { traplog::test_util::WriteAll(fifo, bytes); });
  const Replayed got = Replay({fifo}, GetParam());
  writer.join();
  ASSERT_THAT(got.status, IsOk());
  EXPECT_EQ(got.totals.traps, records.size());
  EXPECT_EQ(got.totals.mismatches, 0u);
}

// Progress comes from whichever thread replays: here every record is vCPU
// 1's, so with two threads or more the first replays none of them.
TEST_P(ReplayTest, ProgressComesFromTheThreadsThatReplay) {
  std::vector<v1::TrapRecord> records(140000);
  for (v1::TrapRecord& rec : records) {
    rec.mutable_trap()->set_domain(1);
    rec.mutable_trap()->set_vcpu(1);
    rec.mutable_trap()->set_mode(v1::MODE_64);
    rec.mutable_trap()->set_insn(std::string("\x0f\x32", 2));
    rec.mutable_trap()->mutable_regs()->set_rcx(kEnergyPerfBias);
  }
  const std::string log = dir_.File("one-vcpu.traps");
  Write(log, records);
  ::pvemu::testing::DefaultWorld world = MakeWorld();
  ReplayOptions options;
  options.jobs = GetParam();
  std::vector<int64_t> progress;
  options.on_progress = [&](const std::string& name, int64_t record, uint64_t mismatches) {
    EXPECT_EQ(name, log);
    EXPECT_EQ(mismatches, 0u);
    progress.push_back(record);
  };
  ReplayTotals totals;
  ASSERT_THAT(ReplayLogs(*world.dispatcher, {log}, options, &totals), IsOk());
  EXPECT_EQ(totals.traps, records.size());
  EXPECT_EQ(progress, (std::vector<int64_t>{65536, 131072}));
}

TEST_P(ReplayTest, ALogThatCannotBeOpenedIsAnErrorNamingIt) {
  const Replayed got = Replay({dir_.File("missing.traps")}, GetParam());
  EXPECT_THAT(got.status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.traps")));
  EXPECT_EQ(got.totals.traps, 0u);
}

INSTANTIATE_TEST_SUITE_P(Threads, ReplayTest, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "Threads");
                         });

}  // namespace
}  // namespace pvemu::dispatch
