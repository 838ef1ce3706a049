#include "hosts/xen/xen_host.h"

#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hosts/native_cpuid.h"
#include "tests/status_matchers.h"

namespace pvemu::hosts {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::_;
using ::testing::DoAll;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::NiceMock;
using ::testing::Return;
using ::testing::SetArgPointee;

class FakeXenControl : public XenControl {
 public:
  FakeXenControl() {
    // A healthy dom0 on a 4-CPU AMD machine unless a test says otherwise.
    XenPhysinfo info;
    info.nr_cpus = 4;
    info.max_cpu_id = 7;
    info.cpu_khz = 2850000;
    info.xen_major = 4;
    info.xen_minor = 17;
    emulator::CpuidRegs leaf0{0x10, 0, 0, 0};
    SetLeaf0VendorString("AuthenticAMD", &leaf0);
    ON_CALL(*this, Open()).WillByDefault(Return(absl::OkStatus()));
    ON_CALL(*this, Physinfo()).WillByDefault(Return(info));
    ON_CALL(*this, Cpuid(0, 0)).WillByDefault(Return(leaf0));
  }

  MOCK_METHOD(absl::Status, Open, (), (override));
  MOCK_METHOD(void, Close, (), (override));
  MOCK_METHOD(absl::StatusOr<XenPhysinfo>, Physinfo, (), (override));
  MOCK_METHOD(absl::StatusOr<std::vector<DomainState>>, DomainList, (),
              (override));
  MOCK_METHOD(int, ReadMsr, (uint32_t cpu, uint32_t msr, uint64_t* value),
              (override));
  MOCK_METHOD(int, WriteMsr, (uint32_t cpu, uint32_t msr, uint64_t value),
              (override));
  MOCK_METHOD(emulator::CpuidRegs, Cpuid, (uint32_t leaf, uint32_t subleaf),
              (override));
};

// Creates a XenHost on a fake; `fake` stays valid while the host lives.
std::unique_ptr<XenHost> MakeHost(NiceMock<FakeXenControl>** fake) {
  auto control = std::make_unique<NiceMock<FakeXenControl>>();
  *fake = control.get();
  absl::StatusOr<std::unique_ptr<XenHost>> host =
      XenHost::Create(std::move(control));
  EXPECT_THAT(host, IsOk());
  return host.ok() ? std::move(*host) : nullptr;
}

TEST(XenHostTest, VendorCpusAndTscFromTheSeam) {
  NiceMock<FakeXenControl>* fake;
  std::unique_ptr<XenHost> host = MakeHost(&fake);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->vendor(), pvemu::v1::AMD);
  EXPECT_EQ(host->cpus(), 4u);
  EXPECT_EQ(host->tsc_khz(), 2850000u);
  EXPECT_EQ(host->description(), "xen 4.17");
  EXPECT_EQ(host->Cpuid(0, 0).eax, 0x10u);
}

TEST(XenHostTest, ClosesTheSeamOnDestruction) {
  auto control = std::make_unique<NiceMock<FakeXenControl>>();
  EXPECT_CALL(*control, Open()).Times(1);
  EXPECT_CALL(*control, Close()).Times(1);
  absl::StatusOr<std::unique_ptr<XenHost>> host =
      XenHost::Create(std::move(control));
  ASSERT_THAT(host, IsOk());
  host->reset();
}

TEST(XenHostTest, OpenFailureIsReturnedUnchanged) {
  auto control = std::make_unique<NiceMock<FakeXenControl>>();
  EXPECT_CALL(*control, Open())
      .WillOnce(Return(absl::FailedPreconditionError(
          "xc_interface_open failed: Permission denied (EACCES)")));
  EXPECT_CALL(*control, Physinfo()).Times(0);
  EXPECT_THAT(XenHost::Create(std::move(control)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "xc_interface_open failed: Permission denied (EACCES)"));
}

TEST(XenHostTest, PhysinfoFailureIsReturned) {
  auto control = std::make_unique<NiceMock<FakeXenControl>>();
  EXPECT_CALL(*control, Physinfo())
      .WillOnce(Return(absl::UnavailableError("xc_physinfo failed: EPERM")));
  EXPECT_THAT(XenHost::Create(std::move(control)),
              StatusIs(absl::StatusCode::kUnavailable,
                       "xc_physinfo failed: EPERM"));
}

TEST(XenHostTest, UnknownVersionDescribesAsPlainXen) {
  auto control = std::make_unique<NiceMock<FakeXenControl>>();
  XenPhysinfo info;
  info.nr_cpus = 1;
  EXPECT_CALL(*control, Physinfo()).WillOnce(Return(info));
  absl::StatusOr<std::unique_ptr<XenHost>> host =
      XenHost::Create(std::move(control));
  ASSERT_THAT(host, IsOk());
  EXPECT_EQ((*host)->description(), "xen");
}

TEST(XenHostTest, ListsDomainsWithStates) {
  NiceMock<FakeXenControl>* fake;
  std::unique_ptr<XenHost> host = MakeHost(&fake);
  ASSERT_NE(host, nullptr);
  DomainState dom0{.domid = 0, .running = true, .nr_online_vcpus = 2,
                   .max_vcpu_id = 1};
  DomainState paused{.domid = 3, .blocked = true, .paused = true,
                     .hvm = true, .nr_online_vcpus = 1, .max_vcpu_id = 0};
  DomainState crashed{.domid = 7, .dying = true, .shutdown = true,
                      .shutdown_reason = 3, .max_vcpu_id = ~0u};
  EXPECT_CALL(*fake, DomainList())
      .WillOnce(Return(std::vector<DomainState>{dom0, paused, crashed}));
  absl::StatusOr<std::vector<DomainState>> domains = host->ListDomains();
  ASSERT_THAT(domains, IsOk());
  EXPECT_THAT(*domains, ElementsAre(dom0, paused, crashed));
  EXPECT_EQ(DomainStateText((*domains)[0]), "running");
  EXPECT_EQ(DomainStateText((*domains)[1]), "blocked,paused");
  EXPECT_EQ(DomainStateText((*domains)[2]), "shutdown (crash),dying");
  EXPECT_EQ(DomainStateText(DomainState{}), "idle");
}

