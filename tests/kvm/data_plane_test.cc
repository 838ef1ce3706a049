// The KVM data plane without /dev/kvm: exits are written into a kvm_run
// buffer as KVM writes them, and the answers read back as KVM reads them.
// The subscribed cases run a real pvemud in process on a Unix socket.
#include "kvm/data_plane.h"

#include <errno.h>
#include <linux/kvm.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "policy/loader.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::kvm {
namespace {

constexpr char kPolicy[] = R"pb(
  default {
    unknown_msr: UNKNOWN_GP
    msr { msr: "0x1b0" read: CONST value: 0x5 write: IGNORE comment: "const" }
    msr { msr: "IA32_PAT" read: SHADOW write: SHADOW value: 0x0007040600070406
          writable_mask: 0x0707070707070707 on_reserved_bits: RESERVED_GP }
    msr { msr: "0x19a" read: GP write: GP audit: true }
    msr { range { first: "0x40000000" last: "0x4000000f" } read: ZERO write: IGNORE }
    io_port { first: 0x3f8 last: 0x3ff }
    io_port { first: 0x510 last: 0x513 }
    cpuid { leaf: 0x40000000 source: CONST set { eax: 0x40000001 ebx: 0x756d6576 ecx: 0x76656d75 edx: 0x756d6576 } }
  }
  domain { domain: 7 unknown_msr: UNKNOWN_RELAXED }
)pb";

class DataPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    policy_path_ = dir_ + "/policy.textproto";
    Write(policy_path_, kPolicy);
    run_.assign(8192, 0);  // KVM puts I/O data on the page after struct kvm_run
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  std::unique_ptr<DataPlane> Open(uint32_t domain, const std::string& policy) {
    DataPlaneOptions o;
    o.domain = domain;
    o.policy = policy;
    auto plane = DataPlane::Open(o);
    EXPECT_TRUE(plane.ok()) << plane.status();
    return plane.ok() ? std::move(*plane) : nullptr;
  }
  kvm_run* run() { return reinterpret_cast<kvm_run*>(run_.data()); }

  // An RDMSR/WRMSR exit as KVM reports it; returns the handler's result.
  int Msr(Vcpu& vcpu, bool write, uint32_t msr, uint64_t data = 0,
          uint32_t reason = KVM_MSR_EXIT_REASON_FILTER) {
    run()->exit_reason = write ? KVM_EXIT_X86_WRMSR : KVM_EXIT_X86_RDMSR;
    run()->msr.index = msr;
    run()->msr.reason = reason;
    run()->msr.data = data;
    run()->msr.error = 0xee;  // must be overwritten
    return vcpu.HandleExit(run());
  }
  // A KVM_EXIT_IO of one element; `value` in for OUT, out for IN.
  int Io(Vcpu& vcpu, bool out, uint16_t port, uint8_t size, uint32_t* value) {
    run()->exit_reason = KVM_EXIT_IO;
    run()->io.direction = out ? KVM_EXIT_IO_OUT : KVM_EXIT_IO_IN;
    run()->io.size = size;
    run()->io.port = port;
    run()->io.count = 1;
    run()->io.data_offset = 4096;
    std::memcpy(run_.data() + 4096, value, 4);
    const int r = vcpu.HandleExit(run());
    std::memcpy(value, run_.data() + 4096, 4);
    return r;
  }

  std::string dir_;
  std::string policy_path_;
  std::vector<uint8_t> run_;
};

TEST_F(DataPlaneTest, RdmsrOfConstRuleAnswersValueWithoutError) {
  auto plane = Open(1, policy_path_);
  auto vcpu = plane->NewVcpu(0, run_.size());
  EXPECT_EQ(Msr(*vcpu, false, 0x1b0), PVEMU_KVM_HANDLED);
  EXPECT_EQ(run()->msr.error, 0);
  EXPECT_EQ(run()->msr.data, 0x5u);
}

