#include "x86/msr_catalog.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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

// --- Names operators use: Linux's and Xen's msr-index.h ---------------------

TEST(HeaderAliases, ResolveToTheirOwnIndex) {
  struct Alias {
    const char* name;
    uint32_t index;
  } aliases[] = {
      // Linux's MSR_IA32_PMC0 is the full-width alias IA32_A_PMC0, not IA32_PMC0.
      {"MSR_IA32_PMC0", 0x4c1},
      {"MSR_IA32_A_PERFCTR0", 0x4c1},  // Xen's name for it
      {"IA32_PMC0", 0xc1},
      {"MSR_IA32_PERFCTR0", 0xc1},
      {"MSR_P6_PERFCTR1", 0xc2},
      {"MSR_P6_EVNTSEL0", 0x186},
      {"MSR_IA32_ENERGY_PERF_BIAS", 0x1b0},
      {"MSR_EFER", 0xc0000080},
      {"MSR_K6_EFER", 0xc0000080},
      {"MSR_K6_WHCR", 0xc0000082},  // a K6 register at IA32_LSTAR's index
      {"MSR_KERNEL_GS_BASE", 0xc0000102},
      {"MSR_SHADOW_GS_BASE", 0xc0000102},
      {"MSR_K7_EVNTSEL0", 0xc0010000},
      {"MSR_K7_PERFCTR3", 0xc0010007},
      {"MSR_K7_HWCR", 0xc0010015},
      {"MSR_K7_CLK_CTL", 0xc001001b},
      {"MSR_K8_TSEG_BASE", 0xc0010112},
      {"MSR_K8_ENABLE_C1E", 0xc0010055},
      {"MSR_F10_BU_CFG", 0xc0011023},
      {"MSR_F10_MC4_MISC1", 0xc0000408},
      {"MSR_F15H_PERF_CTL", 0xc0010200},
      {"MSR_F15H_PERF_CTR5", 0xc001020b},
      {"MSR_AMD_FAM15H_EVNTSEL5", 0xc001020a},
      {"MSR_F16H_DR0_ADDR_MASK", 0xc0011027},
      {"MSR_F17H_IRPERF", 0xc00000e9},
      {"MSR_AMD64_SYSCFG", 0xc0010010},
      {"MSR_AMD64_CPUID_FN_1", 0xc0011004},
      {"MSR_AMD64_DE_CFG2", 0xc00110e3},
      {"MSR_ZEN2_SPECTRAL_CHICKEN", 0xc00110e3},
      {"MSR_AMD_PATCHLEVEL", 0x8b},
      {"MSR_IA32_UCODE_REV", 0x8b},
      {"MSR_P4_BPU_PERFCTR0", 0x300},
      {"MSR_P4_FLAME_PERFCTR1", 0x309},  // shares IA32_FIXED_CTR0's index
      {"MSR_P4_IQ_CCCR5", 0x371},
      {"MSR_P4_U2L_ESCR1", 0x3b1},
      {"MSR_P4_LER_FROM_LIP", 0x1d7},
      {"MSR_P4_LASTBRANCH_TOS", 0x1da},
      {"MSR_IA32_MCG_EBP", 0x186},
      {"MSR_IA32_MCG_R15", 0x197},
      {"MSR_IA32_FEAT_CTL", 0x3a},
      {"MSR_IA32_FEATURE_CONTROL", 0x3a},
      {"MSR_IA32_CORE_CAPS", 0xcf},
      {"MSR_IA32_DEBUGCTLMSR", 0x1d9},
      {"MSR_MTRRcap", 0xfe},
      {"MSR_MTRRfix4K_F8000", 0x26f},
      {"MSR_MTRRdefType", 0x2ff},
      {"MSR_IA32_CR_PAT", 0x277},
      {"MSR_LBR_TOS", 0x1c9},
      {"MSR_SKL_LASTBRANCH_0_FROM_IP", 0x680},
      {"MSR_C2_LASTBRANCH_0_FROM_IP", 0x40},
      {"MSR_ARCH_LBR_CTL", 0x14ce},
      {"MSR_IA32_INT_SSP_TAB", 0x6a8},
      {"MSR_INTERRUPT_SSP_TABLE", 0x6a8},
      {"MSR_X2APIC_TMICT", 0x838},
      {"MSR_IA32_CMT_EVTSEL", 0xc8d},
      {"MSR_INTEL_MASK_V3_CPUIDD_01", 0x134},
      {"MSR_IDT_FCR4", 0x10a},
      {"MSR_VIA_LONGHAUL", 0x110a},
      {"MSR_UARCH_MISC_CTRL", 0x1b01},
      {"MSR_IA32_XAPIC_DISABLE_STATUS", 0xbd},
  };
  for (const Alias& a : aliases) {
    EXPECT_EQ(MsrIndexByName(a.name), a.index) << a.name;
  }
  EXPECT_EQ(*ParseMsr("msr_ia32_energy_perf_bias"), 0x1b0u);
}

