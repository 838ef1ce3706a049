// From learning to enforcing through the daemon: a domain switched to LEARN
// with `policy set-mode`, traps through gRPC Emulate, `stats --learned`,
// `suggest` from pvemud's list and from the capture, the draft validated
// after the policy it was learned under, `replay --changes` and
// `policy apply --dry-run --against` (exit 0 / 2 / 1), and the bad inputs.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Deny by default: GP for IA32_ENERGY_PERF_BIAS, ZERO for IA32_TSC_AUX,
// only port 0x80.
constexpr char kBase[] = R"pb(default {
  unknown_msr: UNKNOWN_GP
  msr { msr: "IA32_ENERGY_PERF_BIAS" read: GP write: GP }
  msr { msr: "IA32_TSC_AUX" read: ZERO write: IGNORE }
  io_port { first: 0x80 last: 0x80 }
}
)pb";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class LearnLoopTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    base_ = dir_ + "/base.textproto";
    std::ofstream(base_) << kBase;
    capture_ = dir_ + "/capture.traps";
    options_.policy = base_;
    options_.capture = capture_;
    options_.count_msrs = true;
  }
  // pvemuctl offline, and against the daemon.
  CommandRun Ctl(const std::string& args) {
    return RunCommand(absl::StrCat(std::getenv("PVEMU_BUILD_ROOT"), "/client/pvemuctl ", args));
  }
  CommandRun Live(const std::string& args) {
    return Ctl(absl::StrCat("--server=", options_.listen, " ", args));
  }
  // One trap through the Emulate RPC, as a trap source sends it.
  v1::Outcome Emulate(const std::string& insn, uint64_t rcx, uint64_t rdx = 0, uint64_t rip = 0x1000) {
    v1::Trap trap;
    trap.set_domain(5);
    trap.set_mode(v1::MODE_64);
    trap.set_insn(insn);
    trap.mutable_regs()->set_rcx(rcx);
    trap.mutable_regs()->set_rdx(rdx);
    trap.mutable_regs()->set_rip(rip);
    grpc::ClientContext context;
    v1::Outcome out;
    EXPECT_TRUE(emulator_->Emulate(&context, trap, &out).ok());
    return out;
  }
  // The guest: reads EPB twice, writes it once, reads TSC_AUX (allowed),
  // does a 32-bit IN at 0x510, an OUT at 0x80 (granted) and reads 0x12345.
  void RunGuest() {
    Emulate(std::string("\x0f\x32", 2), 0x1b0);
    Emulate(std::string("\x0f\x32", 2), 0x1b0);
    Emulate(std::string("\x0f\x30", 2), 0x1b0, 0, 0x1010);
    Emulate(std::string("\x0f\x32", 2), 0xc0000103);
    Emulate(std::string("\xed", 1), 0, 0x510, 0x1030);
    Emulate(std::string("\xe6\x80", 2), 0);
    Emulate(std::string("\x0f\x32", 2), 0x12345, 0, 0x1050);
  }
  // Stops the daemon, so the capture is complete, and drafts from it.
  std::string DraftFromCapture() {
    StopDaemon();
    CommandRun draft = Ctl("suggest " + capture_);
    EXPECT_EQ(draft.status, 0) << draft.output;
    std::ofstream(dir_ + "/draft.textproto") << draft.output;
    return draft.output;
  }

  std::string base_, capture_;
};

