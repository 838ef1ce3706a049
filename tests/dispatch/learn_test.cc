// LEARN mode on the trap path (policy.proto, PolicyMode): a learning domain
// gets what ENFORCE gives except where the policy would fault it or deny it
// a port, which it gets relaxed, counted, and its first one recorded with
// the rule that would have decided it; an enforcing domain is untouched.
#include <memory>
#include <string>
#include <vector>

#include "dispatch/dispatch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hosts/profiles.h"
#include "hosts/sim_host.h"
#include "policy/loader.h"
#include "policy/store.h"
#include "base/textproto.h"
#include "tests/status_matchers.h"

namespace pvemu::dispatch {
namespace {

using ::pvemu::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// Deny by default; domain 5 learns, domain 6 enforces the same rules.
constexpr char kPolicy[] = R"pb(
default {
  unknown_msr: UNKNOWN_GP
  msr { msr: "IA32_ENERGY_PERF_BIAS" read: GP write: GP }
  msr { msr: "IA32_TSC_AUX" read: ZERO write: SHADOW writable_mask: 0xff on_reserved_bits: RESERVED_GP }
  io_port { first: 0x80 last: 0x80 }
}
domain { domain: 5 mode: LEARN }
domain { domain: 6 }
)pb";

constexpr uint32_t kEpb = 0x1b0;
constexpr uint32_t kTscAux = 0xc0000103;
constexpr uint32_t kUnnamed = 0x12345;

emulator::Trap Msr(uint32_t domain, bool write, uint32_t msr, uint64_t value = 0) {
  emulator::Trap t;
  t.domain = domain;
  t.insn[0] = 0x0f;
  t.insn[1] = write ? 0x30 : 0x32;
  t.insn_len = 2;
  t.regs.gpr[emulator::kRcx] = msr;
  t.regs.gpr[emulator::kRax] = value & 0xffffffffu;
  t.regs.gpr[emulator::kRdx] = value >> 32;
  t.regs.rip = 0x1000;
  return t;
}

// IN EAX, imm8 (E5 ib) or OUT imm8, AL (E6 ib).
emulator::Trap Port(uint32_t domain, bool out, uint8_t port) {
  emulator::Trap t;
  t.domain = domain;
  t.insn[0] = out ? 0xe6 : 0xe5;
  t.insn[1] = port;
  t.insn_len = 2;
  t.regs.rip = 0x2000;
  return t;
}

class LearnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::HostProfile profile;
    ASSERT_THAT(ParseTextProto(hosts::ShippedProfile("intel-xeon-e-2136"), "intel", &profile),
                IsOk());
    host_ = std::move(hosts::SimHost::Create(profile, "intel")).value();
    auto loaded = policy::ParsePolicy(kPolicy, "learn.textproto");
    ASSERT_THAT(loaded, IsOk());
    store_ = std::move(policy::Store::FromPolicy(loaded->policy, loaded->source, v1::INTEL)).value();
    DispatchOptions options;
    options.log = [this](absl::string_view line) { log_.emplace_back(line); };
    dispatcher_ = std::make_unique<Dispatcher>(*store_, *host_, nullptr, options);
    session_ = dispatcher_->NewSession();
  }

  std::unique_ptr<hosts::SimHost> host_;
  std::unique_ptr<policy::Store> store_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<Dispatcher::Session> session_;
  std::vector<std::string> log_;
};

TEST_F(LearnTest, AGpRuleReadsZeroAndAWriteIsDroppedWhileLearning) {
  const emulator::Outcome read = session_->Handle(Msr(5, false, kEpb));
  ASSERT_EQ(read.kind, emulator::OutcomeKind::kCompleted);
  EXPECT_EQ(read.GprAfter(emulator::kRax, Msr(5, false, kEpb).regs), 0u);
  EXPECT_TRUE(read.relaxed);
  const emulator::Outcome write = session_->Handle(Msr(5, true, kEpb, 6));
  ASSERT_EQ(write.kind, emulator::OutcomeKind::kCompleted);
  EXPECT_TRUE(write.write_dropped);
  EXPECT_TRUE(write.relaxed);
}

TEST_F(LearnTest, TheSameRulesStillFaultAnEnforcingDomain) {
  const emulator::Outcome read = session_->Handle(Msr(6, false, kEpb));
  EXPECT_EQ(read.kind, emulator::OutcomeKind::kException);
  EXPECT_FALSE(read.relaxed);
  EXPECT_EQ(session_->Handle(Msr(6, false, kUnnamed)).kind, emulator::OutcomeKind::kException);
  EXPECT_EQ(session_->Handle(Port(6, false, 0x70)).port_denied, true);
  EXPECT_THAT(dispatcher_->Learned(), IsEmpty());
}

TEST_F(LearnTest, AnUnknownMsrIsRelaxedAndWhatCompletesAnywayIsNotRecorded) {
  EXPECT_TRUE(session_->Handle(Msr(5, false, kUnnamed)).relaxed);
  // TSC_AUX reads ZERO by rule: it completes in ENFORCE too.
  const emulator::Outcome aux = session_->Handle(Msr(5, false, kTscAux));
  EXPECT_EQ(aux.kind, emulator::OutcomeKind::kCompleted);
  EXPECT_FALSE(aux.relaxed);
  const std::vector<LearnedAccess> learned = dispatcher_->Learned();
  ASSERT_THAT(learned, SizeIs(1));
  EXPECT_EQ(learned[0].index, kUnnamed);
  EXPECT_EQ(learned[0].rule, "learn.textproto:3 (unknown-msr)");
}

