#include "hosts/linux_host.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hosts/native_cpuid.h"
#include "tests/status_matchers.h"
#include "tests/without_file_mode_overrides.h"

namespace pvemu::hosts {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

// A temp dir standing in for /dev/cpu: N/msr are regular files, and pread at
// offset = MSR index works on them as on the device.
class FakeDevCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (fs::temp_directory_path() / "pvemu-linux-host-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // Creates <root>/<cpu>/msr holding `value` at offset `index`.
  void AddCpu(int cpu) {
    fs::create_directories(root_ / std::to_string(cpu));
    std::ofstream(root_ / std::to_string(cpu) / "msr").flush();
  }
  void SetMsr(int cpu, uint32_t index, uint64_t value) {
    std::string path = (root_ / std::to_string(cpu) / "msr").string();
    int fd = open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, &value, sizeof(value), index),
              static_cast<ssize_t>(sizeof(value)));
    close(fd);
  }
  uint64_t GetMsr(int cpu, uint32_t index) {
    std::string path = (root_ / std::to_string(cpu) / "msr").string();
    int fd = open(path.c_str(), O_RDONLY);
    uint64_t v = 0;
    EXPECT_EQ(pread(fd, &v, sizeof(v), index), static_cast<ssize_t>(sizeof(v)));
    close(fd);
    return v;
  }

  LinuxHostOptions Options() const {
    LinuxHostOptions o;
    o.dev_cpu_dir = root_.string();
    o.cpuinfo_path = (root_ / "cpuinfo").string();
    return o;
  }

  fs::path root_;
};

TEST_F(FakeDevCpu, ReadsMsrAtItsOffset) {
  AddCpu(0);
  AddCpu(1);
  SetMsr(0, 0x1b0, 6);
  SetMsr(1, 0x1b0, 0xf);
  absl::StatusOr<std::unique_ptr<LinuxHost>> host = LinuxHost::Create(Options());
  ASSERT_THAT(host, IsOk());
  EXPECT_EQ((*host)->cpus(), 2u);
  uint64_t v = 0;
  ASSERT_TRUE((*host)->ReadMsr(0, 0x1b0, &v));
  EXPECT_EQ(v, 6u);
  ASSERT_TRUE((*host)->ReadMsr(1, 0x1b0, &v));
  EXPECT_EQ(v, 0xfu);
}

TEST_F(FakeDevCpu, WritesMsrAtItsOffset) {
  AddCpu(0);
  absl::StatusOr<std::unique_ptr<LinuxHost>> host = LinuxHost::Create(Options());
  ASSERT_THAT(host, IsOk());
  ASSERT_TRUE((*host)->WriteMsr(0, 0x19a, 0x1234567890abcdefull));
  EXPECT_EQ(GetMsr(0, 0x19a), 0x1234567890abcdefull);
  uint64_t v = 0;
  ASSERT_TRUE((*host)->ReadMsr(0, 0x19a, &v));
  EXPECT_EQ(v, 0x1234567890abcdefull);
}

TEST_F(FakeDevCpu, ShortReadFaultsAndLeavesValueUntouched) {
  AddCpu(0);
  SetMsr(0, 0x10, 1);  // the file is 0x18 bytes long
  absl::StatusOr<std::unique_ptr<LinuxHost>> host = LinuxHost::Create(Options());
  ASSERT_THAT(host, IsOk());
  uint64_t v = 99;
  EXPECT_FALSE((*host)->ReadMsr(0, 0x14, &v)) << "only 4 bytes left";
  EXPECT_FALSE((*host)->ReadMsr(0, 0xc0000080, &v)) << "beyond the end";
  EXPECT_EQ(v, 99u);
}

TEST_F(FakeDevCpu, CpuWithoutMsrDeviceFaults) {
  AddCpu(0);
  fs::create_directories(root_ / "3");  // offline: no msr device
  absl::StatusOr<std::unique_ptr<LinuxHost>> host = LinuxHost::Create(Options());
  ASSERT_THAT(host, IsOk());
  EXPECT_EQ((*host)->cpus(), 4u);
  uint64_t v = 0;
  EXPECT_FALSE((*host)->ReadMsr(3, 0, &v));
  EXPECT_FALSE((*host)->WriteMsr(3, 0, 1));
  EXPECT_FALSE((*host)->ReadMsr(2, 0, &v));
  EXPECT_FALSE((*host)->ReadMsr(4, 0, &v));
}

TEST_F(FakeDevCpu, MissingDirectoryAsksForTheMsrModule) {
  LinuxHostOptions o = Options();
  o.dev_cpu_dir = (root_ / "absent").string();
  EXPECT_THAT(LinuxHost::Create(o),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       o.dev_cpu_dir +
                           "/0/msr is absent: the msr driver is not loaded; "
                           "load the msr kernel module: modprobe msr"));
}

TEST_F(FakeDevCpu, MissingCpu0DeviceAsksForTheMsrModule) {
  fs::create_directories(root_ / "0");
  EXPECT_THAT(LinuxHost::Create(Options()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("modprobe msr")));
}

// Runs as root too: the open is made in a child without the capabilities
// that let root open a mode-0 file.
TEST_F(FakeDevCpu, UnreadableDeviceNeedsRoot) {
  AddCpu(0);
  fs::permissions(root_ / "0" / "msr", fs::perms::none);
  const std::string answer = ::pvemu::testing::InChildWithoutFileModeOverrides(
      [&] { return LinuxHost::Create(Options()).status().ToString(); });
  EXPECT_THAT(answer, ::testing::StartsWith("PERMISSION_DENIED: "));
  EXPECT_THAT(answer, HasSubstr("needs root / CAP_SYS_RAWIO"));
}

TEST_F(FakeDevCpu, VendorComesFromLocalCpuidAndTscFromCpuinfo) {
  AddCpu(0);
  std::ofstream(root_ / "cpuinfo")
      << "processor\t: 0\nmodel name\t: Fake\ncpu MHz\t\t: 3312.125\n"
      << "processor\t: 1\ncpu MHz\t\t: 800.000\n";
  absl::StatusOr<std::unique_ptr<LinuxHost>> host = LinuxHost::Create(Options());
  ASSERT_THAT(host, IsOk());
  EXPECT_EQ((*host)->vendor(), VendorFromLeaf0(NativeCpuid(0, 0)));
  EXPECT_EQ((*host)->tsc_khz(), 3312125u);
  EXPECT_EQ((*host)->Cpuid(0, 0).ebx, NativeCpuid(0, 0).ebx);
}

TEST_F(FakeDevCpu, NoCpuinfoMeansUnknownTsc) {
  AddCpu(0);
  absl::StatusOr<std::unique_ptr<LinuxHost>> host = LinuxHost::Create(Options());
  ASSERT_THAT(host, IsOk());
  EXPECT_EQ((*host)->tsc_khz(), 0u);
}

TEST(TscKhzFromCpuinfoTest, ParsesFirstCpuMhz) {
  EXPECT_EQ(TscKhzFromCpuinfo("cpu MHz : 2400.000\ncpu MHz : 1.0\n"), 2400000u);
  EXPECT_EQ(TscKhzFromCpuinfo("model name : x\n"), 0u);
  EXPECT_EQ(TscKhzFromCpuinfo("cpu MHz : fast\n"), 0u);
  EXPECT_EQ(TscKhzFromCpuinfo(""), 0u);
}

}  // namespace
}  // namespace pvemu::hosts