TEST_F(DataPlaneTest, GpRuleSetsErrorSoKvmInjectsGp) {
  auto plane = Open(1, policy_path_);
  auto vcpu = plane->NewVcpu(0, run_.size());
  EXPECT_EQ(Msr(*vcpu, false, 0x19a), PVEMU_KVM_HANDLED);
  EXPECT_EQ(run()->msr.error, 1);
  EXPECT_EQ(Msr(*vcpu, true, 0x19a, 1), PVEMU_KVM_HANDLED);
  EXPECT_EQ(run()->msr.error, 1);
  const pvemu_kvm_stats s = vcpu->stats();
  EXPECT_EQ(s.rdmsr, 1u);
  EXPECT_EQ(s.wrmsr, 1u);
  EXPECT_EQ(s.exceptions, 2u);
}

TEST_F(DataPlaneTest, ShadowWriteIsSeenByItsVcpuOnly) {
  auto plane = Open(1, policy_path_);
  auto vcpu0 = plane->NewVcpu(0, run_.size());
  auto vcpu1 = plane->NewVcpu(1, run_.size());
  ASSERT_EQ(Msr(*vcpu0, true, 0x277, 0x0000000000000606), PVEMU_KVM_HANDLED);
  EXPECT_EQ(run()->msr.error, 0);
  Msr(*vcpu0, false, 0x277);
  EXPECT_EQ(run()->msr.data, 0x606u);
  Msr(*vcpu1, false, 0x277);
  EXPECT_EQ(run()->msr.data, 0x0007040600070406u);
}

TEST_F(DataPlaneTest, WriteChangingReservedBitsGetsGp) {
  auto plane = Open(1, policy_path_);
  auto vcpu = plane->NewVcpu(0, run_.size());
  Msr(*vcpu, true, 0x277, 0x0000000000000008);  // bit 3 is outside writable_mask
  EXPECT_EQ(run()->msr.error, 1);
}

TEST_F(DataPlaneTest, InvalReasonGetsGpEvenWhenUnknownMsrsAreRelaxed) {
  auto plane = Open(7, policy_path_);  // domain 7: UNKNOWN_RELAXED
  auto vcpu = plane->NewVcpu(0, run_.size());
  Msr(*vcpu, true, 0xc0000080, 1ull << 20, KVM_MSR_EXIT_REASON_INVAL);
  EXPECT_EQ(run()->msr.error, 1);
  // The same domain's unknown MSR (reason UNKNOWN) reads 0.
  Msr(*vcpu, false, 0x87654321, 0, KVM_MSR_EXIT_REASON_UNKNOWN);
  EXPECT_EQ(run()->msr.error, 0);
  EXPECT_EQ(run()->msr.data, 0u);
}

TEST_F(DataPlaneTest, UnknownMsrGetsGpInGpMode) {
  auto plane = Open(1, policy_path_);
  auto vcpu = plane->NewVcpu(0, run_.size());
  Msr(*vcpu, false, 0x87654321, 0, KVM_MSR_EXIT_REASON_UNKNOWN);
  EXPECT_EQ(run()->msr.error, 1);
}

TEST_F(DataPlaneTest, PortOutsideRangesFloatsAndPortInsideIsTheVmmsDevice) {
  auto plane = Open(1, policy_path_);
  auto vcpu = plane->NewVcpu(0, run_.size());
  uint32_t value = 0x12345678;
  EXPECT_EQ(Io(*vcpu, false, 0x80, 2, &value), PVEMU_KVM_HANDLED);
  EXPECT_EQ(value, 0x1234ffffu) << "an IN of 2 bytes fills exactly 2 bytes with ones";
  value = 0x41;
  EXPECT_EQ(Io(*vcpu, true, 0x80, 1, &value), PVEMU_KVM_HANDLED);
  EXPECT_EQ(Io(*vcpu, true, 0x3f8, 1, &value), PVEMU_KVM_DEVICE);
  EXPECT_EQ(Io(*vcpu, false, 0x510, 4, &value), PVEMU_KVM_DEVICE);
  // An access straddling the end of a granted range is not granted.
  EXPECT_EQ(Io(*vcpu, false, 0x3fe, 4, &value), PVEMU_KVM_HANDLED);
  EXPECT_EQ(vcpu->stats().device, 2u);
}

