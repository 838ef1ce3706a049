// XenMonitor against a fake vm_event ring: each MOV_TO_MSR request becomes a
// WRMSR trap through the Dispatcher and its answer follows the policy (deny
// on #GP and on ignored writes); each CPUID request is answered with the
// policy's leaf over Xen's own answer and RIP past the instruction; every
// request is answered with its vCPU released, including the ones still on
// the ring when the monitor stops. XenPortServer against a fake ioreq page:
// each port access is an IN/OUT trap decided by the io_port policy.
#include "server/xen/xen_monitor.h"
#include "server/xen/xen_port_server.h"

#include <chrono>
#include <deque>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "policy/store.h"
#include "base/textproto.h"
#include "dispatch/audit.h"
#include "dispatch/dispatch.h"
#include "tests/emulator/fakes.h"
#include "tests/heap_counter.h"

namespace pvemu::server {
namespace {

// A ring shared with the test: the test pushes requests, reads responses.
struct FakeRing {
  absl::Mutex mu;
  std::deque<VmEvent> requests ABSL_GUARDED_BY(mu);
  std::vector<VmEventResponse> responses ABSL_GUARDED_BY(mu);
  absl::Status wait_status ABSL_GUARDED_BY(mu);
  int waits ABSL_GUARDED_BY(mu) = 0;
};

class FakeChannel final : public VmEventChannel {
 public:
  explicit FakeChannel(FakeRing* ring) : ring_(ring) {}
  uint32_t domain() const override { return 5; }
  absl::Status Wait(int timeout_ms) override {
    {
      absl::MutexLock lock(&ring_->mu);
      ++ring_->waits;
      if (!ring_->wait_status.ok()) return ring_->wait_status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 5)));
    return absl::OkStatus();
  }
  bool Next(VmEvent* event) override {
    absl::MutexLock lock(&ring_->mu);
    if (ring_->requests.empty()) return false;
    *event = ring_->requests.front();
    ring_->requests.pop_front();
    return true;
  }
  void Respond(const VmEventResponse& response) override {
    absl::MutexLock lock(&ring_->mu);
    ring_->responses.push_back(response);
  }

 private:
  FakeRing* ring_;
};

VmEvent MsrWrite(uint32_t domain, uint32_t vcpu, uint32_t msr, uint64_t new_value,
                 uint64_t old_value = 0) {
  VmEvent e;
  e.kind = VmEvent::Kind::kMsrWrite;
  e.domain = domain;
  e.vcpu = vcpu;
  e.vcpu_paused = true;
  e.msr = msr;
  e.new_value = new_value;
  e.old_value = old_value;
  e.mode = emulator::Mode::k64;
  e.cpl = 0;
  e.regs.rip = 0xffffffff81000000;
  e.raw_reason = 5;  // VM_EVENT_REASON_MOV_TO_MSR
  e.raw_altp2m_idx = 3;
  e.raw_version = 7;
  return e;
}

class XenMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = policy::ParsePolicy(policy::ShippedPolicy("default"), "default.textproto");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto store = policy::Store::FromPolicy(loaded->policy, loaded->source, v1::INTEL);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    host_.msrs[0x1b0] = 6;
    dispatcher_ = std::make_unique<dispatch::Dispatcher>(*store_, host_, &audit_, dispatch::DispatchOptions());
  }

  void Rule(uint32_t domain, const std::string& text) {
    v1::MsrRule rule;
    ASSERT_TRUE(ParseTextProto(text, "rule", &rule).ok()) << text;
    auto edit = store_->SetRule(policy::LayerRef::Domain(domain), rule, policy::EditOptions());
    ASSERT_TRUE(edit.ok()) << edit.status();
  }

  std::unique_ptr<XenMonitor> Monitor() {
    return std::make_unique<XenMonitor>(*dispatcher_,
                                        std::make_unique<FakeChannel>(&ring_));
  }
  void Push(const VmEvent& e) {
    absl::MutexLock lock(&ring_.mu);
    ring_.requests.push_back(e);
  }
  std::vector<VmEventResponse> Responses() {
    absl::MutexLock lock(&ring_.mu);
    return ring_.responses;
  }

  emulator::testing::FakeHost host_;
  std::unique_ptr<policy::Store> store_;
  dispatch::AuditHub audit_;
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
  FakeRing ring_;
};