TEST(HeaderAliases, CanonicalNamesOfExistingMsrsAreUnchanged) {
  // The canonical name of every index that had a row before the header
  // aliases came and gained an alias with them.
  struct Canonical {
    uint32_t index;
    const char* name;
  } canonical[] = {
      {0x0, "IA32_P5_MC_ADDR"}, {0x1, "IA32_P5_MC_TYPE"}, {0x10, "IA32_TIME_STAMP_COUNTER"},
      {0x17, "IA32_PLATFORM_ID"}, {0x1b, "IA32_APIC_BASE"}, {0x35, "MSR_CORE_THREAD_COUNT"},
      {0x3a, "IA32_FEATURE_CONTROL"}, {0x3b, "IA32_TSC_ADJUST"}, {0x48, "IA32_SPEC_CTRL"},
      {0x49, "IA32_PRED_CMD"}, {0x79, "IA32_BIOS_UPDT_TRIG"}, {0x8b, "IA32_BIOS_SIGN_ID"},
      {0x9b, "IA32_SMM_MONITOR_CTL"}, {0x9e, "IA32_SMBASE"}, {0xbc, "IA32_MISC_PACKAGE_CTLS"},
      {0xc1, "IA32_PMC0"}, {0xc2, "IA32_PMC1"}, {0xce, "MSR_PLATFORM_INFO"},
      {0xcf, "IA32_CORE_CAPABILITIES"}, {0xe1, "IA32_UMWAIT_CONTROL"}, {0xe7, "IA32_MPERF"},
      {0xe8, "IA32_APERF"}, {0xfe, "IA32_MTRRCAP"}, {0x10a, "IA32_ARCH_CAPABILITIES"},
      {0x10b, "IA32_FLUSH_CMD"}, {0x122, "IA32_TSX_CTRL"}, {0x123, "IA32_MCU_OPT_CTRL"},
      {0x140, "MSR_MISC_FEATURES_ENABLES"}, {0x174, "IA32_SYSENTER_CS"},
      {0x175, "IA32_SYSENTER_ESP"}, {0x176, "IA32_SYSENTER_EIP"}, {0x179, "IA32_MCG_CAP"},
      {0x17a, "IA32_MCG_STATUS"}, {0x17b, "IA32_MCG_CTL"}, {0x186, "IA32_PERFEVTSEL0"},
      {0x187, "IA32_PERFEVTSEL1"}, {0x188, "IA32_PERFEVTSEL2"}, {0x189, "IA32_PERFEVTSEL3"},
      {0x18a, "IA32_PERFEVTSEL4"}, {0x198, "IA32_PERF_STATUS"}, {0x199, "IA32_PERF_CTL"},
      {0x19a, "IA32_THERM_CONTROL"}, {0x19b, "IA32_THERM_INTERRUPT"}, {0x19c, "IA32_THERM_STATUS"},
      {0x1a0, "IA32_MISC_ENABLE"}, {0x1a2, "MSR_TEMPERATURE_TARGET"},
      {0x1b0, "IA32_ENERGY_PERF_BIAS"}, {0x1b1, "IA32_PACKAGE_THERM_STATUS"},
      {0x1b2, "IA32_PACKAGE_THERM_INTERRUPT"}, {0x1c4, "IA32_XFD"}, {0x1c5, "IA32_XFD_ERR"},
      {0x1c8, "MSR_LBR_SELECT"}, {0x1c9, "MSR_LASTBRANCH_TOS"}, {0x1d9, "IA32_DEBUGCTL"},
      {0x1db, "MSR_LASTBRANCHFROMIP"}, {0x1dc, "MSR_LASTBRANCHTOIP"}, {0x1dd, "MSR_LASTINTFROMIP"},
      {0x1de, "MSR_LASTINTTOIP"}, {0x1fc, "MSR_POWER_CTL"}, {0x250, "IA32_MTRR_FIX64K_00000"},
      {0x258, "IA32_MTRR_FIX16K_80000"}, {0x259, "IA32_MTRR_FIX16K_A0000"},
      {0x268, "IA32_MTRR_FIX4K_C0000"}, {0x269, "IA32_MTRR_FIX4K_C8000"},
      {0x26a, "IA32_MTRR_FIX4K_D0000"}, {0x26b, "IA32_MTRR_FIX4K_D8000"},
      {0x26c, "IA32_MTRR_FIX4K_E0000"}, {0x26d, "IA32_MTRR_FIX4K_E8000"},
      {0x26e, "IA32_MTRR_FIX4K_F0000"}, {0x26f, "IA32_MTRR_FIX4K_F8000"}, {0x277, "IA32_PAT"},
      {0x280, "IA32_MC0_CTL2"}, {0x2ff, "IA32_MTRR_DEF_TYPE"}, {0x309, "IA32_FIXED_CTR0"},
      {0x30a, "IA32_FIXED_CTR1"}, {0x30b, "IA32_FIXED_CTR2"}, {0x30c, "IA32_FIXED_CTR3"},
      {0x345, "IA32_PERF_CAPABILITIES"}, {0x38d, "IA32_FIXED_CTR_CTRL"},
      {0x38e, "IA32_PERF_GLOBAL_STATUS"}, {0x38f, "IA32_PERF_GLOBAL_CTRL"},
      {0x390, "IA32_PERF_GLOBAL_OVF_CTRL"}, {0x3f1, "IA32_PEBS_ENABLE"},
      {0x3fa, "MSR_PKG_C7_RESIDENCY"}, {0x400, "IA32_MC0_CTL"}, {0x401, "IA32_MC0_STATUS"},
      {0x402, "IA32_MC0_ADDR"}, {0x403, "IA32_MC0_MISC"}, {0x480, "IA32_VMX_BASIC"},
      {0x481, "IA32_VMX_PINBASED_CTLS"}, {0x482, "IA32_VMX_PROCBASED_CTLS"},
      {0x483, "IA32_VMX_EXIT_CTLS"}, {0x484, "IA32_VMX_ENTRY_CTLS"}, {0x485, "IA32_VMX_MISC"},
      {0x486, "IA32_VMX_CR0_FIXED0"}, {0x487, "IA32_VMX_CR0_FIXED1"},
      {0x488, "IA32_VMX_CR4_FIXED0"}, {0x489, "IA32_VMX_CR4_FIXED1"},
      {0x48a, "IA32_VMX_VMCS_ENUM"}, {0x48b, "IA32_VMX_PROCBASED_CTLS2"},
      {0x48c, "IA32_VMX_EPT_VPID_CAP"}, {0x48d, "IA32_VMX_TRUE_PINBASED_CTLS"},
      {0x48e, "IA32_VMX_TRUE_PROCBASED_CTLS"}, {0x48f, "IA32_VMX_TRUE_EXIT_CTLS"},
      {0x490, "IA32_VMX_TRUE_ENTRY_CTLS"}, {0x491, "IA32_VMX_VMFUNC"},
      {0x492, "IA32_VMX_PROCBASED_CTLS3"}, {0x4c1, "IA32_A_PMC0"}, {0x4d0, "IA32_MCG_EXT_CTL"},
      {0x560, "IA32_RTIT_OUTPUT_BASE"}, {0x561, "IA32_RTIT_OUTPUT_MASK_PTRS"},
      {0x570, "IA32_RTIT_CTL"}, {0x571, "IA32_RTIT_STATUS"}, {0x572, "IA32_RTIT_CR3_MATCH"},
      {0x580, "IA32_RTIT_ADDR0_A"}, {0x581, "IA32_RTIT_ADDR0_B"}, {0x582, "IA32_RTIT_ADDR1_A"},
      {0x583, "IA32_RTIT_ADDR1_B"}, {0x584, "IA32_RTIT_ADDR2_A"}, {0x585, "IA32_RTIT_ADDR2_B"},
      {0x586, "IA32_RTIT_ADDR3_A"}, {0x587, "IA32_RTIT_ADDR3_B"}, {0x600, "IA32_DS_AREA"},
      {0x6a0, "IA32_U_CET"}, {0x6a2, "IA32_S_CET"}, {0x6a4, "IA32_PL0_SSP"},
      {0x6a5, "IA32_PL1_SSP"}, {0x6a6, "IA32_PL2_SSP"}, {0x6a7, "IA32_PL3_SSP"},
      {0x6a8, "IA32_INTERRUPT_SSP_TABLE_ADDR"}, {0x6e0, "IA32_TSC_DEADLINE"},
      {0x770, "IA32_PM_ENABLE"}, {0x771, "IA32_HWP_CAPABILITIES"}, {0x772, "IA32_HWP_REQUEST_PKG"},
      {0x773, "IA32_HWP_INTERRUPT"}, {0x774, "IA32_HWP_REQUEST"}, {0x777, "IA32_HWP_STATUS"},
      {0x808, "IA32_X2APIC_TPR"}, {0x80a, "IA32_X2APIC_PPR"}, {0x80b, "IA32_X2APIC_EOI"},
      {0x838, "IA32_X2APIC_INIT_COUNT"}, {0x839, "IA32_X2APIC_CUR_COUNT"},
      {0x83f, "IA32_X2APIC_SELF_IPI"}, {0xc81, "IA32_L3_QOS_CFG"}, {0xc8d, "IA32_QM_EVTSEL"},
      {0xc8e, "IA32_QM_CTR"}, {0xc8f, "IA32_PQR_ASSOC"}, {0xd90, "IA32_BNDCFGS"},
      {0xda0, "IA32_XSS"}, {0xc0000080, "IA32_EFER"}, {0xc0000081, "IA32_STAR"},
      {0xc0000082, "IA32_LSTAR"}, {0xc00000e9, "MSR_AMD64_IRPERF_COUNT"},
      {0xc0000102, "IA32_KERNEL_GS_BASE"}, {0xc0010010, "MSR_K8_SYSCFG"},
      {0xc0010020, "MSR_AMD64_PATCH_LOADER"}, {0xc0010055, "MSR_K8_INT_PENDING_MSG"},
      {0xc0010112, "MSR_K8_TSEG_ADDR"}, {0xc0010114, "MSR_K8_VM_CR"}, {0xc0010115, "MSR_K8_IGNNE"},
      {0xc0010117, "MSR_K8_VM_HSAVE_PA"}, {0xc001011f, "MSR_AMD64_VIRT_SPEC_CTRL"},
      {0xc0010140, "MSR_AMD64_OSVW_ID_LENGTH"}, {0xc0010141, "MSR_AMD64_OSVW_STATUS"},
      {0xc0010200, "MSR_F15H_PERF_CTL0"}, {0xc0010201, "MSR_F15H_PERF_CTR0"},
      {0xc0010202, "MSR_F15H_PERF_CTL1"}, {0xc0010203, "MSR_F15H_PERF_CTR1"},
      {0xc0010204, "MSR_F15H_PERF_CTL2"}, {0xc0010205, "MSR_F15H_PERF_CTR2"},
      {0xc0010206, "MSR_F15H_PERF_CTL3"}, {0xc0010207, "MSR_F15H_PERF_CTR3"},
      {0xc0010208, "MSR_F15H_PERF_CTL4"}, {0xc0010209, "MSR_F15H_PERF_CTR4"},
      {0xc001020a, "MSR_F15H_PERF_CTL5"}, {0xc001020b, "MSR_F15H_PERF_CTR5"},
      {0xc0010240, "MSR_F15H_NB_PERF_CTL0"}, {0xc0010241, "MSR_F15H_NB_PERF_CTR0"},
      {0xc0011004, "MSR_K8_FEATURE_MASK"}, {0xc0011019, "MSR_AMD64_DR1_ADDRESS_MASK"},
      {0xc001101a, "MSR_AMD64_DR2_ADDRESS_MASK"}, {0xc001101b, "MSR_AMD64_DR3_ADDRESS_MASK"},
      {0xc0011023, "MSR_AMD64_TW_CFG"}, {0xc0011027, "MSR_AMD64_DR0_ADDRESS_MASK"},
      {0xc001102a, "MSR_AMD64_BU_CFG2"},
  };
  for (const Canonical& c : canonical) {
    EXPECT_EQ(MsrName(c.index), c.name) << std::hex << c.index;
  }
  EXPECT_EQ(MsrDisplay(0x1b0), "IA32_ENERGY_PERF_BIAS (0x1b0)");
  EXPECT_EQ(MsrDisplay(*MsrIndexByName("MSR_IA32_PMC0")), "IA32_A_PMC0 (0x4c1)");
  EXPECT_EQ(MsrDisplay(*MsrIndexByName("MSR_EFER")), "IA32_EFER (0xc0000080)");
}