TEST_F(DataPlaneTest, MalformedIoExitIsRefusedNotFollowed) {
  auto plane = Open(1, policy_path_);
  auto vcpu = plane->NewVcpu(0, run_.size());
  run()->exit_reason = KVM_EXIT_IO;
  run()->io.direction = KVM_EXIT_IO_IN;
  run()->io.size = 4;
  run()->io.port = 0x80;
  run()->io.count = 1;
  run()->io.data_offset = static_cast<uint64_t>(run_.size()) - 2;  // runs past the mapping
  EXPECT_EQ(vcpu->HandleExit(run()), -EINVAL);
  run()->io.data_offset = 4096;
  run()->io.size = 3;
  EXPECT_EQ(vcpu->HandleExit(run()), -EINVAL);
}

TEST_F(DataPlaneTest, OtherExitsAreNotMine) {
  auto plane = Open(1, policy_path_);
  auto vcpu = plane->NewVcpu(0, run_.size());
  run()->exit_reason = KVM_EXIT_HLT;
  EXPECT_EQ(vcpu->HandleExit(run()), PVEMU_KVM_NOT_MINE);
}

TEST_F(DataPlaneTest, OpenRefusesPolicyKvmCannotFilterNamingTheRule) {
  const std::string bad = dir_ + "/x2apic.textproto";
  Write(bad, "default {\n  msr { msr: \"0x808\" read: ZERO }\n}\n");
  DataPlaneOptions o;
  o.policy = bad;
  auto plane = DataPlane::Open(o);
  ASSERT_FALSE(plane.ok());
  EXPECT_EQ(plane.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(plane.status().message(), "x2apic.textproto:2"))
      << plane.status();
}

TEST_F(DataPlaneTest, ApplyOfAPolicyKvmCannotFilterChangesNothing) {
  auto plane = Open(1, policy_path_);
  auto vcpu = plane->NewVcpu(0, run_.size());
  const uint64_t before = plane->generation();
  policy::LoadedPolicy bad =
      *policy::ParsePolicy("default {\n  msr { range { first: \"0x0\" last: \"0xffffffff\" } read: ZERO }\n}\n",
                           "wide.textproto");
  absl::Status status = plane->Apply(bad.policy, bad.source, before + 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "wide.textproto:2")) << status;
  EXPECT_EQ(plane->generation(), before);
  EXPECT_EQ(Msr(*vcpu, false, 0x1b0), PVEMU_KVM_HANDLED);
  EXPECT_EQ(run()->msr.data, 0x5u);
  EXPECT_TRUE(plane->filter().Exits(0x1b0));
}