TEST(TrapFromMsrWriteTest, IsAWrmsrWithTheValueInEdxEax) {
  VmEvent e = MsrWrite(4, 2, 0xc0000103, 0x1122334455667788ull);
  e.regs.gpr[emulator::kRbx] = 9;
  e.mode = emulator::Mode::k32;
  e.cpl = 3;
  emulator::Trap t = TrapFromMsrWrite(e);
  EXPECT_EQ(t.domain, 4u);
  EXPECT_EQ(t.vcpu, 2u);
  EXPECT_EQ(t.mode, emulator::Mode::k32);
  EXPECT_EQ(t.cpl, 3);
  ASSERT_EQ(t.insn_len, 2);
  EXPECT_EQ(t.insn[0], 0x0f);
  EXPECT_EQ(t.insn[1], 0x30);
  EXPECT_EQ(t.regs.gpr[emulator::kRcx], 0xc0000103u);
  EXPECT_EQ(t.regs.gpr[emulator::kRax], 0x55667788u);
  EXPECT_EQ(t.regs.gpr[emulator::kRdx], 0x11223344u);
  EXPECT_EQ(t.regs.gpr[emulator::kRbx], 9u);
  EXPECT_EQ(t.regs.rip, 0xffffffff81000000u);
}

TEST_F(XenMonitorTest, ShadowWriteIsAllowedAndReleasesTheVcpu) {
  Rule(5, R"(msr: "0x1b0" read: SHADOW write: SHADOW)");
  auto monitor = Monitor();
  Push(MsrWrite(5, 1, 0x1b0, 0xf));
  EXPECT_EQ(monitor->Poll(), 1);
  auto r = Responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].deny);
  EXPECT_TRUE(r[0].release_vcpu);
  EXPECT_EQ(r[0].vcpu, 1u);
  EXPECT_EQ(r[0].raw_reason, 5u);
  EXPECT_EQ(r[0].raw_altp2m_idx, 3u);
  EXPECT_EQ(dispatcher_->Stats().completed, 1u);
  // The write went to the shadow, never to the host.
  EXPECT_EQ(host_.writes, 0);
}

TEST_F(XenMonitorTest, GpWriteIsDenied) {
  Rule(5, R"(msr: "0x1b0" read: ZERO write: GP)");
  auto monitor = Monitor();
  Push(MsrWrite(5, 0, 0x1b0, 1));
  monitor->Poll();
  auto r = Responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].deny);
  EXPECT_TRUE(r[0].release_vcpu);
  EXPECT_EQ(monitor->stats().denied, 1u);
  EXPECT_EQ(dispatcher_->Stats().exceptions, 1u);
}

// LEARN on Xen: a monitored write the policy would fault is answered as a
// learning domain's relaxed write (completed, dropped: Xen's DENY, which
// Xen carries out without a fault either way) and recorded for suggest,
// with the rule that would have decided it.
TEST_F(XenMonitorTest, ALearningDomainsGpWriteIsDroppedAndRecorded) {
  Rule(5, R"(msr: "0x1b0" read: ZERO write: GP)");
  ASSERT_TRUE(store_->SetMode(policy::LayerRef::Domain(5), v1::LEARN, {}).ok());
  auto monitor = Monitor();
  Push(MsrWrite(5, 0, 0x1b0, 1));
  Push(MsrWrite(5, 1, 0x1b0, 2));
  EXPECT_EQ(monitor->Poll(), 2);
  auto r = Responses();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].deny);
  EXPECT_TRUE(r[0].release_vcpu);
  EXPECT_EQ(dispatcher_->Stats().completed, 2u);
  EXPECT_EQ(dispatcher_->Stats().exceptions, 0u);
  const std::vector<dispatch::LearnedAccess> learned = dispatcher_->Learned();
  ASSERT_EQ(learned.size(), 1u);
  EXPECT_EQ(learned[0].domain, 5u);
  EXPECT_EQ(learned[0].index, 0x1b0u);
  EXPECT_TRUE(learned[0].write);
  EXPECT_EQ(learned[0].count, 2u);
  EXPECT_EQ(learned[0].enforcing, "#GP(0)");
  EXPECT_EQ(learned[0].given, "IGNORE");
  EXPECT_EQ(learned[0].rip, 0xffffffff81000000u);
  EXPECT_EQ(host_.writes, 0);
}

