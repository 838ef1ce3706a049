// The replay corpus: every tests/replay/*.textproto is a trap log whose first
// line says how to replay it ("# replay: --policy=NAME --host-profile=NAME
// [--allow-host-writes]") and whose records all carry hand-written
// expectations. Each file runs through the same dispatcher pvemud uses.
//
// After an intended change of behaviour, regenerate the expectations with
//   PVEMU_REGENERATE=1 build/tests/replay/replay_test
// and review the diff: comments and notes are kept, `expect` blocks rewritten.
//
// The captured host logs of tests/traplog/samples are imported and
// replayed under the preset that matches the host they came from.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "traplog/import.h"
#include "emulator/trap_convert.h"
#include "traplog/expectations.h"
#include "traplog/reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "hosts/open_host.h"
#include "policy/store.h"
#include "base/textproto.h"
#include "dispatch/dispatch.h"
#include "hosts/sim_host.h"

namespace pvemu::testing {
namespace {

namespace fs = std::filesystem;

struct ReplaySetup {
  std::string policy = "default";
  std::string host_profile = "intel-xeon-e-2136";
  bool allow_host_writes = false;
};

ReplaySetup ParseHeader(const std::string& path) {
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  ReplaySetup setup;
  absl::string_view line = first;
  EXPECT_TRUE(absl::ConsumePrefix(&line, "# replay:")) << path << ": first line must be '# replay: ...'";
  for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&word, "--policy=")) {
      setup.policy = std::string(word);
    } else if (absl::ConsumePrefix(&word, "--host-profile=")) {
      setup.host_profile = std::string(word);
    } else if (word == "--allow-host-writes") {
      setup.allow_host_writes = true;
    } else {
      ADD_FAILURE() << path << ": unknown replay option " << word;
    }
  }
  return setup;
}

// The in-process world of one replay: sim host, store, dispatcher.
struct World {
  std::unique_ptr<hosts::SimHost> host;
  std::unique_ptr<policy::Store> store;
  std::unique_ptr<dispatch::Dispatcher> dispatcher;
  std::unique_ptr<dispatch::Dispatcher::Session> session;

  explicit World(const ReplaySetup& setup) {
    auto opened = hosts::OpenSimHost(setup.host_profile);
    EXPECT_TRUE(opened.ok()) << opened.status();
    host = *std::move(opened);
    // A shipped policy's name, or a file under tests/replay/.
    auto loaded = absl::EndsWith(setup.policy, ".textproto")
                      ? policy::LoadPolicyFile(absl::StrCat(std::getenv("PVEMU_SOURCE_ROOT"),
                                                            "/tests/replay/", setup.policy))
                      : policy::ParsePolicy(policy::ShippedPolicy(setup.policy),
                                            absl::StrCat(setup.policy, ".textproto"));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    store = std::move(policy::Store::FromPolicy(loaded->policy, loaded->source, host->vendor()))
                .value();
    dispatch::DispatchOptions options;
    options.allow_host_writes = setup.allow_host_writes;
    dispatcher = std::make_unique<dispatch::Dispatcher>(*store, *host, nullptr, options);
    session = dispatcher->NewSession();
  }

  v1::Outcome Run(const v1::TrapRecord& rec) {
    auto trap = emulator::TrapFromProto(rec.trap());
    EXPECT_TRUE(trap.ok()) << trap.status();
    emulator::Instruction insn;
    emulator::DecodeError error;
    emulator::Outcome out = session->Handle(*trap, &insn, &error);
    v1::Outcome msg;
    dispatch::FillOutcome(*trap, out, insn, error, session->generation(), &msg);
    return msg;
  }
};

std::string SourceRoot() { return std::getenv("PVEMU_SOURCE_ROOT"); }