TEST_F(DataPlaneTest, OpenNeedsExactlyOnePolicySource) {
  DataPlaneOptions o;
  EXPECT_EQ(DataPlane::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.policy = policy_path_;
  o.server = "unix:" + dir_ + "/sock";
  EXPECT_EQ(DataPlane::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DataPlaneTest, UnreachableDaemonFailsWithinTheTimeout) {
  DataPlaneOptions o;
  o.server = "unix:" + dir_ + "/nobody.sock";
  o.connect_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  auto plane = DataPlane::Open(o);
  ASSERT_FALSE(plane.ok());
  EXPECT_EQ(plane.status().code(), absl::StatusCode::kUnavailable) << plane.status();
  EXPECT_TRUE(absl::StrContains(plane.status().message(), "nobody.sock")) << plane.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// --- CPUID ---------------------------------------------------------------------

policy::LoadedPolicy Parse(const std::string& text) {
  auto loaded = policy::ParsePolicy(text, "cpuid.textproto");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return std::move(*loaded);
}

class FakeHost : public emulator::Host {
 public:
  pvemu::v1::Vendor vendor() const override { return pvemu::v1::INTEL; }
  absl::string_view description() const override { return "fake"; }
  uint64_t tsc_khz() const override { return 0; }
  bool ReadMsr(uint32_t, uint32_t, uint64_t*) override { return false; }
  bool WriteMsr(uint32_t, uint32_t, uint64_t) override { return false; }
  emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t) override {
    return {leaf | 0xf0000000u, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  }
};

TEST(GuestCpuidTest, PolicyLeavesOverrideKvmsAndUnsetLeavesStayKvms) {
  policy::LoadedPolicy p = Parse(R"pb(
    default {
      cpuid { leaf: 1 source: HOST clear { ecx: 0x80000000 } }
      cpuid { leaf: 0x40000000 source: CONST set { eax: 0x40000001 ebx: 1 ecx: 2 edx: 3 } }
    }
  )pb");
  auto domain = policy::CompileDomain(p.policy, p.source, pvemu::v1::INTEL, 1);
  ASSERT_TRUE(domain.ok());
  FakeHost host;
  std::vector<CpuidLeaf> kvm = {{0, 0, 0, 0xd, 0x756e6547, 0x6c65746e, 0x49656e69},
                                {1, 0, 0, 0x11, 0x22, 0x33, 0x44},
                                {7, 0, KVM_CPUID_FLAG_SIGNIFCANT_INDEX, 7, 7, 7, 7}};
  auto out = GuestCpuid(kvm, p.policy, **domain, host);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 4u);
  EXPECT_EQ((*out)[0].ebx, 0x756e6547u) << "leaf 0 stays KVM's";
  EXPECT_EQ((*out)[1].ecx, 0x7fffffffu) << "leaf 1 is the host's, masked";
  EXPECT_EQ((*out)[1].eax, 0xf0000001u);
  EXPECT_EQ((*out)[2].eax, 7u) << "leaf 7 stays KVM's";
  EXPECT_EQ((*out)[3].function, 0x40000000u) << "a leaf KVM does not list is added";
  EXPECT_EQ((*out)[3].ebx, 1u);
}

TEST(GuestCpuidTest, GuestVendorSetsLeafZerosVendorString) {
  policy::LoadedPolicy p = Parse("default { guest_vendor: AMD }\n");
  auto domain = policy::CompileDomain(p.policy, p.source, pvemu::v1::INTEL, 1);
  ASSERT_TRUE(domain.ok());
  FakeHost host;
  std::vector<CpuidLeaf> kvm = {{0, 0, 0, 0xd, 0x756e6547, 0x6c65746e, 0x49656e69}};
  auto out = GuestCpuid(kvm, p.policy, **domain, host);
  ASSERT_TRUE(out.ok());
  char id[13] = {};
  std::memcpy(id, &(*out)[0].ebx, 4);
  std::memcpy(id + 4, &(*out)[0].edx, 4);
  std::memcpy(id + 8, &(*out)[0].ecx, 4);
  EXPECT_STREQ(id, "AuthenticAMD");
  EXPECT_EQ((*out)[0].eax, 0xdu);
}

TEST(GuestCpuidTest, LeafZeroRuleContradictingGuestVendorIsAnErrorNamingIt) {
  policy::LoadedPolicy p = Parse(R"pb(
    default {
      guest_vendor: AMD
      cpuid { leaf: 0 source: CONST set { eax: 0xd ebx: 0x756e6547 ecx: 0x6c65746e edx: 0x49656e69 } }
    }
  )pb");
  auto domain = policy::CompileDomain(p.policy, p.source, pvemu::v1::INTEL, 1);
  ASSERT_TRUE(domain.ok());
  FakeHost host;
  std::vector<CpuidLeaf> kvm = {{0, 0, 0, 0xd, 0, 0, 0}};
  auto out = GuestCpuid(kvm, p.policy, **domain, host);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "cpuid.textproto:4")) << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "AMD")) << out.status();
}