TEST_F(XenMonitorTest, IgnoredWriteIsDenied) {
  Rule(5, R"(msr: "0x1b0" read: ZERO write: IGNORE)");
  auto monitor = Monitor();
  Push(MsrWrite(5, 0, 0x1b0, 1));
  monitor->Poll();
  auto r = Responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].deny);
  // The instruction "completed" for the emulator; Xen must still drop it.
  EXPECT_EQ(dispatcher_->Stats().completed, 1u);
}

TEST_F(XenMonitorTest, DroppedReservedBitsAreDeniedOtherBitsAllowed) {
  Rule(5, R"(msr: "0x1b0" read: SHADOW write: SHADOW value: 0 writable_mask: 0xf
             on_reserved_bits: RESERVED_DROP)");
  auto monitor = Monitor();
  Push(MsrWrite(5, 0, 0x1b0, 0x3, 0));    // inside the mask
  Push(MsrWrite(5, 0, 0x1b0, 0x100, 0));  // outside: dropped
  EXPECT_EQ(monitor->Poll(), 2);
  auto r = Responses();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[0].deny);
  EXPECT_TRUE(r[1].deny);
}

TEST_F(XenMonitorTest, PassthroughWriteWithoutHostWritesIsDenied) {
  // The daemon's guard (allow_host_writes false): #GP, so Xen drops it.
  Rule(5, R"(msr: "0x1b0" read: PASSTHROUGH write: PASSTHROUGH allow_host_write: true)");
  auto monitor = Monitor();
  Push(MsrWrite(5, 0, 0x1b0, 2));
  monitor->Poll();
  auto r = Responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].deny);
  EXPECT_EQ(host_.writes, 0);
}

TEST_F(XenMonitorTest, UserModeWriteIsDenied) {
  Rule(5, R"(msr: "0x1b0" read: SHADOW write: SHADOW)");
  auto monitor = Monitor();
  VmEvent e = MsrWrite(5, 0, 0x1b0, 1);
  e.cpl = 3;
  Push(e);
  monitor->Poll();
  auto r = Responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].deny);
}

TEST_F(XenMonitorTest, OtherReasonsAreAnsweredWithoutADecision) {
  auto monitor = Monitor();
  VmEvent e;
  e.kind = VmEvent::Kind::kOther;
  e.vcpu = 3;
  e.vcpu_paused = true;
  e.raw_reason = 9;
  Push(e);
  monitor->Poll();
  auto r = Responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].deny);
  EXPECT_TRUE(r[0].release_vcpu);
  EXPECT_EQ(r[0].vcpu, 3u);
  EXPECT_EQ(r[0].raw_reason, 9u);
  EXPECT_EQ(monitor->stats().other, 1u);
  EXPECT_EQ(dispatcher_->Stats().traps, 0u);
}

TEST_F(XenMonitorTest, PolicyEditsApplyToTheNextEvent) {
  Rule(5, R"(msr: "0x1b0" read: SHADOW write: SHADOW)");
  auto monitor = Monitor();
  Push(MsrWrite(5, 0, 0x1b0, 1));
  monitor->Poll();
  Rule(5, R"(msr: "0x1b0" read: SHADOW write: IGNORE)");
  Push(MsrWrite(5, 0, 0x1b0, 2));
  monitor->Poll();
  auto r = Responses();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[0].deny);
  EXPECT_TRUE(r[1].deny);
}

