// The real captured logs in tests/traplog/samples/: exact trap counts
// (counted by hand), a few exact records each, and the whole import compared
// with tests/traplog/golden/NAME.textproto.
//
// Regenerate the golden files after an intended change:
//   PVEMU_REGENERATE_GOLDEN=1 meson test -C BUILD --suite traplog samples_test
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "traplog/import.h"
#include "traplog/reader.h"
#include "traplog/writer.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace pvemu::traplog {
namespace {

using namespace ::pvemu::emulator;  // the trap types the logs hold

namespace v1 = ::pvemu::v1;
using ::pvemu::testing::IsOk;

std::string SourceRoot() {
  const char* root = std::getenv("PVEMU_SOURCE_ROOT");
  return root != nullptr ? root : ".";
}

std::string SamplesDir() {
  return SourceRoot() + "/tests/traplog/samples";
}

bool DirExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

struct Imported {
  ImportStats stats;
  v1::TrapLog log;
};

// Imports a sample; records name the sample by its file name only, so the
// golden files do not depend on where the tree is checked out.
Imported ImportSample(const std::string& name,
                      absl::string_view format = "auto") {
  Imported out;
  std::ifstream in(SamplesDir() + "/" + name, std::ios::binary);
  EXPECT_TRUE(in) << name;
  absl::StatusOr<ImportStats> stats =
      ImportLog(format, in, name, [&](v1::TrapRecord&& r) {
        *out.log.add_record() = std::move(r);
        return absl::OkStatus();
      });
  EXPECT_THAT(stats, IsOk());
  if (stats.ok()) out.stats = *stats;
  return out;
}

class SamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The samples are part of the repository: their absence is a failure.
    ASSERT_TRUE(DirExists(SamplesDir()))
        << "captured samples not found at " << SamplesDir() << " (PVEMU_SOURCE_ROOT=" << SourceRoot() << ")";
  }

  // Compares with (or, with PVEMU_REGENERATE_GOLDEN=1, rewrites) the golden
  // trap log of this sample.
  void CheckGolden(const std::string& name, const v1::TrapLog& got) {
    const std::string golden = SourceRoot() + "/tests/traplog/golden/" +
                               name.substr(0, name.rfind('.')) + ".textproto";
    if (std::getenv("PVEMU_REGENERATE_GOLDEN") != nullptr) {
      auto writer = TrapLogWriter::Open(golden);
      ASSERT_THAT(writer, IsOk());
      for (const v1::TrapRecord& r : got.record()) {
        ASSERT_THAT((*writer)->Append(r), IsOk());
      }
      ASSERT_THAT((*writer)->Close(), IsOk());
      return;
    }
    auto reader = TrapLogReader::Open(golden);
    ASSERT_THAT(reader, IsOk());
    v1::TrapRecord want;
    int i = 0;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&want);
      ASSERT_THAT(more, IsOk());
      if (!*more) break;
      ASSERT_LT(i, got.record_size())
          << "golden has more records than the import";
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
          got.record(i), want))
          << golden << " record " << i + 1 << "\ngot:\n"
          << got.record(i).DebugString() << "want:\n"
          << want.DebugString();
      ++i;
    }
    EXPECT_EQ(i, got.record_size())
        << "the import has records the golden lacks";
  }
};