TEST(HeaderAliases, NewIndicesTakeTheManualNameElseTheHeaderName) {
  EXPECT_EQ(MsrName(0x8c), "IA32_SGXLEPUBKEYHASH0");
  EXPECT_EQ(MsrName(0x2d9), "IA32_INTEGRITY_CAPABILITIES");
  EXPECT_EQ(MsrName(0x14ce), "IA32_LBR_CTL");
  EXPECT_EQ(MsrName(0x1d7), "MSR_LER_FROM_LIP");
  EXPECT_EQ(MsrName(0x3f2), "MSR_PEBS_DATA_CFG");
  EXPECT_EQ(MsrName(0x300), "MSR_P4_BPU_PERFCTR0");
  EXPECT_EQ(MsrName(0x680), "MSR_LBR_NHM_FROM");
  EXPECT_EQ(MsrName(0xc00110e3), "MSR_ZEN2_SPECTRAL_CHICKEN");
  EXPECT_TRUE(MsrExistsOn(0x300, Vendor::kIntel));
  EXPECT_FALSE(MsrExistsOn(0x300, Vendor::kAmd));
  EXPECT_TRUE(MsrExistsOn(0xc0000105, Vendor::kAmd));
  EXPECT_FALSE(MsrExistsOn(0xc0000105, Vendor::kHygon));
  EXPECT_TRUE(MsrExistsOn(0x110, Vendor::kCentaur));
  // The aliases of an index, canonical first.
  std::vector<std::string> names;
  for (const MsrInfo* m : MsrRows(0x4c1)) names.emplace_back(m->name);
  EXPECT_THAT(names, ::testing::ElementsAre("IA32_A_PMC0", "MSR_IA32_PMC0",
                                            "MSR_IA32_A_PERFCTR0"));
  EXPECT_TRUE(MsrRows(0x12345678).empty());
}