TEST_F(LearnTest, AReservedBitWriteIsDroppedAndRecordedButAnAllowedOneIsNot) {
  const emulator::Outcome ok = session_->Handle(Msr(5, true, kTscAux, 0x12));
  EXPECT_EQ(ok.kind, emulator::OutcomeKind::kCompleted);
  EXPECT_FALSE(ok.relaxed);
  const emulator::Outcome reserved = session_->Handle(Msr(5, true, kTscAux, 0x1234));
  EXPECT_EQ(reserved.kind, emulator::OutcomeKind::kCompleted);
  EXPECT_TRUE(reserved.write_dropped);
  EXPECT_TRUE(reserved.relaxed);
  // ENFORCE faults the same write.
  EXPECT_EQ(session_->Handle(Msr(6, true, kTscAux, 0x1234)).kind,
            emulator::OutcomeKind::kException);
}

TEST_F(LearnTest, APortOutsideIoPortGoesToTheDeviceAndIsRecordedWithItsWidth) {
  const emulator::Outcome in = session_->Handle(Port(5, false, 0x70));
  EXPECT_EQ(in.kind, emulator::OutcomeKind::kDeviceIo);
  EXPECT_FALSE(in.port_denied);
  EXPECT_TRUE(in.relaxed);
  // A granted port is not a relaxed access.
  EXPECT_FALSE(session_->Handle(Port(5, true, 0x80)).relaxed);
  const std::vector<LearnedAccess> learned = dispatcher_->Learned();
  ASSERT_THAT(learned, SizeIs(1));
  EXPECT_EQ(learned[0].insn, emulator::InsnKind::kIn);
  EXPECT_EQ(learned[0].index, 0x70u);
  EXPECT_EQ(learned[0].width, 4);
  EXPECT_EQ(learned[0].enforcing, "FLOAT");
  EXPECT_EQ(learned[0].given, "DEVICE");
}

TEST_F(LearnTest, EachAccessIsCountedAndItsFirstLoggedOnceAcrossSessions) {
  auto other = dispatcher_->NewSession();
  for (int i = 0; i < 3; ++i) session_->Handle(Msr(5, false, kEpb));
  emulator::Trap later = Msr(5, false, kEpb);
  later.regs.rip = 0x9999;
  other->Handle(later);
  other.reset();  // an ended session's counts stay
  const std::vector<LearnedAccess> learned = dispatcher_->Learned();
  ASSERT_THAT(learned, SizeIs(1));
  EXPECT_EQ(learned[0].count, 4u);
  EXPECT_EQ(learned[0].rip, 0x1000u);  // the first
  EXPECT_EQ(learned[0].rule, "learn.textproto:4 (default)");
  EXPECT_EQ(learned[0].enforcing, "#GP(0)");
  EXPECT_EQ(learned[0].given, "ZERO");
  ASSERT_THAT(log_, SizeIs(1));
  EXPECT_THAT(log_[0], HasSubstr("learning: first rdmsr of MSR 0x1b0 by domain 5: "
                                 "learn.textproto:4 (default) enforces #GP(0), answered ZERO"));
}

TEST_F(LearnTest, APrivilegeFaultIsNotThePolicysAndStays) {
  emulator::Trap user = Msr(5, false, kEpb);
  user.cpl = 3;
  const emulator::Outcome out = session_->Handle(user);
  EXPECT_EQ(out.kind, emulator::OutcomeKind::kException);
  EXPECT_FALSE(out.relaxed);
  EXPECT_THAT(dispatcher_->Learned(), IsEmpty());
}

TEST_F(LearnTest, SetModeSwitchesADomainAtItsNextTrap) {
  ASSERT_EQ(session_->Handle(Msr(5, false, kEpb)).kind, emulator::OutcomeKind::kCompleted);
  ASSERT_THAT(store_->SetMode(policy::LayerRef::Domain(5), v1::ENFORCE, {}), IsOk());
  EXPECT_EQ(session_->Handle(Msr(5, false, kEpb)).kind, emulator::OutcomeKind::kException);
  // A domain with no layer gets one holding only the mode.
  ASSERT_THAT(store_->SetMode(policy::LayerRef::Domain(9), v1::LEARN, {}), IsOk());
  EXPECT_TRUE(session_->Handle(Msr(9, false, kEpb)).relaxed);
  EXPECT_TRUE(store_->Current()->ForDomain(9).learning());
}

TEST_F(LearnTest, ADomainLayersModeOverridesTheDefaultLayers) {
  ASSERT_THAT(store_->SetMode(policy::LayerRef::Default(), v1::LEARN, {}), IsOk());
  EXPECT_TRUE(session_->Handle(Msr(7, false, kEpb)).relaxed);   // no layer: the default's
  EXPECT_TRUE(session_->Handle(Msr(6, false, kEpb)).relaxed);   // its layer sets no mode
  ASSERT_THAT(store_->SetMode(policy::LayerRef::Domain(6), v1::ENFORCE, {}), IsOk());
  EXPECT_EQ(session_->Handle(Msr(6, false, kEpb)).kind, emulator::OutcomeKind::kException);
}

}  // namespace
}  // namespace pvemu::dispatch