TEST(XenHostTest, DomainListFailureIsReturned) {
  NiceMock<FakeXenControl>* fake;
  std::unique_ptr<XenHost> host = MakeHost(&fake);
  ASSERT_NE(host, nullptr);
  EXPECT_CALL(*fake, DomainList())
      .WillOnce(Return(absl::UnavailableError("xc_domain_getinfolist failed")));
  EXPECT_THAT(host->ListDomains(),
              StatusIs(absl::StatusCode::kUnavailable,
                       "xc_domain_getinfolist failed"));
}

TEST(XenHostTest, MsrReadAndWriteGoThroughTheSeam) {
  NiceMock<FakeXenControl>* fake;
  std::unique_ptr<XenHost> host = MakeHost(&fake);
  ASSERT_NE(host, nullptr);
  EXPECT_CALL(*fake, ReadMsr(2, 0x10, _))
      .WillOnce(DoAll(SetArgPointee<2>(0xabcdef), Return(0)));
  EXPECT_CALL(*fake, WriteMsr(1, 0x1b0, 6)).WillOnce(Return(0));
  uint64_t v = 0;
  ASSERT_TRUE(host->ReadMsr(2, 0x10, &v));
  EXPECT_EQ(v, 0xabcdefu);
  EXPECT_TRUE(host->WriteMsr(1, 0x1b0, 6));
  EXPECT_EQ(host->failed_msr_accesses(), 0u);
}

TEST(XenHostTest, XenRefusalIsAFaultAndIsCounted) {
  NiceMock<FakeXenControl>* fake;
  std::unique_ptr<XenHost> host = MakeHost(&fake);
  ASSERT_NE(host, nullptr);
  EXPECT_CALL(*fake, ReadMsr(0, 0x19a, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(42), Return(EPERM)));
  EXPECT_CALL(*fake, WriteMsr(0, 0x10, _)).WillOnce(Return(EINVAL));
  uint64_t v = 7;
  EXPECT_FALSE(host->ReadMsr(0, 0x19a, &v));
  EXPECT_EQ(v, 7u) << "value untouched on refusal";
  EXPECT_FALSE(host->WriteMsr(0, 0x10, 1));
  EXPECT_EQ(host->failed_msr_accesses(), 2u);
  EXPECT_EQ(host->last_msr_errno(), EINVAL);
  EXPECT_THAT(host->ReadMsrOrError(0, 0x19a),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "Xen refused to read MSR 0x19a on CPU 0: Operation not "
                       "permitted (EPERM)"));
}

TEST(XenHostTest, ReadMsrOrErrorReturnsTheValue) {
  NiceMock<FakeXenControl>* fake;
  std::unique_ptr<XenHost> host = MakeHost(&fake);
  ASSERT_NE(host, nullptr);
  EXPECT_CALL(*fake, ReadMsr(1, 0x10, _))
      .WillOnce(DoAll(SetArgPointee<2>(5), Return(0)));
  absl::StatusOr<uint64_t> v = host->ReadMsrOrError(1, 0x10);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(*v, 5u);
}

TEST(XenErrnoTextTest, NamesTheErrno) {
  EXPECT_EQ(XenErrnoText(EACCES), "Permission denied (EACCES)");
}

// This machine runs no Xen: Open must say so, never crash.
TEST(XenHostOpenTest, WithoutXenSaysWhatIsMissing) {
#ifdef PVEMU_HAVE_XEN
  XenPaths paths;
  paths.privcmd = "/nonexistent/xen/privcmd";
  EXPECT_THAT(XenHost::Open(paths),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "not running on Xen: /nonexistent/xen/privcmd is absent; "
                       "start pvemud in dom0, or use --host=sim"));
#else
  EXPECT_THAT(XenHost::Open(),
              StatusIs(absl::StatusCode::kUnimplemented,
                       "built without Xen support: install libxen-dev and "
                       "reconfigure with -Dxen=enabled"));
#endif
}

TEST(XenHostOpenTest, OnThisMachine) {
  absl::StatusOr<std::unique_ptr<XenHost>> host = XenHost::Open();
#ifdef PVEMU_HAVE_XEN
  if (access("/dev/xen/privcmd", F_OK) == 0) {
    GTEST_SKIP() << "this machine runs Xen";
  }
  EXPECT_THAT(host, StatusIs(absl::StatusCode::kFailedPrecondition,
                             "not running on Xen: /dev/xen/privcmd is absent; "
                             "start pvemud in dom0, or use --host=sim"));
#else
  EXPECT_THAT(host, StatusIs(absl::StatusCode::kUnimplemented,
                             HasSubstr("-Dxen=enabled")));
#endif
}

#ifdef PVEMU_HAVE_XEN
TEST(XenHostOpenTest, InADomUSaysNotDom0) {
  // Any existing file stands in for privcmd; capabilities without control_d.
  std::string caps = ::testing::TempDir() + "/pvemu-xen-capabilities";
  FILE* f = fopen(caps.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  XenPaths paths;
  paths.privcmd = caps;
  paths.capabilities = caps;
  EXPECT_THAT(XenHost::Open(paths),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "running in a Xen guest, not in dom0: " + caps +
                           " lacks control_d; start pvemud in dom0, or use "
                           "--host=sim"));
  remove(caps.c_str());
}
#endif

}  // namespace
}  // namespace pvemu::hosts
