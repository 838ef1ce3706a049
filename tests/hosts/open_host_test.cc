#include "hosts/open_host.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/shipped.h"
#include "hosts/profiles.h"
#include "base/textproto.h"
#include "pvemu/v1/host.pb.h"
#include "hosts/sim_host.h"
#include "tests/status_matchers.h"

namespace pvemu::hosts {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace fs = std::filesystem;

std::string TempPath(absl::string_view name) {
  return (fs::path(::testing::TempDir()) / std::string(name)).string();
}

TEST(OpenHostTest, UnknownKindListsTheChoices) {
  EXPECT_THAT(OpenHost("kvm", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown host kind 'kvm'; use one of sim, linux, xen"));
  EXPECT_THAT(OpenHost("", {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown host kind ''; use one of sim, linux, xen"));
}

TEST(OpenHostTest, ProfileOnlyForSim) {
  HostOptions options;
  options.profile = "/etc/pvemu/host.textproto";
  EXPECT_THAT(OpenHost("xen", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "a host profile (/etc/pvemu/host.textproto) applies "
                       "only to --host=sim, not --host=xen"));
}

TEST(OpenHostTest, DefaultSimIsTheShippedIntelXeon) {
  absl::StatusOr<std::unique_ptr<emulator::Host>> host = OpenHost("sim", {});
  ASSERT_THAT(host, IsOk());
  emulator::Host& h = **host;
  EXPECT_EQ(h.vendor(), pvemu::v1::INTEL);
  EXPECT_EQ(h.description(), "sim: Intel Xeon E-2136");
  EXPECT_EQ(h.tsc_khz(), 3312000u);
  emulator::CpuidRegs leaf0 = h.Cpuid(0, 0);
  EXPECT_EQ(leaf0.ebx, 0x756e6547u);  // "Genu"
  EXPECT_EQ(leaf0.eax, 0x16u);
  EXPECT_EQ(h.Cpuid(1, 0).eax, 0x906eau);
  // The MSRs behind the 1/8-speed dom0 report are there, and writable.
  uint64_t v = 0;
  ASSERT_TRUE(h.ReadMsr(11, 0x1b0, &v));
  EXPECT_EQ(v, 6u);
  EXPECT_TRUE(h.WriteMsr(11, 0x19a, 0));
  // AMD's HWCR faults on this Intel host.
  EXPECT_FALSE(h.ReadMsr(0, 0xc0010015, &v));
}

TEST(OpenHostTest, SimFromProfileFile) {
  std::string path = TempPath("pvemu-open-host-profile.textproto");
  std::ofstream(path) << "name: \"Tiny AMD\" vendor: AMD cpus: 1\n"
                      << "msr { msr: \"0xc0010015\" value: 1 }\n";
  HostOptions options;
  options.profile = path;
  absl::StatusOr<std::unique_ptr<emulator::Host>> host = OpenHost("sim", options);
  ASSERT_THAT(host, IsOk());
  EXPECT_EQ((*host)->description(), "sim: Tiny AMD");
  uint64_t v = 0;
  ASSERT_TRUE((*host)->ReadMsr(0, 0xc0010015, &v));
  EXPECT_EQ(v, 1u);
  std::remove(path.c_str());
}

TEST(OpenHostTest, SimProfileErrorsNameTheFile) {
  std::string path = TempPath("pvemu-open-host-bad.textproto");
  std::ofstream(path) << "name: \"Bad\" cpus: 1\n";
  HostOptions options;
  options.profile = path;
  EXPECT_THAT(OpenHost("sim", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith(path + ": host profile 'Bad': sets no vendor")));
  std::remove(path.c_str());
}

TEST(OpenHostTest, SimProfileMissingFile) {
  HostOptions options;
  options.profile = "/nonexistent/pvemu/host.textproto";
  EXPECT_THAT(OpenHost("sim", options),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/pvemu/host.textproto")));
}

TEST(OpenHostTest, SimFromShippedProfileName) {
  HostOptions options;
  options.profile = "amd-epyc-7443p";
  absl::StatusOr<std::unique_ptr<emulator::Host>> host = OpenHost("sim", options);
  ASSERT_THAT(host, IsOk());
  EXPECT_EQ((*host)->vendor(), pvemu::v1::AMD);
  EXPECT_THAT((*host)->description(), HasSubstr("EPYC 7443P"));
}

TEST(OpenHostTest, UnknownProfileNameListsTheShippedOnesAndSaysAPathWorks) {
  HostOptions options;
  options.profile = "amd-epyc-9999";
  absl::StatusOr<std::unique_ptr<emulator::Host>> host = OpenHost("sim", options);
  EXPECT_THAT(host, StatusIs(absl::StatusCode::kInvalidArgument,
                             StartsWith("unknown host profile 'amd-epyc-9999'; the shipped "
                                        "profiles are ")));
  for (absl::string_view name : ShippedProfileNames()) {
    EXPECT_THAT(host.status().message(), HasSubstr(name));
  }
  EXPECT_THAT(host.status().message(), HasSubstr("give its path"));
  EXPECT_THAT(host.status().message(), HasSubstr("./amd-epyc-9999"));
}

// A word is a shipped profile's name; a '/' or the .textproto ending makes a
// path, even where a shipped profile has that word in it.
TEST(OpenSimHostTest, NameOrPath) {
  EXPECT_TRUE(IsHostProfileName("amd-epyc-7443p"));
  EXPECT_TRUE(IsHostProfileName("nosuch"));
  EXPECT_FALSE(IsHostProfileName("./amd-epyc-7443p"));
  EXPECT_FALSE(IsHostProfileName("amd-epyc-7443p.textproto"));
  EXPECT_FALSE(IsHostProfileName("/etc/pvemu/host.textproto"));
  EXPECT_THAT(OpenSimHost("amd-epyc-7443p.textproto"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("amd-epyc-7443p.textproto")));
  absl::StatusOr<std::unique_ptr<SimHost>> fallback = OpenSimHost("");
  ASSERT_THAT(fallback, IsOk());
  EXPECT_EQ((*fallback)->description(), "sim: Intel Xeon E-2136");
}

TEST(OpenHostTest, LinuxWithoutMsrDriver) {
  HostOptions options;
  options.linux_dev_cpu_dir = "/nonexistent/dev/cpu";
  EXPECT_THAT(OpenHost("linux", options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("modprobe msr")));
}

// The xen backend is not in this library (nothing but pvemud links
// libxenctrl); OpenHost says where it is instead.
TEST(OpenHostTest, XenIsPvemudsAlone) {
  EXPECT_THAT(OpenHost("xen", {}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("--host=xen is pvemud's alone")));
}

// The shipped profile parses and validates on its own.
TEST(DefaultSimProfileTextTest, IsAValidProfile) {
  pvemu::v1::HostProfile profile;
  ASSERT_THAT(ParseTextProto(DefaultSimProfileText(), "default", &profile),
              IsOk());
  EXPECT_EQ(profile.cpus(), 12u);
  EXPECT_THAT(SimHost::Create(profile, "default"), IsOk());
}

// Every profile the policy library ships is one SimHost accepts.
TEST(DefaultSimProfileTextTest, EveryShippedProfileIsValid) {
  std::vector<absl::string_view> names = hosts::ShippedProfileNames();
  EXPECT_THAT(names, ::testing::Contains("intel-xeon-e-2136"));
  for (absl::string_view name : names) {
    SCOPED_TRACE(name);
    pvemu::v1::HostProfile profile;
    ASSERT_THAT(ParseTextProto(hosts::ShippedProfile(name), name, &profile),
                IsOk());
    EXPECT_THAT(SimHost::Create(profile, name), IsOk());
  }
}

}  // namespace
}  // namespace pvemu::hosts
