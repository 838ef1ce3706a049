#include "x86/msr_catalog.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace pvemu::x86 {
namespace {

using ::pvemu::testing::StatusIs;
using ::testing::HasSubstr;

TEST(Catalog, HasAtLeast300Entries) {
  std::set<uint32_t> indices;
  for (const MsrInfo& m : MsrCatalog()) indices.insert(m.index);
  EXPECT_GE(MsrCatalog().size(), 300u);
  EXPECT_GE(indices.size(), 300u);
}

TEST(Catalog, NamesAreUniqueAndUpperCase) {
  std::set<std::string> names;
  for (const MsrInfo& m : MsrCatalog()) {
    EXPECT_TRUE(names.insert(std::string(m.name)).second) << m.name;
    for (char c : m.name) EXPECT_FALSE(c >= 'a' && c <= 'z') << m.name;
    EXPECT_NE(m.vendors, 0u) << m.name;
  }
}

TEST(Catalog, WellKnownIndices) {
  struct Known {
    const char* name;
    uint32_t index;
  } known[] = {
      {"IA32_TSC", 0x10},
      {"IA32_APIC_BASE", 0x1b},
      {"IA32_SPEC_CTRL", 0x48},
      {"IA32_PRED_CMD", 0x49},
      {"IA32_ARCH_CAPABILITIES", 0x10a},
      {"IA32_PMC0", 0xc1},
      {"IA32_PMC7", 0xc8},
      {"IA32_PERFEVTSEL0", 0x186},
      {"IA32_PERFEVTSEL7", 0x18d},
      {"IA32_FIXED_CTR0", 0x309},
      {"IA32_PERF_GLOBAL_CTRL", 0x38f},
      {"IA32_PERF_GLOBAL_STATUS", 0x38e},
      {"IA32_THERM_CONTROL", 0x19a},
      {"IA32_MISC_ENABLE", 0x1a0},
      {"IA32_ENERGY_PERF_BIAS", 0x1b0},
      {"IA32_PAT", 0x277},
      {"IA32_MTRR_PHYSBASE0", 0x200},
      {"IA32_MTRR_PHYSMASK7", 0x20f},
      {"IA32_MTRR_DEF_TYPE", 0x2ff},
      {"IA32_X2APIC_APICID", 0x802},
      {"IA32_X2APIC_ICR", 0x830},
      {"IA32_X2APIC_SELF_IPI", 0x83f},
      {"IA32_EFER", 0xc0000080},
      {"IA32_STAR", 0xc0000081},
      {"IA32_LSTAR", 0xc0000082},
      {"IA32_CSTAR", 0xc0000083},
      {"MSR_SFMASK", 0xc0000084},
      {"IA32_FS_BASE", 0xc0000100},
      {"IA32_GS_BASE", 0xc0000101},
      {"IA32_KERNEL_GS_BASE", 0xc0000102},
      {"IA32_TSC_AUX", 0xc0000103},
      {"MSR_K7_EVNTSEL0", 0xc0010000},
      {"MSR_K7_PERFCTR3", 0xc0010007},
      {"MSR_F15H_PERF_CTL0", 0xc0010200},
      {"MSR_F15H_PERF_CTR5", 0xc001020b},
      {"MSR_AMD64_NB_CFG", 0xc001001f},
      {"MSR_FAM10H_MMIO_CONF_BASE", 0xc0010058},
      {"MSR_K8_PSTATE_LIMIT", 0xc0010061},
      {"MSR_K8_PSTATE7", 0xc001006b},
      {"MSR_PLATFORM_INFO", 0xce},
      {"HV_X64_MSR_GUEST_OS_ID", 0x40000000},
      {"HV_X64_MSR_HYPERCALL", 0x40000001},
      {"MSR_KVM_SYSTEM_TIME_NEW", 0x4b564d01},
  };
  for (const Known& k : known) {
    EXPECT_EQ(MsrIndexByName(k.name), k.index) << k.name;
  }
  EXPECT_EQ(MsrName(0x1b0), "IA32_ENERGY_PERF_BIAS");
  EXPECT_EQ(MsrName(0xc0000080), "IA32_EFER");  // first row is canonical
  EXPECT_EQ(MsrName(0x12345678), "");
}

TEST(Catalog, VendorsPerEntry) {
  EXPECT_TRUE(MsrExistsOn(0x1b0, Vendor::kIntel));
  EXPECT_FALSE(MsrExistsOn(0x1b0, Vendor::kAmd));
  EXPECT_FALSE(MsrExistsOn(0x19a, Vendor::kAmd));
  EXPECT_TRUE(MsrExistsOn(0xc001001f, Vendor::kAmd));
  EXPECT_TRUE(MsrExistsOn(0xc001001f, Vendor::kHygon));
  EXPECT_FALSE(MsrExistsOn(0xc001001f, Vendor::kIntel));
  EXPECT_TRUE(MsrExistsOn(0xc0000080, Vendor::kIntel));
  EXPECT_TRUE(MsrExistsOn(0xc0000080, Vendor::kZhaoxin));
  EXPECT_FALSE(MsrExistsOn(0x99999, Vendor::kIntel));
}

TEST(ParseMsr, NamesAnyCase) {
  EXPECT_EQ(*ParseMsr("ia32_energy_perf_bias"), 0x1b0u);
  EXPECT_EQ(*ParseMsr("Ia32_Efer"), 0xc0000080u);
  EXPECT_EQ(*ParseMsr("  IA32_PAT "), 0x277u);
}

TEST(ParseMsr, Numbers) {
  EXPECT_EQ(*ParseMsr("0x1b0"), 0x1b0u);
  EXPECT_EQ(*ParseMsr("0X1B0"), 0x1b0u);
  EXPECT_EQ(*ParseMsr("432"), 432u);
  EXPECT_EQ(*ParseMsr("0xffffffff"), 0xffffffffu);
  EXPECT_THAT(ParseMsr("0x100000000"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "MSR number '0x100000000' does not fit in 32 bits (ECX); the largest "
                       "is 0xffffffff"));
  EXPECT_THAT(ParseMsr("0xzz"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         "bad MSR number '0xzz'; use decimal (432) or 0x hex "
                                         "(0x1b0)"));
  EXPECT_THAT(ParseMsr(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("empty MSR")));
}

TEST(ParseMsr, UnknownNameSuggestsNearest) {
  EXPECT_THAT(ParseMsr("IA32_ENERGY_PERF_BAIS"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "unknown MSR 'IA32_ENERGY_PERF_BAIS'; did you mean "
                       "IA32_ENERGY_PERF_BIAS (0x1b0)? Use a catalog name or a number "
                       "(decimal or 0x hex)"));
  EXPECT_THAT(ParseMsr("ia32_therm_contrl"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("did you mean IA32_THERM_CONTROL (0x19a)?")));
}

TEST(ParseMsr, HugeUnknownNameIsQuotedInPartWithoutASuggestion) {
  // A megabyte "name" over the API: no edit-distance search (quadratic in
  // the word), and the error quotes a prefix rather than echoing it all.
  const std::string huge(1 << 20, 'Q');
  absl::Status status = ParseMsr(huge).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("(1048576 bytes, longer than any catalog name)")));
  EXPECT_LT(status.message().size(), 300u);
}

}  // namespace
}  // namespace pvemu::x86