TEST(Catalog, NoNameHasTwoIndices) {
  std::map<std::string, uint32_t> index_of;
  for (const MsrInfo& m : MsrCatalog()) {
    auto [it, inserted] = index_of.emplace(absl::AsciiStrToLower(m.name), m.index);
    EXPECT_EQ(it->second, m.index) << m.name << " names two indices";
    EXPECT_EQ(MsrIndexByName(m.name), m.index) << m.name;
  }
}

struct HeaderName {
  std::string header;  // "linux" or "xen"
  std::string name;
  uint32_t index;
};

// tests/x86/msr_index_names.txt: every MSR index the two headers define.
std::vector<HeaderName> ReadHeaderNames() {
  const char* root = std::getenv("PVEMU_SOURCE_ROOT");
  EXPECT_NE(root, nullptr) << "run through meson test";
  std::vector<HeaderName> out;
  if (root == nullptr) return out;
  const std::string path = absl::StrCat(root, "/tests/x86/msr_index_names.txt");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint32_t index = 0;
    EXPECT_EQ(f.size(), 3u) << line;
    EXPECT_TRUE(f.size() == 3 && absl::SimpleHexAtoi(f[2], &index)) << line;
    if (f.size() == 3) out.push_back({f[0], f[1], index});
  }
  return out;
}

