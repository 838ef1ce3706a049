#include "hosts/linux_host.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "policy/vendor_proto.h"
#include "x86/vendor.h"
#include "base/textproto.h"
#include "hosts/native_cpuid.h"

namespace pvemu::hosts {
namespace {

// CPU numbers of the numeric entries of `dir` ("0", "1", ...).
std::vector<uint32_t> CpuNumbers(const std::string& dir) {
  std::vector<uint32_t> cpus;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return cpus;
  while (struct dirent* e = readdir(d)) {
    uint32_t n;
    if (absl::SimpleAtoi(e->d_name, &n) && absl::ascii_isdigit(e->d_name[0])) {
      cpus.push_back(n);
    }
  }
  closedir(d);
  return cpus;
}

}  // namespace

uint64_t TscKhzFromCpuinfo(absl::string_view cpuinfo) {
  for (absl::string_view line : absl::StrSplit(cpuinfo, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (absl::StripAsciiWhitespace(kv.first) != "cpu MHz") continue;
    double mhz;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(kv.second), &mhz) ||
        !(mhz > 0)) {
      return 0;
    }
    return static_cast<uint64_t>(std::llround(mhz * 1000));
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<LinuxHost>> LinuxHost::Create(
    const LinuxHostOptions& options) {
  const std::string msr0 = absl::StrCat(options.dev_cpu_dir, "/0/msr");
  struct stat st;
  if (stat(msr0.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::FailedPreconditionError(absl::StrCat(
          msr0, " is absent: the msr driver is not loaded; "
                "load the msr kernel module: modprobe msr"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot stat ", msr0, ": ", std::strerror(err)));
  }

  auto host = std::unique_ptr<LinuxHost>(new LinuxHost());
  std::vector<uint32_t> cpus = CpuNumbers(options.dev_cpu_dir);
  uint32_t n = 0;
  for (uint32_t cpu : cpus) n = std::max(n, cpu + 1);
  host->fds_.assign(n, -1);
  // CPU 0 first, so a refusal is reported for the device people know.
  std::sort(cpus.begin(), cpus.end());
  for (uint32_t cpu : cpus) {
    std::string path = absl::StrCat(options.dev_cpu_dir, "/", cpu, "/msr");
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EACCES || err == EPERM) {
        return absl::PermissionDeniedError(absl::StrCat(
            "cannot open ", path, ": ", std::strerror(err),
            "; reading host MSRs needs root / CAP_SYS_RAWIO"));
      }
      if (cpu == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
      }
      // An offline CPU, or a directory without a device: its accesses fault.
      continue;
    }
    host->fds_[cpu] = fd;
  }

  host->vendor_ = VendorFromLeaf0(NativeCpuid(0, 0));
  host->description_ = absl::StrCat(
      "linux: ", x86::VendorWord(policy::FromProto(host->vendor_)), ", ", host->fds_.size(),
      " CPUs via ", options.dev_cpu_dir, "/N/msr");
  std::string cpuinfo;
  if (ReadFileToString(options.cpuinfo_path, &cpuinfo).ok()) {
    host->tsc_khz_ = TscKhzFromCpuinfo(cpuinfo);
  }
  return host;
}

LinuxHost::~LinuxHost() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

bool LinuxHost::ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) {
  if (cpu >= fds_.size() || fds_[cpu] < 0) return false;
  uint64_t v;
  // The driver fails with EIO when RDMSR faults.
  if (pread(fds_[cpu], &v, sizeof(v), static_cast<off_t>(index)) !=
      static_cast<ssize_t>(sizeof(v))) {
    return false;
  }
  *value = v;
  return true;
}

bool LinuxHost::WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) {
  if (cpu >= fds_.size() || fds_[cpu] < 0) return false;
  return pwrite(fds_[cpu], &value, sizeof(value), static_cast<off_t>(index)) ==
         static_cast<ssize_t>(sizeof(value));
}

emulator::CpuidRegs LinuxHost::Cpuid(uint32_t leaf, uint32_t subleaf) {
  return NativeCpuid(leaf, subleaf);
}

}  // namespace pvemu::hosts