TEST_F(XenMonitorTest, LoopAnswersEventsAndStopDrainsTheRest) {
  Rule(5, R"(msr: "0x1b0" read: ZERO write: GP)");
  auto monitor = Monitor();
  monitor->Start();
  for (int i = 0; i < 50; ++i) Push(MsrWrite(5, i % 4, 0x1b0, i));
  for (int i = 0; i < 500 && Responses().size() < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Requests that arrive after the loop's last Poll are answered by Stop.
  Push(MsrWrite(5, 0, 0x1b0, 99));
  monitor->Stop();
  auto r = Responses();
  ASSERT_EQ(r.size(), 51u);
  for (const VmEventResponse& resp : r) {
    EXPECT_TRUE(resp.release_vcpu);
    EXPECT_TRUE(resp.deny);
  }
  EXPECT_EQ(monitor->stats().events, 51u);
  EXPECT_TRUE(monitor->loop_status().ok());
}

TEST_F(XenMonitorTest, BrokenChannelEndsTheLoopAndStopStillAnswers) {
  {
    absl::MutexLock lock(&ring_.mu);
    ring_.wait_status = absl::UnavailableError("domain went away");
  }
  auto monitor = Monitor();
  monitor->Start();
  for (int i = 0; i < 500 && monitor->loop_status().ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_FALSE(monitor->loop_status().ok());
  Push(MsrWrite(5, 0, 0x1b0, 1));
  monitor.reset();  // destructor stops and drains
  EXPECT_EQ(Responses().size(), 1u);
}

// A policy with CPUID leaves and ports for domain 5, as a file gives it.
constexpr char kCpuidAndPortsPolicy[] = R"(
default { unknown_msr: UNKNOWN_GP }
domain {
  domain: 5
  cpuid { leaf: 6 source: CONST
          set { eax: 0x11111111 ebx: 0x22222222 ecx: 0x33333333 edx: 0x44444444 } }
  cpuid { leaf: 1 source: HOST clear { ecx: 0x80000000 } set { edx: 0x1 } }
  cpuid { leaf: 7 subleaf: 1 source: CONST set { eax: 0x7 } }
  io_port { first: 0x510 last: 0x513 }
}
)";

// Xen's answer for a leaf, as the request carries it in RAX..RDX.
VmEvent Cpuid(uint32_t domain, uint32_t leaf, uint32_t subleaf, emulator::CpuidRegs xen) {
  VmEvent e;
  e.kind = VmEvent::Kind::kCpuid;
  e.domain = domain;
  e.vcpu = 1;
  e.vcpu_paused = true;
  e.leaf = leaf;
  e.subleaf = subleaf;
  e.insn_length = 2;
  e.mode = emulator::Mode::k64;
  e.regs.rip = 0xffffffff81000100;
  e.regs.rflags = 0x246;
  // Xen has already put its answer in the registers; EAX/ECX were the input.
  e.regs.gpr[emulator::kRax] = xen.eax;
  e.regs.gpr[emulator::kRbx] = xen.ebx;
  e.regs.gpr[emulator::kRcx] = xen.ecx;
  e.regs.gpr[emulator::kRdx] = xen.edx;
  e.regs.gpr[emulator::kRsi] = 0x5151;
  e.raw_reason = 10;  // VM_EVENT_REASON_CPUID
  e.raw_version = 7;
  return e;
}

class XenCpuidAndPortsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = policy::ParsePolicy(kCpuidAndPortsPolicy, "xen-test.textproto");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto store = policy::Store::FromPolicy(loaded->policy, loaded->source, v1::AMD);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    // dom0's own CPUID, which a guest's answer must never come from.
    host_.cpuid = {0xd0d0d0d0, 0xd0d0d0d0, 0xd0d0d0d0, 0xd0d0d0d0};
    dispatcher_ = std::make_unique<dispatch::Dispatcher>(*store_, host_, nullptr,
                                                         dispatch::DispatchOptions());
  }

  // One CPUID event through a monitor; its one response.
  VmEventResponse Answer(const VmEvent& e) {
    XenMonitor monitor(*dispatcher_, std::make_unique<FakeChannel>(&ring_));
    {
      absl::MutexLock lock(&ring_.mu);
      ring_.requests.push_back(e);
      ring_.responses.clear();
    }
    EXPECT_EQ(monitor.Poll(), 1);
    EXPECT_EQ(monitor.stats().cpuid, 1u);
    absl::MutexLock lock(&ring_.mu);
    EXPECT_EQ(ring_.responses.size(), 1u);
    return ring_.responses.empty() ? VmEventResponse() : ring_.responses.front();
  }
  static std::vector<uint64_t> Eabcd(const VmEventResponse& r) {
    return {r.regs.gpr[emulator::kRax], r.regs.gpr[emulator::kRbx],
            r.regs.gpr[emulator::kRcx], r.regs.gpr[emulator::kRdx]};
  }

  emulator::testing::FakeHost host_;
  std::unique_ptr<policy::Store> store_;
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
  FakeRing ring_;
};