TEST_F(LearnLoopTest, ALearningDomainSeesNoFaultAndStatsListWhatWasRelaxed) {
  StartDaemon();
  ASSERT_EQ(Live("policy set-mode --domain=5 learn").status, 0);
  EXPECT_EQ(Emulate(std::string("\x0f\x32", 2), 0x1b0).kind(), v1::Outcome::COMPLETED);
  RunGuest();
  CommandRun learned = Live("stats --learned");
  ASSERT_EQ(learned.status, 0) << learned.output;
  EXPECT_THAT(learned.output, HasSubstr("rdmsr  0x1b0      read            3 #GP(0)  ZERO"));
  EXPECT_THAT(learned.output, HasSubstr("wrmsr  0x1b0      write           1 #GP(0)  IGNORE"));
  EXPECT_THAT(learned.output, HasSubstr("in     0x510+4    read            1 FLOAT   DEVICE"));
  EXPECT_THAT(learned.output, HasSubstr("0x12345"));
  EXPECT_THAT(learned.output, Not(HasSubstr("0xc0000103")));  // allowed: no rule needed
  CommandRun msrs = Live("stats --msrs --domain=5");
  EXPECT_THAT(msrs.output, HasSubstr("read LEARN_RELAXED 3, write LEARN_RELAXED 1"));
  CommandRun explain = Live("explain --domain=5 --msr=0x1b0");
  EXPECT_THAT(explain.output, HasSubstr("injects #GP(0); while domain 5 learns"));
  EXPECT_THAT(explain.output, HasSubstr("reads 0 instead"));
  // Back to ENFORCE, live: the next trap faults.
  ASSERT_EQ(Live("policy set-mode --domain=5 enforce").status, 0);
  EXPECT_EQ(Emulate(std::string("\x0f\x32", 2), 0x1b0).kind(), v1::Outcome::EXCEPTION);
}

TEST_F(LearnLoopTest, SuggestFromTheDaemonDraftsExactlyTheRelaxedAccesses) {
  StartDaemon();
  ASSERT_EQ(Live("policy set-mode --domain=5 learn").status, 0);
  RunGuest();
  CommandRun draft = Live("suggest");
  ASSERT_EQ(draft.status, 0) << draft.output;
  EXPECT_THAT(draft.output, HasSubstr("msr: \"IA32_ENERGY_PERF_BIAS\"\n    read: ZERO\n    write: IGNORE"));
  EXPECT_THAT(draft.output, HasSubstr("msr: \"0x12345\"\n    read: ZERO\n"));
  EXPECT_THAT(draft.output, HasSubstr("io_port {\n    first: 1296\n    last: 1299"));
  EXPECT_THAT(draft.output, Not(HasSubstr("IA32_TSC_AUX")));
  EXPECT_THAT(draft.output, Not(HasSubstr("mode:")));
}

TEST_F(LearnLoopTest, TheDraftFromTheCaptureMakesEnforceAnswerAsLearningDid) {
  StartDaemon();
  ASSERT_EQ(Live("policy set-mode --domain=5 learn").status, 0);
  RunGuest();
  const std::string draft = DraftFromCapture();
  EXPECT_THAT(draft, HasSubstr("read: ZERO"));
  // The draft validates after the policy it was learned under ...
  std::ofstream(dir_ + "/enforce.textproto") << kBase << draft;
  CommandRun valid = Ctl("validate " + dir_ + "/enforce.textproto");
  ASSERT_EQ(valid.status, 0) << valid.output;
  // ... under which ENFORCE answers every recorded trap as learning did.
  CommandRun same = Ctl("replay --changes --policy=" + dir_ + "/enforce.textproto " + capture_);
  EXPECT_EQ(same.status, 0) << same.output;
  EXPECT_THAT(same.output, HasSubstr("0 accesses answered differently"));
}

TEST_F(LearnLoopTest, ReplayChangesAgainstTheBaseListsExactlyTheRelaxedAccesses) {
  StartDaemon();
  ASSERT_EQ(Live("policy set-mode --domain=5 learn").status, 0);
  RunGuest();
  StopDaemon();
  CommandRun text = Ctl("replay --changes --policy=" + base_ + " " + capture_);
  EXPECT_EQ(text.status, 2) << text.output;
  EXPECT_THAT(text.output,
              HasSubstr("domain 5 rdmsr 0x1b0 (IA32_ENERGY_PERF_BIAS) read: recorded completed "
                        "0x0, candidate exception #GP, 2 traps, rule " + base_ +
                        ":3 (default) BREAKING"));
  EXPECT_THAT(text.output, HasSubstr("domain 5 wrmsr 0x1b0 (IA32_ENERGY_PERF_BIAS) write: "
                                     "recorded completed, candidate exception #GP, 1 trap"));
  EXPECT_THAT(text.output, HasSubstr("domain 5 rdmsr 0x12345 read"));
  // A denied port floats: changed, not breaking.
  EXPECT_THAT(text.output, HasSubstr("domain 5 in 0x510 read: recorded device, candidate "
                                     "completed, 1 trap, rule io_port\n"));
  EXPECT_THAT(text.output, HasSubstr("4 accesses answered differently (3 breaking)"));
  CommandRun json = Ctl("-o json replay --changes --policy=" + base_ + " " + capture_);
  EXPECT_EQ(json.status, 2);
  EXPECT_THAT(json.output,
              HasSubstr("{\"domain\":5,\"instruction\":\"wrmsr\",\"index\":\"0x1b0\",\"access\":"
                        "\"write\",\"recorded\":\"completed\",\"candidate\":\"exception #GP\","
                        "\"count\":1,\"rule\":\"" + base_ + ":3 (default)\",\"breaking\":true}"));
}

