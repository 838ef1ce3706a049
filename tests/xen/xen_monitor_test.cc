// XenMonitor against a fake vm_event ring: each MOV_TO_MSR request becomes a
// WRMSR trap through the Dispatcher and its answer follows the policy (deny
// on #GP and on ignored writes), every request is answered with its vCPU
// released, including the ones still on the ring when the monitor stops.
#include "server/hosts/xen/xen_monitor.h"

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

}  // namespace
}  // namespace pvemu::server