TEST_F(XenCpuidAndPortsTest, ConstLeafReplacesXensAnswerAndMovesPastTheInstruction) {
  VmEvent e = Cpuid(5, 6, 0, {1, 2, 3, 4});
  e.insn_length = 3;  // a prefixed CPUID: Xen's length counts, not the opcode's 2
  const VmEventResponse r = Answer(e);
  EXPECT_TRUE(r.set_registers);
  EXPECT_TRUE(r.release_vcpu);
  EXPECT_EQ(r.vcpu, 1u);
  EXPECT_EQ(r.raw_reason, 10u);
  EXPECT_THAT(Eabcd(r), ::testing::ElementsAre(0x11111111u, 0x22222222u, 0x33333333u,
                                               0x44444444u));
  EXPECT_EQ(r.regs.rip, 0xffffffff81000103u);
  // Everything else as the vCPU had it: Xen loads the whole register set.
  EXPECT_EQ(r.regs.gpr[emulator::kRsi], 0x5151u);
  EXPECT_EQ(r.regs.rflags, 0x246u);
  EXPECT_EQ(dispatcher_->Stats().completed, 1u);
}

TEST_F(XenCpuidAndPortsTest, HostLeafMasksXensAnswerNotDom0s) {
  const VmEventResponse r = Answer(Cpuid(5, 1, 0, {0x00a00f11, 0x00020800, 0xf6d83203, 0x078bfbfe}));
  ASSERT_TRUE(r.set_registers);
  // ECX bit 31 cleared, EDX bit 0 set, the rest Xen's.
  EXPECT_THAT(Eabcd(r), ::testing::ElementsAre(0x00a00f11u, 0x00020800u, 0x76d83203u,
                                               0x078bfbffu));
}

TEST_F(XenCpuidAndPortsTest, LeafThePolicyDoesNotMentionGetsXensOwnAnswer) {
  const VmEventResponse r = Answer(Cpuid(5, 0, 0, {0xd, 0x68747541, 0x444d4163, 0x69746e65}));
  ASSERT_TRUE(r.set_registers);
  EXPECT_THAT(Eabcd(r), ::testing::ElementsAre(0xdu, 0x68747541u, 0x444d4163u, 0x69746e65u));
  EXPECT_EQ(r.regs.rip, 0xffffffff81000102u);
  // A domain with no layer of its own: the same.
  const VmEventResponse other = Answer(Cpuid(9, 6, 0, {1, 2, 3, 4}));
  EXPECT_THAT(Eabcd(other), ::testing::ElementsAre(1u, 2u, 3u, 4u));
}

TEST_F(XenCpuidAndPortsTest, SubleafRuleMatchesOnlyItsSubleaf) {
  EXPECT_THAT(Eabcd(Answer(Cpuid(5, 7, 1, {9, 9, 9, 9}))),
              ::testing::ElementsAre(7u, 0u, 0u, 0u));
  EXPECT_THAT(Eabcd(Answer(Cpuid(5, 7, 0, {9, 9, 9, 9}))),
              ::testing::ElementsAre(9u, 9u, 9u, 9u));
}

TEST_F(XenCpuidAndPortsTest, RipWrapsAt4GiBOutsideLongMode) {
  VmEvent e = Cpuid(5, 6, 0, {0, 0, 0, 0});
  e.mode = emulator::Mode::k32;
  e.regs.rip = 0xffffffff;
  EXPECT_EQ(Answer(e).regs.rip, 1u);
}

TEST_F(XenCpuidAndPortsTest, PolicyEditReachesTheNextCpuid) {
  EXPECT_EQ(Answer(Cpuid(5, 6, 0, {1, 2, 3, 4})).regs.gpr[emulator::kRax], 0x11111111u);
  auto loaded = policy::ParsePolicy(R"(domain { domain: 5 cpuid { leaf: 6 source: CONST
                                        set { eax: 0xabc } } })",
                                    "edit.textproto");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(store_->ApplyPolicy(loaded->policy, loaded->source, policy::EditOptions()).ok());
  EXPECT_EQ(Answer(Cpuid(5, 6, 0, {1, 2, 3, 4})).regs.gpr[emulator::kRax], 0xabcu);
}