// --- Subscribed to a real pvemud ----------------------------------------------

class SubscribedTest : public testing::DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    std::ofstream(dir_ + "/policy.textproto") << kPolicy;
    options_.policy = dir_ + "/policy.textproto";
    StartDaemon();
  }
  std::unique_ptr<DataPlane> Subscribe(uint32_t domain) {
    DataPlaneOptions o;
    o.domain = domain;
    o.server = options_.listen;
    auto plane = DataPlane::Open(o);
    EXPECT_TRUE(plane.ok()) << plane.status();
    return plane.ok() ? std::move(*plane) : nullptr;
  }
  uint64_t SetConst(uint32_t msr, uint64_t value) {
    grpc::ClientContext context;
    v1::SetRuleRequest request;
    request.mutable_layer()->set_default_(true);
    request.mutable_rule()->set_msr(absl::StrCat("0x", absl::Hex(msr)));
    request.mutable_rule()->set_read(v1::ReadAction::CONST);
    request.mutable_rule()->set_value(value);
    request.mutable_rule()->set_write(v1::WriteAction::IGNORE);
    v1::EditResponse response;
    grpc::Status status = policy_->SetRule(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.generation();
  }
  uint64_t Read(Vcpu& vcpu, uint32_t msr) {
    std::vector<uint8_t> buf(4096);
    auto* run = reinterpret_cast<kvm_run*>(buf.data());
    run->exit_reason = KVM_EXIT_X86_RDMSR;
    run->msr.index = msr;
    run->msr.reason = KVM_MSR_EXIT_REASON_FILTER;
    vcpu.HandleExit(run);
    return run->msr.error ? ~uint64_t{0} : run->msr.data;
  }
};

TEST_F(SubscribedTest, StartsOnTheDaemonsPolicyAndGeneration) {
  auto plane = Subscribe(1);
  ASSERT_NE(plane, nullptr);
  grpc::ClientContext context;
  v1::GetPolicyResponse current;
  ASSERT_TRUE(policy_->GetPolicy(&context, {}, &current).ok());
  EXPECT_EQ(plane->generation(), current.generation());
  auto vcpu = plane->NewVcpu(0, 4096);
  EXPECT_EQ(Read(*vcpu, 0x1b0), 0x5u);
}

TEST_F(SubscribedTest, AnAcknowledgedEditReachesTheNextExitWithin100ms) {
  auto plane = Subscribe(1);
  ASSERT_NE(plane, nullptr);
  auto vcpu = plane->NewVcpu(0, 4096);
  std::vector<absl::Duration> latencies;
  for (uint64_t value = 100; value < 120; ++value) {
    const uint64_t generation = SetConst(0x1b0, value);
    const absl::Time acked = absl::Now();
    uint64_t seen = 0;
    while ((seen = Read(*vcpu, 0x1b0)) != value && absl::Now() - acked < absl::Seconds(2)) {
      // Every read in between is the old generation's value, never another.
      ASSERT_EQ(seen, value - 1 == 99 ? 0x5u : value - 1);
      absl::SleepFor(absl::Microseconds(200));
    }
    latencies.push_back(absl::Now() - acked);
    EXPECT_EQ(seen, value);
    // The generation number moves just after the snapshot it names.
    const absl::Time soon = absl::Now() + absl::Seconds(1);
    while (plane->generation() != generation && absl::Now() < soon) absl::SleepFor(absl::Microseconds(100));
    EXPECT_EQ(plane->generation(), generation);
  }
  std::sort(latencies.begin(), latencies.end());
  std::printf("edit -> next exit, 20 edits: p50 %s, worst %s\n",
              absl::FormatDuration(latencies[latencies.size() / 2]).c_str(),
              absl::FormatDuration(latencies.back()).c_str());
  EXPECT_LT(latencies.back(), absl::Milliseconds(100)) << "worst of 20 edits";
}