TEST_F(SamplesTest, KvmDmesgIgnoredRdmsr) {
  const std::string name = "kvm-dmesg-i915ovmfpkg-issue-22.log";
  Imported got = ImportSample(name);
  // 18 lines: 4 comments, 12 "ignored rdmsr", 2 vfio-pci lines.
  EXPECT_EQ(got.stats.lines, 18);
  EXPECT_EQ(got.stats.traps, 12);
  EXPECT_EQ(got.stats.skipped, 6);
  EXPECT_EQ(got.stats.malformed, 0);
  EXPECT_EQ(got.stats.by_format.at("kvm-dmesg"), 12);
  ASSERT_EQ(got.log.record_size(), 12);
  const v1::TrapRecord& first = got.log.record(0);
  EXPECT_EQ(first.trap().domain(), 1887u);
  EXPECT_EQ(first.trap().vcpu(), 0u);
  EXPECT_EQ(first.trap().insn(), std::string("\x0f\x32", 2));
  EXPECT_EQ(first.trap().regs().rcx(), 0x641u);
  EXPECT_EQ(first.trap().regs().rip(), 0xfffff8046a9311acull);
  EXPECT_EQ(first.expect().kind(), v1::Outcome::COMPLETED);
  EXPECT_EQ(first.expect().value(), 0u);
  EXPECT_EQ(first.source(), name + ":5");
  const v1::TrapRecord& r4 = got.log.record(3);  // line 8: vcpu4, 0x1ad
  EXPECT_EQ(r4.trap().vcpu(), 4u);
  EXPECT_EQ(r4.trap().regs().rcx(), 0x1adu);
  EXPECT_EQ(r4.source(), name + ":8");
  const v1::TrapRecord& last = got.log.record(11);  // line 17
  EXPECT_EQ(last.trap().vcpu(), 4u);
  EXPECT_EQ(last.trap().regs().rip(), 0xfffff8065963d61full);
  EXPECT_EQ(last.source(), name + ":17");
  EXPECT_EQ(ImportSample(name, "kvm-dmesg").stats.traps, 12);
  CheckGolden(name, got.log);
}

TEST_F(SamplesTest, KvmJournalUnhandledWrmsr63) {
  const std::string name = "kvm-journal-virt-manager-issue-570.log";
  Imported got = ImportSample(name);
  // 7 lines: 3 comments, 4 "Unhandled WRMSR(0xc0010115)" (vCPUs 3..0).
  EXPECT_EQ(got.stats.lines, 7);
  EXPECT_EQ(got.stats.traps, 4);
  EXPECT_EQ(got.stats.skipped, 3);
  EXPECT_EQ(got.stats.malformed, 0);
  ASSERT_EQ(got.log.record_size(), 4);
  for (int i = 0; i < 4; ++i) {
    const v1::TrapRecord& r = got.log.record(i);
    EXPECT_EQ(r.trap().domain(), 67539u);
    EXPECT_EQ(r.trap().vcpu(), static_cast<uint32_t>(3 - i));
    EXPECT_EQ(r.trap().insn(), std::string("\x0f\x30", 2));
    EXPECT_EQ(r.trap().regs().rcx(), 0xc0010115u);
    EXPECT_EQ(r.trap().regs().rax(), 0u);
    EXPECT_EQ(r.trap().regs().rdx(), 0u);
    EXPECT_EQ(r.trap().regs().rip(), 0xfffff8547ad7624dull);
    // MSR_VM_IGNNE: svm_set_msr logs and drops the write.
    EXPECT_EQ(r.expect().kind(), v1::Outcome::COMPLETED);
    EXPECT_EQ(r.source(), absl::StrCat(name, ":", 4 + i));
  }
  EXPECT_EQ(ImportSample(name, "kvm-dmesg").stats.traps, 4);
  CheckGolden(name, got.log);
}

TEST_F(SamplesTest, XenDmesgRdmsrUnimplemented) {
  const std::string name = "xen-dmesg-qubes-issue-9501.log";
  Imported got = ImportSample(name);
  // 29 lines: 5 comments, 2 PV dom0 + 9 HVM d3 "RDMSR ... unimplemented",
  // 13 other (XEN) lines.
  EXPECT_EQ(got.stats.lines, 29);
  EXPECT_EQ(got.stats.traps, 11);
  EXPECT_EQ(got.stats.skipped, 18);
  EXPECT_EQ(got.stats.malformed, 0);
  EXPECT_EQ(got.stats.by_format.at("xen-console"), 11);
  ASSERT_EQ(got.log.record_size(), 11);
  const v1::TrapRecord& pv = got.log.record(0);
  EXPECT_EQ(pv.trap().domain(), 0u);
  EXPECT_EQ(pv.trap().vcpu(), 6u);
  EXPECT_EQ(pv.trap().regs().rcx(), 0x64eu);
  EXPECT_EQ(pv.expect().kind(), v1::Outcome::EXCEPTION);
  EXPECT_EQ(pv.expect().vector(), v1::GP);
  EXPECT_EQ(pv.source(), name + ":9");
  EXPECT_EQ(pv.note(),
            "(XEN) arch/x86/pv/emul-priv-op.c:1029:d0v6 RDMSR 0x0000064e "
            "unimplemented");
  const v1::TrapRecord& hvm = got.log.record(2);
  EXPECT_EQ(hvm.trap().domain(), 3u);
  EXPECT_EQ(hvm.trap().vcpu(), 1u);
  EXPECT_EQ(hvm.trap().regs().rcx(), 0x619u);
  EXPECT_EQ(hvm.source(), name + ":16");
  const v1::TrapRecord& last = got.log.record(10);
  EXPECT_EQ(last.trap().vcpu(), 0u);
  EXPECT_EQ(last.trap().regs().rcx(), 0x64du);
  EXPECT_EQ(last.source(), name + ":24");
  EXPECT_EQ(ImportSample(name, "xen-console").stats.traps, 11);
  CheckGolden(name, got.log);
}