// The trap path allocates nothing: once warm, answering CPUID events and
// port accesses costs no heap (the fakes' queues are filled beforehand).
TEST_F(XenCpuidAndPortsTest, AnsweringAllocatesNothing) {
  XenMonitor monitor(*dispatcher_, std::make_unique<FakeChannel>(&ring_));
  constexpr int kEvents = 64;
  auto fill = [&] {
    absl::MutexLock lock(&ring_.mu);
    ring_.responses.clear();
    ring_.responses.reserve(kEvents);
    for (int i = 0; i < kEvents; ++i) ring_.requests.push_back(Cpuid(5, i % 8, 0, {1, 2, 3, 4}));
  };
  fill();
  monitor.Poll();  // warm: the session's first snapshot read
  fill();
  const uint64_t before = testing::HeapAllocations();
  EXPECT_EQ(monitor.Poll(), kEvents);
  EXPECT_EQ(testing::HeapAllocations(), before);
}

TEST(TrapFromCpuidTest, IsACpuidOfTheEventsLeafNotOfXensAnswer) {
  const VmEvent e = Cpuid(3, 0x80000001, 2, {0xaaaa, 0xbbbb, 0xcccc, 0xdddd});
  const emulator::Trap t = TrapFromCpuid(e);
  ASSERT_EQ(t.insn_len, 2);
  EXPECT_EQ(t.insn[0], 0x0f);
  EXPECT_EQ(t.insn[1], 0xa2);
  EXPECT_EQ(t.domain, 3u);
  EXPECT_EQ(t.regs.gpr[emulator::kRax], 0x80000001u);
  EXPECT_EQ(t.regs.gpr[emulator::kRcx], 2u);
  EXPECT_EQ(t.regs.gpr[emulator::kRsi], 0x5151u);
}

// --- XenPortServer ---------------------------------------------------------

struct FakeIoreqPage {
  absl::Mutex mu;
  std::deque<PortAccess> pending ABSL_GUARDED_BY(mu);
  std::vector<std::pair<uint32_t, uint32_t>> answers ABSL_GUARDED_BY(mu);  // vcpu, value
};

class FakeIoreq final : public IoreqChannel {
 public:
  explicit FakeIoreq(FakeIoreqPage* page) : page_(page) {}
  uint32_t domain() const override { return 5; }
  absl::Status Wait(int timeout_ms) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 5)));
    return absl::OkStatus();
  }
  bool Next(PortAccess* access) override {
    absl::MutexLock lock(&page_->mu);
    if (page_->pending.empty()) return false;
    *access = page_->pending.front();
    page_->pending.pop_front();
    return true;
  }
  void Respond(uint32_t vcpu, uint32_t value) override {
    absl::MutexLock lock(&page_->mu);
    page_->answers.emplace_back(vcpu, value);
  }

 private:
  FakeIoreqPage* page_;
};

PortAccess Port(uint16_t port, uint8_t size, bool write, uint32_t value = 0) {
  PortAccess a;
  a.domain = 5;
  a.vcpu = 2;
  a.port = port;
  a.size = size;
  a.write = write;
  a.value = value;
  return a;
}

class XenPortServerTest : public XenCpuidAndPortsTest {
 protected:
  std::unique_ptr<XenPortServer> Server() {
    return std::make_unique<XenPortServer>(*dispatcher_, std::make_unique<FakeIoreq>(&page_));
  }
  void Push(const PortAccess& a) {
    absl::MutexLock lock(&page_.mu);
    page_.pending.push_back(a);
  }
  std::vector<std::pair<uint32_t, uint32_t>> Answers() {
    absl::MutexLock lock(&page_.mu);
    return page_.answers;
  }
  FakeIoreqPage page_;
};

TEST(TrapFromPortAccessTest, EncodesInAndOutOfEachWidth) {
  struct Case {
    uint8_t size;
    bool write;
    std::vector<uint8_t> insn;
  } cases[] = {{1, false, {0xec}}, {2, false, {0x66, 0xed}}, {4, false, {0xed}},
               {1, true, {0xee}},  {2, true, {0x66, 0xef}},  {4, true, {0xef}}};
  for (const Case& c : cases) {
    const emulator::Trap t = TrapFromPortAccess(Port(0x510, c.size, c.write, 0xabcd));
    EXPECT_EQ(std::vector<uint8_t>(t.insn, t.insn + t.insn_len), c.insn)
        << "size " << int(c.size) << (c.write ? " out" : " in");
    EXPECT_EQ(t.mode, emulator::Mode::k32);
    EXPECT_EQ(t.regs.gpr[emulator::kRdx], 0x510u);
    EXPECT_EQ(t.regs.gpr[emulator::kRax], c.write ? 0xabcdu : 0u);
  }
}