TEST_F(LearnLoopTest, ApplyDryRunReportsAgainstTheCaptureAndAppliesNothing) {
  StartDaemon();
  ASSERT_EQ(Live("policy set-mode --domain=5 learn").status, 0);
  RunGuest();
  const std::string draft_file = dir_ + "/draft.textproto";
  std::ofstream(draft_file) << Live("suggest").output;
  // The capture is complete once its daemon stops; the next one serves on
  // without capturing, domain 5 still learning (its state dir).
  StopDaemon();
  options_.capture.clear();
  StartDaemon();
  // The drafted layer as domain 5's layer (no mode: ENFORCE) changes nothing
  // the guest saw; the base policy alone breaks it.
  CommandRun fits = Live("policy apply -f " + draft_file + " --domain=5 --dry-run --against=" +
                        capture_);
  EXPECT_EQ(fits.status, 0) << fits.output;
  CommandRun breaks = Live("policy apply -f " + base_ + " --dry-run --against=" + capture_);
  EXPECT_EQ(breaks.status, 2) << breaks.output;
  EXPECT_THAT(breaks.output, HasSubstr("BREAKING"));
  CommandRun after = Live("-o json stats");
  EXPECT_THAT(after.output, HasSubstr("\"generation\":2,"));  // nothing applied
}

TEST_F(LearnLoopTest, BadInputIsNamed) {
  StartDaemon();
  CommandRun word = Live("policy set-mode --domain=5 lern");
  EXPECT_EQ(word.status, 2);
  EXPECT_THAT(word.output, HasSubstr("unknown mode 'lern'; use learn or enforce"));
  // An unknown mode word in a policy file: FILE:LINE:COL.
  std::ofstream(dir_ + "/bad.textproto") << "default {\n  mode: LERN\n}\n";
  CommandRun file = Ctl("validate " + dir_ + "/bad.textproto");
  EXPECT_EQ(file.status, 1);
  EXPECT_THAT(file.output, HasSubstr("bad.textproto:3:1: Unknown enumeration value of \"LERN\""));
  // A candidate that does not validate: FILE:LINE:COL, exit 1.
  CommandRun candidate = Ctl("replay --changes --policy=" + dir_ + "/bad.textproto " + capture_);
  EXPECT_EQ(candidate.status, 1);
  EXPECT_THAT(candidate.output, HasSubstr("bad.textproto:3:1"));
  RunGuest();
  StopDaemon();
  // A truncated capture: the byte offset.
  const std::string whole = ReadFile(capture_);
  std::ofstream(dir_ + "/cut.traps") << whole.substr(0, whole.size() - 10);
  for (const std::string& cmd : {"suggest " + dir_ + "/cut.traps",
                                 "replay --changes --policy=" + base_ + " " + dir_ + "/cut.traps"}) {
    CommandRun cut = Ctl(cmd);
    EXPECT_EQ(cut.status, 1) << cmd;
    EXPECT_THAT(cut.output, HasSubstr("cut.traps")) << cmd;
    EXPECT_THAT(cut.output, HasSubstr("offset")) << cmd;
  }
  // A foreign file given as a capture.
  std::ofstream(dir_ + "/foreign.traps") << "PVTRAPS9 not a trap log";
  CommandRun foreign = Ctl("replay --changes --policy=" + base_ + " " + dir_ + "/foreign.traps");
  EXPECT_EQ(foreign.status, 1);
  EXPECT_THAT(foreign.output, HasSubstr("foreign.traps"));
}

}  // namespace
}  // namespace pvemu::testing