TEST_F(SamplesTest, FtraceKvmMsrAndCpuid) {
  const std::string name = "ftrace-kvm_msr-lkml-cr0wp-nested-intel.log";
  Imported got = ImportSample(name);
  // 58 lines: 4 comments, 1 kvm_cpuid, 1 msr_read, 2 msr_write, the rest
  // kvm_exit/kvm_entry/kvm_cr/mmu events.
  EXPECT_EQ(got.stats.lines, 58);
  EXPECT_EQ(got.stats.traps, 4);
  EXPECT_EQ(got.stats.skipped, 54);
  EXPECT_EQ(got.stats.malformed, 0);
  EXPECT_EQ(got.stats.by_format.at("ftrace"), 4);
  ASSERT_EQ(got.log.record_size(), 4);

  const v1::TrapRecord& cpuid = got.log.record(0);
  EXPECT_EQ(cpuid.trap().insn(), std::string("\x0f\xa2", 2));
  EXPECT_EQ(cpuid.trap().domain(), 8397u);
  EXPECT_EQ(cpuid.trap().vcpu(), 1u);
  EXPECT_EQ(cpuid.trap().regs().rip(), 0xffffffff81000127ull);
  EXPECT_EQ(cpuid.trap().regs().rax(), 0x80000001u);
  EXPECT_EQ(cpuid.trap().regs().rcx(), 0xd3f0eefu);
  EXPECT_EQ(cpuid.expect().cpuid().eax(), 0x50657u);
  EXPECT_EQ(cpuid.expect().cpuid().ebx(), 0u);
  EXPECT_EQ(cpuid.expect().cpuid().ecx(), 0x121u);
  EXPECT_EQ(cpuid.expect().cpuid().edx(), 0x2c100800u);
  EXPECT_EQ(cpuid.source(), name + ":36");

  const v1::TrapRecord& efer_read = got.log.record(1);
  EXPECT_EQ(efer_read.trap().insn(), std::string("\x0f\x32", 2));
  EXPECT_EQ(efer_read.trap().regs().rcx(), 0xc0000080u);
  EXPECT_EQ(efer_read.trap().regs().rip(), 0xffffffff81000130ull);
  EXPECT_EQ(efer_read.expect().kind(), v1::Outcome::COMPLETED);
  EXPECT_EQ(efer_read.expect().value(), 0xd01u);
  EXPECT_EQ(efer_read.source(), name + ":39");

  const v1::TrapRecord& efer_write = got.log.record(2);
  EXPECT_EQ(efer_write.trap().insn(), std::string("\x0f\x30", 2));
  EXPECT_EQ(efer_write.trap().regs().rax(), 0xd01u);
  EXPECT_EQ(efer_write.trap().regs().rip(), 0xffffffff81000149ull);
  EXPECT_EQ(efer_write.source(), name + ":42");

  const v1::TrapRecord& tsc_aux = got.log.record(3);
  EXPECT_EQ(tsc_aux.trap().regs().rcx(), 0xc0000103u);
  EXPECT_EQ(tsc_aux.trap().regs().rax(), 1u);
  EXPECT_EQ(tsc_aux.trap().regs().rip(), 0xffffffff81054faaull);
  EXPECT_EQ(tsc_aux.trap().vcpu(), 1u);
  EXPECT_EQ(tsc_aux.expect().kind(), v1::Outcome::COMPLETED);
  EXPECT_FALSE(tsc_aux.expect().has_value());
  EXPECT_EQ(tsc_aux.source(), name + ":50");
  EXPECT_EQ(ImportSample(name, "ftrace").stats.traps, 4);
  CheckGolden(name, got.log);
}

}  // namespace
}  // namespace pvemu::traplog