TEST(HeaderAliases, CoverLinuxAndXenMsrIndexH) {
  const std::vector<HeaderName> names = ReadHeaderNames();
  std::map<std::string, std::pair<int, int>> resolved;  // header -> (resolved, total)
  for (const HeaderName& h : names) {
    ASSERT_TRUE(h.header == "linux" || h.header == "xen") << h.name;
    auto& [ok, total] = resolved[h.header];
    ++total;
    std::optional<uint32_t> index = MsrIndexByName(h.name);
    if (!index.has_value()) continue;
    ++ok;
    EXPECT_EQ(*index, h.index) << h.header << " " << h.name;
  }
  // The list itself is whole (so the check cannot pass on an empty file).
  EXPECT_EQ(resolved["linux"].second, 477);
  EXPECT_EQ(resolved["xen"].second, 380);
  for (const auto& [header, counts] : resolved) {
    const double coverage = 100.0 * counts.first / counts.second;
    std::printf("%s msr-index.h: %d of %d names resolve (%.1f%%)\n", header.c_str(),
                counts.first, counts.second, coverage);
    EXPECT_GE(coverage, 95.0) << header;
  }
}

TEST(HeaderAliases, HeadersColumnMatchesTheList) {
  std::map<std::string, uint32_t> from;  // lower-case name -> kNameFrom* bits
  for (const HeaderName& h : ReadHeaderNames()) {
    from[absl::AsciiStrToLower(h.name)] |= h.header == "linux" ? kNameFromLinux : kNameFromXen;
  }
  ASSERT_FALSE(from.empty());
  for (const MsrInfo& m : MsrCatalog()) {
    auto it = from.find(absl::AsciiStrToLower(m.name));
    EXPECT_EQ(m.headers, it == from.end() ? 0u : it->second) << m.name;
  }
}

}  // namespace
}  // namespace pvemu::x86
