// The trap path's session state, in process: a session sees an edit at its
// next trap, its per-session domain cache never mixes up domains that share
// a slot, and the path without the switchable features (DispatchTesting::HandleWithoutObservers, for
// the benchmarks) answers exactly as the full one and counts the same, and
// shadow registers stay each vCPU's own as a session moves between vCPUs;
// with the counting breakdown on or off, observers see every trap while
// active, and every trap counts either way.
#include "dispatch/dispatch.h"
#include "dispatch/dispatch_testing.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "hosts/profiles.h"
#include "policy/store.h"
#include "base/textproto.h"
#include "hosts/sim_host.h"
#include "tests/bench/trap_mix.h"
#include "tests/dispatch/dispatcher_fixture.h"

namespace pvemu::dispatch {
namespace {

constexpr uint32_t kEnergyPerfBias = 0x1b0;

emulator::Trap Rdmsr(uint32_t domain, uint32_t msr) {
  emulator::Trap t;
  t.domain = domain;
  t.insn[0] = 0x0f;
  t.insn[1] = 0x32;
  t.insn_len = 2;
  t.regs.gpr[emulator::kRcx] = msr;
  return t;
}

// What a completed RDMSR read: it writes both EAX and EDX, so the trap's
// registers never show through.
uint64_t ReadValue(const emulator::Outcome& out) {
  EXPECT_TRUE(out.Wrote(emulator::kRax) && out.Wrote(emulator::kRdx));
  const emulator::Regs at_trap;
  return (out.GprAfter(emulator::kRdx, at_trap) << 32) |
         (out.GprAfter(emulator::kRax, at_trap) & 0xffffffffu);
}


class DispatchTest : public ::pvemu::testing::DefaultDispatcherTest {
 protected:

  // A CONST read of IA32_ENERGY_PERF_BIAS in `domain`'s overlay.
  void SetConst(uint32_t domain, uint64_t value) {
    v1::MsrRule rule;
    rule.set_msr("IA32_ENERGY_PERF_BIAS");
    rule.set_read(v1::ReadAction::CONST);
    rule.set_value(value);
    ASSERT_TRUE(store_->SetRule(policy::LayerRef::Domain(domain), rule, policy::EditOptions()).ok());
  }

};

TEST_F(DispatchTest, SessionSeesAnEditAtItsNextTrap) {
  auto session = dispatcher_->NewSession();
  const emulator::Outcome before = session->Handle(Rdmsr(3, kEnergyPerfBias));
  const uint64_t generation = session->generation();
  SetConst(3, 0x42);
  const emulator::Outcome after = session->Handle(Rdmsr(3, kEnergyPerfBias));
  EXPECT_EQ(session->generation(), generation + 1);
  ASSERT_EQ(after.kind, emulator::OutcomeKind::kCompleted);
  EXPECT_EQ(ReadValue(after), 0x42u);
  EXPECT_FALSE(before.kind == emulator::OutcomeKind::kCompleted && ReadValue(before) == 0x42u);
  // A domain without the overlay is untouched by it.
  const emulator::Outcome other = session->Handle(Rdmsr(4, kEnergyPerfBias));
  EXPECT_EQ(other.kind, before.kind);
}

TEST_F(DispatchTest, DomainsSharingACacheSlotKeepTheirOwnPolicies) {
  // 3, 19 and 35 fall in the same slot of the session's 16-entry cache.
  SetConst(3, 0x3);
  SetConst(19, 0x19);
  SetConst(35, 0x35);
  auto session = dispatcher_->NewSession();
  for (int round = 0; round < 3; ++round) {
    for (uint32_t domain : {3u, 19u, 35u, 19u, 3u}) {
      const emulator::Outcome out = session->Handle(Rdmsr(domain, kEnergyPerfBias));
      ASSERT_EQ(out.kind, emulator::OutcomeKind::kCompleted) << domain;
      EXPECT_EQ(ReadValue(out), domain == 3 ? 0x3u : domain == 19 ? 0x19u : 0x35u) << domain;
    }
  }
}

TEST_F(DispatchTest, BarePathAnswersAndCountsLikeTheFullOne) {
  auto full = dispatcher_->NewSession();
  auto bare = dispatcher_->NewSession();
  const std::vector<emulator::Trap> traps = bench::MakeTrapMix(1024);
  for (const emulator::Trap& t : traps) {
    const emulator::Outcome a = full->Handle(t);
    const emulator::Outcome b = DispatchTesting::HandleWithoutObservers(*bare, t);
    ASSERT_EQ(a.kind, b.kind);
    ASSERT_EQ(a.vector, b.vector);
    const emulator::Regs after_a = a.RegsAfter(t.regs), after_b = b.RegsAfter(t.regs);
    ASSERT_EQ(after_a.rip, after_b.rip);
    for (int r = 0; r < 16; ++r) ASSERT_EQ(after_a.gpr[r], after_b.gpr[r]) << r;
  }
  EXPECT_EQ(dispatcher_->Stats().traps, 2 * traps.size());
}

// Shadow registers are each vCPU's own: traps of one session that move
// between vCPUs and domains each reach their own registers, and a second
// session reaches the same ones.
TEST_F(DispatchTest, ShadowRegistersStayEachVcpusOwnAsASessionMovesBetweenThem) {
  for (uint32_t domain : {1u, 2u}) {
    v1::MsrRule rule;
    rule.set_msr("IA32_ENERGY_PERF_BIAS");
    rule.set_read(v1::ReadAction::SHADOW);
    rule.set_write(v1::WriteAction::SHADOW);
    rule.set_value(7);
    ASSERT_TRUE(store_->SetRule(policy::LayerRef::Domain(domain), rule, policy::EditOptions()).ok());
  }
  const auto trap = [](uint32_t domain, uint32_t vcpu, bool write, uint64_t value) {
    emulator::Trap t = Rdmsr(domain, kEnergyPerfBias);
    t.vcpu = vcpu;
    if (write) {
      t.insn[1] = 0x30;
      t.regs.gpr[emulator::kRax] = value & 0xffffffffu;
      t.regs.gpr[emulator::kRdx] = value >> 32;
    }
    return t;
  };
  auto a = dispatcher_->NewSession();
  auto b = dispatcher_->NewSession();
  const std::pair<uint32_t, uint32_t> vcpus[] = {{1, 0}, {1, 1}, {2, 0}, {1, 0}, {2, 1}, {2, 1}};
  // Untouched, each starts at the rule's value.
  for (const auto& [domain, vcpu] : vcpus) {
    EXPECT_EQ(ReadValue(a->Handle(trap(domain, vcpu, false, 0))), 7u) << domain << "/" << vcpu;
  }
  for (uint64_t round = 1; round <= 3; ++round) {
    for (const auto& [domain, vcpu] : vcpus) {
      const uint64_t value = (round << 40) | (domain << 8) | vcpu;
      ASSERT_EQ(a->Handle(trap(domain, vcpu, true, value)).kind, emulator::OutcomeKind::kCompleted);
    }
    for (const auto& [domain, vcpu] : vcpus) {
      const uint64_t want = (round << 40) | (domain << 8) | vcpu;
      EXPECT_EQ(ReadValue(a->Handle(trap(domain, vcpu, false, 0))), want) << domain << "/" << vcpu;
      EXPECT_EQ(ReadValue(b->Handle(trap(domain, vcpu, false, 0))), want) << domain << "/" << vcpu;
    }
  }
  // A vCPU neither session has seen still starts at the rule's value.
  EXPECT_EQ(ReadValue(b->Handle(trap(1, 5, false, 0))), 7u);
}

// An observer that counts what it is shown, switched on and off by the test.
class CountingObserver final : public TrapObserver {
 public:
  void OnTrap(const emulator::Trap&, const emulator::Outcome&, const emulator::Instruction&,
              emulator::DecodeError) override {
    seen.fetch_add(1, std::memory_order_relaxed);
  }
  void Switch(bool on) { SetActive(on); }
  std::atomic<uint64_t> seen{0};
};

uint64_t SumOfKinds(const Dispatcher::Counts& counts) {
  uint64_t n = 0;
  for (const KindCount& k : counts.kinds) n += k.count;
  return n;
}

// The trap path tests every switchable feature at once (the counting
// breakdown and the observers) and then takes the copy of the path for what
// is on: each combination must observe exactly while an observer is active
// and count every trap either way.
TEST(DispatchFeaturesTest, ObserversSeeEveryTrapWhileActiveAndEveryTrapCountsEitherWay) {
  for (const bool counting : {false, true}) {
    SCOPED_TRACE(counting ? "counting on" : "counting off");
    dispatch::DispatchOptions options;
    options.count_by_domain_and_msr = counting;
    testing::DefaultWorld world = testing::MakeDefaultWorld(options);
    CountingObserver observer;
    ASSERT_TRUE(world.dispatcher->AddObserver(&observer).ok());
    auto session = world.dispatcher->NewSession();
    const std::vector<emulator::Trap> traps = bench::MakeTrapMix(512);
    const auto run = [&] {
      for (const emulator::Trap& t : traps) (void)session->Handle(t);
    };
    run();  // added, not active
    EXPECT_EQ(observer.seen.load(), 0u);
    observer.Switch(true);
    run();
    EXPECT_EQ(observer.seen.load(), traps.size());
    observer.Switch(false);
    run();
    EXPECT_EQ(observer.seen.load(), traps.size());
    EXPECT_EQ(world.dispatcher->Stats().traps, 3 * traps.size());
    if (counting) {
      EXPECT_EQ(SumOfKinds(world.dispatcher->CountsByKey()), 3 * traps.size());
    }
    world.dispatcher->RemoveObserver(&observer);
  }
}

}  // namespace
}  // namespace pvemu::dispatch
