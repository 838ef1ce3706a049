// Helpers the importer tests share: ImportLog on a string, and checks of
// the records a line gives.
#ifndef PVEMU_TESTS_TRAPLOG_IMPORT_TEST_UTIL_H_
#define PVEMU_TESTS_TRAPLOG_IMPORT_TEST_UTIL_H_

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pvemu/v1/trap.pb.h"
#include "tests/status_matchers.h"
#include "traplog/import.h"

namespace pvemu::traplog::test_util {

// The names the importer tests use, for `using namespace test_util`.
namespace v1 = ::pvemu::v1;
using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Imported {
  ImportStats stats;
  std::vector<v1::TrapRecord> records;
};

inline Imported Import(absl::string_view text,
                       absl::string_view format = "auto") {
  Imported out;
  std::istringstream in{std::string(text)};
  absl::StatusOr<ImportStats> stats =
      ImportLog(format, in, "test.log", [&](v1::TrapRecord&& r) {
        out.records.push_back(std::move(r));
        return absl::OkStatus();
      });
  EXPECT_THAT(stats, IsOk());
  if (stats.ok()) out.stats = *stats;
  EXPECT_EQ(out.stats.lines,
            out.stats.traps + out.stats.skipped + out.stats.malformed);
  EXPECT_EQ(out.stats.traps, static_cast<int64_t>(out.records.size()));
  return out;
}

// One line that must give exactly one record.
inline v1::TrapRecord One(absl::string_view line,
                          absl::string_view format = "auto") {
  Imported got = Import(line, format);
  EXPECT_EQ(got.records.size(), 1u) << line;
  EXPECT_EQ(got.stats.malformed, 0) << line;
  if (got.records.empty()) return v1::TrapRecord();
  return got.records[0];
}

inline const std::string kRdmsr("\x0f\x32", 2);

inline const std::string kWrmsr("\x0f\x30", 2);

inline const std::string kCpuid("\x0f\xa2", 2);

inline void ExpectRdmsr(const v1::TrapRecord& r, uint32_t domain, uint32_t vcpu,
                        uint32_t msr) {
  EXPECT_EQ(r.trap().insn(), kRdmsr);
  EXPECT_EQ(r.trap().domain(), domain);
  EXPECT_EQ(r.trap().vcpu(), vcpu);
  EXPECT_EQ(r.trap().regs().rcx(), msr);
  EXPECT_EQ(r.trap().mode(), v1::MODE_64);
  EXPECT_EQ(r.trap().cpl(), 0u);
}

inline void ExpectWrmsr(const v1::TrapRecord& r, uint32_t domain, uint32_t vcpu,
                        uint32_t msr, uint64_t value) {
  EXPECT_EQ(r.trap().insn(), kWrmsr);
  EXPECT_EQ(r.trap().domain(), domain);
  EXPECT_EQ(r.trap().vcpu(), vcpu);
  EXPECT_EQ(r.trap().regs().rcx(), msr);
  EXPECT_EQ(r.trap().regs().rax(), value & 0xffffffffu);
  EXPECT_EQ(r.trap().regs().rdx(), value >> 32);
}

inline void ExpectGp(const v1::TrapRecord& r) {
  EXPECT_EQ(r.expect().kind(), v1::Outcome::EXCEPTION) << r.note();
  EXPECT_TRUE(r.expect().has_vector());
  EXPECT_EQ(r.expect().vector(), v1::GP);
  EXPECT_FALSE(r.expect().has_value());
}

inline void ExpectCompleted(const v1::TrapRecord& r) {
  EXPECT_EQ(r.expect().kind(), v1::Outcome::COMPLETED) << r.note();
  EXPECT_FALSE(r.expect().has_vector());
}

inline void ExpectReadValue(const v1::TrapRecord& r, uint64_t value) {
  ExpectCompleted(r);
  ASSERT_TRUE(r.expect().has_value()) << r.note();
  EXPECT_EQ(r.expect().value(), value);
}

}  // namespace pvemu::traplog::test_util

#endif  // PVEMU_TESTS_TRAPLOG_IMPORT_TEST_UTIL_H_