TEST_F(SubscribedTest, DaemonRefusesAnEditAnAttachedKvmDomainCannotApply) {
  auto plane = Subscribe(1);
  ASSERT_NE(plane, nullptr);
  const uint64_t before = plane->generation();
  grpc::ClientContext context;
  v1::SetRuleRequest request;
  request.mutable_layer()->set_default_(true);
  request.mutable_rule()->set_msr("0x808");  // x2APIC: fine for pvemud, not for KVM
  request.mutable_rule()->set_read(v1::ReadAction::ZERO);
  v1::EditResponse response;
  grpc::Status status = policy_->SetRule(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "domain 1 runs on KVM"))
      << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "x2APIC")) << status.error_message();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(plane->generation(), before);
  auto vcpu = plane->NewVcpu(0, 4096);
  EXPECT_EQ(Read(*vcpu, 0x1b0), 0x5u);
}

TEST_F(SubscribedTest, VmRunsOnItsLastPolicyWhileTheDaemonIsAway) {
  auto plane = Subscribe(1);
  ASSERT_NE(plane, nullptr);
  SetConst(0x1b0, 42);
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  auto vcpu = plane->NewVcpu(0, 4096);
  while (Read(*vcpu, 0x1b0) != 42 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  StopDaemon();
  const absl::Time start = absl::Now();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(Read(*vcpu, 0x1b0), 42u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "no exit waits for the daemon";
  // Back with a new policy: the plane reconnects and follows.
  StartDaemon();
  SetConst(0x1b0, 43);
  const absl::Time back = absl::Now() + absl::Seconds(10);
  while (Read(*vcpu, 0x1b0) != 43 && absl::Now() < back) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(Read(*vcpu, 0x1b0), 43u);
}

TEST_F(SubscribedTest, AttachedDataPlaneShowsInDomainsAndItsTrapsInStats) {
  auto plane = Subscribe(4);
  ASSERT_NE(plane, nullptr);
  auto vcpu = plane->NewVcpu(0, 4096);
  for (int i = 0; i < 10; ++i) Read(*vcpu, 0x1b0);
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  v1::DomainInfo found;
  v1::StatsResponse stats;
  while (absl::Now() < deadline) {
    grpc::ClientContext c1, c2;
    v1::ListDomainsResponse domains;
    ASSERT_TRUE(policy_->ListDomains(&c1, {}, &domains).ok());
    for (const auto& d : domains.domain()) {
      if (d.domain() == 4) found = d;
    }
    ASSERT_TRUE(emulator_->GetStats(&c2, {}, &stats).ok());
    if (found.vcpus() == 1 && stats.traps() >= 10) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(found.attached(), "kvm");
  EXPECT_EQ(found.attached_pid(), static_cast<uint32_t>(getpid()));
  EXPECT_EQ(found.vcpus(), 1u);
  EXPECT_EQ(found.applied_generation(), plane->generation());
  EXPECT_GE(stats.traps(), 10u);
}

TEST_F(SubscribedTest, AuditedTrapsReachTheDaemonsWatchers) {
  auto plane = Subscribe(3);
  ASSERT_NE(plane, nullptr);
  grpc::ClientContext context;
  v1::WatchRequest request;
  request.set_traps(true);
  auto reader = audit_->Watch(&context, request);
  reader->WaitForInitialMetadata();  // the watch is live before the trap
  auto vcpu = plane->NewVcpu(1, 4096);
  EXPECT_EQ(Read(*vcpu, 0x19a), ~uint64_t{0}) << "the rule says #GP";
  v1::AuditEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.trap().domain(), 3u);
  EXPECT_EQ(event.trap().vcpu(), 1u);
  EXPECT_EQ(event.trap().msr(), 0x19au);
  EXPECT_EQ(event.trap().reason(), "audit-rule");
  EXPECT_EQ(event.trap().mnemonic(), "rdmsr");
  EXPECT_EQ(event.trap().outcome(), v1::Outcome::EXCEPTION);
  context.TryCancel();
}

}  // namespace
}  // namespace pvemu::kvm