std::vector<std::string> CorpusFiles() {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(SourceRoot() + "/tests/replay")) {
    if (entry.path().extension() == ".textproto") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// An expectation that says exactly what `outcome` did (for regeneration).
v1::Expectation ExpectationOf(const v1::TrapRecord& rec, const v1::Outcome& outcome) {
  v1::Expectation e;
  e.set_kind(outcome.kind());
  if (outcome.kind() == v1::Outcome::EXCEPTION) e.set_vector(outcome.exception().vector());
  if (outcome.kind() != v1::Outcome::COMPLETED) return e;
  const std::string& insn = rec.trap().insn();
  const std::string m = outcome.instruction().mnemonic();
  if (m == "rdmsr") {
    e.set_value((outcome.regs().rdx() << 32) | (outcome.regs().rax() & 0xffffffffu));
  } else if (m == "in") {
    const uint32_t bits = outcome.instruction().operand_size();
    e.set_value(outcome.regs().rax() & (bits == 32 ? 0xffffffffu : (1u << bits) - 1));
  } else if (m == "cpuid") {
    e.mutable_cpuid()->set_eax(static_cast<uint32_t>(outcome.regs().rax()));
    e.mutable_cpuid()->set_ebx(static_cast<uint32_t>(outcome.regs().rbx()));
    e.mutable_cpuid()->set_ecx(static_cast<uint32_t>(outcome.regs().rcx()));
    e.mutable_cpuid()->set_edx(static_cast<uint32_t>(outcome.regs().rdx()));
  }
  (void)insn;
  return e;
}

TEST(ReplayCorpusTest, EveryRecordMatchesItsHandWrittenExpectation) {
  std::vector<std::string> files = CorpusFiles();
  ASSERT_GE(files.size(), 4u) << "the replay corpus is missing";
  const bool regenerate = std::getenv("PVEMU_REGENERATE") != nullptr;
  int records = 0;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    ReplaySetup setup = ParseHeader(path);
    World world(setup);
    auto reader = traplog::TrapLogReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status();
    v1::TrapLog regenerated;
    v1::TrapRecord rec;
    int index = 0;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&rec);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      ++index;
      ++records;
      ASSERT_TRUE(rec.has_expect()) << "record " << index << " has no expectation";
      v1::Outcome outcome = world.Run(rec);
      if (regenerate) {
        v1::TrapRecord* out = regenerated.add_record();
        *out = rec;
        *out->mutable_expect() = ExpectationOf(rec, outcome);
        continue;
      }
      std::string diff;
      EXPECT_TRUE(traplog::CheckExpectation(rec, outcome, &diff).ok())
          << "record " << index << " (" << rec.note() << "): " << diff << "\n  " << outcome.detail();
    }
    if (regenerate) {
      // Keep the leading comment block, rewrite the records.
      std::ifstream in(path);
      std::string header, line;
      while (std::getline(in, line) && absl::StartsWith(line, "#")) header += line + "\n";
      std::ofstream out(path);
      out << header << ToTextProto(regenerated);
    }
  }
  std::printf("%d corpus records checked\n", records);
}

// The captured host logs replay to what the hosts printed, under the preset
// that reproduces each host: KVM with ignore_msrs for the KVM logs, the
// default (Xen 4.15+) for the Xen console.
struct SampleCase {
  const char* file;
  const char* policy;
  int traps;       // trap lines in the log
  int mismatches;  // records whose expectation the sim host cannot reproduce
};

TEST(ReplaySamplesTest, CapturedHostLogsReplayToWhatTheHostDid) {
  const fs::path samples = fs::path(SourceRoot()) / "tests" / "traplog" / "samples";
  const SampleCase cases[] = {
      {"kvm-dmesg-i915ovmfpkg-issue-22.log", "kvm-ignore-msrs", 12, 0},
      {"kvm-journal-virt-manager-issue-570.log", "kvm-ignore-msrs", 4, 0},
      {"xen-dmesg-qubes-issue-9501.log", "default", 11, 0},
      // One CPUID record: the traced CPU is not the sim host's E-2136, so
      // its CPUID values cannot match; the MSR records do.
      {"ftrace-kvm_msr-lkml-cr0wp-nested-intel.log", "kvm-ignore-msrs", 4, 1},
  };
  for (const SampleCase& c : cases) {
    SCOPED_TRACE(c.file);
    ReplaySetup setup;
    setup.policy = c.policy;
    World world(setup);
    int traps = 0, mismatches = 0, checked = 0;
    auto stats = traplog::ImportLogFile(
        "auto", (samples / c.file).string(), [&](v1::TrapRecord&& rec) -> absl::Status {
          ++traps;
          v1::Outcome outcome = world.Run(rec);
          if (!rec.has_expect()) return absl::OkStatus();
          ++checked;
          std::string diff;
          if (!traplog::CheckExpectation(rec, outcome, &diff).ok()) {
            ++mismatches;
            EXPECT_THAT(rec.trap().insn(), std::string("\x0f\xa2", 2))
                << "an MSR record mismatched: " << rec.source() << ": " << diff;
          }
          return absl::OkStatus();
        });
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(traps, c.traps);
    EXPECT_EQ(checked, c.traps) << "every sample trap line says what the host did";
    EXPECT_EQ(mismatches, c.mismatches);
  }
}

}  // namespace
}  // namespace pvemu::testing