TEST_F(XenPortServerTest, DeniedPortReadsAllOnesOfItsWidth) {
  auto server = Server();
  Push(Port(0x80, 1, false));
  Push(Port(0x80, 2, false));
  Push(Port(0x80, 4, false));
  Push(Port(0x80, 1, true, 0x5a));
  EXPECT_EQ(server->Poll(), 4);
  EXPECT_THAT(Answers(), ::testing::ElementsAre(::testing::Pair(2u, 0xffu),
                                                ::testing::Pair(2u, 0xffffu),
                                                ::testing::Pair(2u, 0xffffffffu),
                                                ::testing::Pair(2u, 0u)));
  EXPECT_EQ(server->stats().denied, 4u);
  EXPECT_EQ(server->stats().accesses, 4u);
  EXPECT_EQ(dispatcher_->Stats().traps, 4u);
}

TEST_F(XenPortServerTest, GrantedPortGoesToTheHostsDeviceThere) {
  host_.ports[0x510] = 0x12345678;
  auto server = Server();
  Push(Port(0x510, 2, false));
  Push(Port(0x510, 4, true, 0xcafef00d));
  Push(Port(0x510, 4, false));
  server->Poll();
  EXPECT_THAT(Answers(), ::testing::ElementsAre(::testing::Pair(2u, 0x5678u),
                                                ::testing::Pair(2u, 0u),
                                                ::testing::Pair(2u, 0xcafef00du)));
  EXPECT_EQ(server->stats().denied, 0u);
}

TEST_F(XenPortServerTest, GrantedPortWithNoDeviceReadsAllOnes) {
  // Xen's host models no device: nothing drives the bus pvemu took over.
  auto server = Server();
  Push(Port(0x511, 1, false));
  server->Poll();
  EXPECT_THAT(Answers(), ::testing::ElementsAre(::testing::Pair(2u, 0xffu)));
  EXPECT_EQ(server->stats().denied, 0u);
}

TEST_F(XenPortServerTest, AccessPartlyOutsideTheGrantIsDenied) {
  host_.ports[0x512] = 1;
  auto server = Server();
  Push(Port(0x512, 4, false));  // 0x512-0x515: 0x514 is not granted
  server->Poll();
  EXPECT_THAT(Answers(), ::testing::ElementsAre(::testing::Pair(2u, 0xffffffffu)));
  EXPECT_EQ(server->stats().denied, 1u);
}

TEST_F(XenPortServerTest, StringAccessIsDecidedAndCounted) {
  auto server = Server();
  PortAccess a = Port(0x80, 1, true);
  a.string = true;
  a.count = 16;
  Push(a);
  server->Poll();
  EXPECT_EQ(Answers().size(), 1u);
  EXPECT_EQ(server->stats().strings, 1u);
}

TEST_F(XenPortServerTest, AnsweringAllocatesNothing) {
  auto server = Server();
  constexpr int kAccesses = 64;
  auto fill = [&] {
    absl::MutexLock lock(&page_.mu);
    page_.answers.clear();
    page_.answers.reserve(kAccesses);
    for (int i = 0; i < kAccesses; ++i) page_.pending.push_back(Port(0x50e + i % 8, 1, i % 2));
  };
  fill();
  server->Poll();  // warm
  fill();
  const uint64_t before = testing::HeapAllocations();
  EXPECT_EQ(server->Poll(), kAccesses);
  EXPECT_EQ(testing::HeapAllocations(), before);
}

TEST_F(XenPortServerTest, LoopAnswersAndStopDrainsTheRest) {
  auto server = Server();
  server->Start();
  for (int i = 0; i < 20; ++i) Push(Port(0x80, 1, false));
  for (int i = 0; i < 500 && Answers().size() < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Push(Port(0x80, 1, false));
  server->Stop();
  EXPECT_EQ(Answers().size(), 21u);
  EXPECT_TRUE(server->loop_status().ok());
}

}  // namespace
}  // namespace pvemu::server
