// The MSR catalog table and its lookups. Numbers follow the Intel SDM vol. 4,
// the AMD APM / BKDGs / PPRs, Xen's msr-index.h and Linux's msr-index.h; where
// those name one index differently both names are listed, the first being the
// one MsrName() prints.
#include "x86/msr_catalog.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pvemu::x86 {
namespace {

constexpr uint32_t kIntel = kVendorIntel;
constexpr uint32_t kCentaur = kVendorCentaur;
constexpr uint32_t kZhaoxin = kVendorZhaoxin;
// Intel-architecture MSRs that the VIA/Centaur and Zhaoxin cores implement too.
constexpr uint32_t kIntelLike = kVendorIntel | kVendorCentaur | kVendorZhaoxin;
// Hygon Dhyana is a Zen derivative and shares AMD's MSR map.
constexpr uint32_t kAmdLike = kVendorAmd | kVendorHygon;
constexpr uint32_t kAll = kIntelLike | kAmdLike;

// The one data table. Several names may share an index (aliases); the first
// row of an index is its canonical name.
constexpr MsrInfo kCatalog[] = {
    {0x0, "IA32_P5_MC_ADDR", kAll},
    {0x1, "IA32_P5_MC_TYPE", kAll},
    {0x6, "IA32_MONITOR_FILTER_SIZE", kIntelLike},
    {0x10, "IA32_TIME_STAMP_COUNTER", kAll},
    {0x10, "IA32_TSC", kAll},
    {0x11, "MSR_KVM_WALL_CLOCK", kAll},
    {0x12, "MSR_KVM_SYSTEM_TIME", kAll},
    {0x17, "IA32_PLATFORM_ID", kIntel},
    {0x1b, "IA32_APIC_BASE", kAll},
    {0x33, "MSR_TEST_CTRL", kIntel},
    {0x34, "MSR_SMI_COUNT", kIntel},
    {0x35, "MSR_CORE_THREAD_COUNT", kIntel},
    {0x3a, "IA32_FEATURE_CONTROL", kIntelLike},
    {0x3b, "IA32_TSC_ADJUST", kIntelLike},
    {0x48, "IA32_SPEC_CTRL", kAll},
    {0x49, "IA32_PRED_CMD", kAll},
    {0x79, "IA32_BIOS_UPDT_TRIG", kIntelLike},
    {0x8b, "IA32_BIOS_SIGN_ID", kAll},
    {0x8b, "MSR_AMD64_PATCH_LEVEL", kAll},
    {0x9b, "IA32_SMM_MONITOR_CTL", kIntel},
    {0x9e, "IA32_SMBASE", kIntel},
    {0xbc, "IA32_MISC_PACKAGE_CTLS", kIntel},
    {0xc1, "IA32_PMC0", kIntelLike},
    {0xc2, "IA32_PMC1", kIntelLike},
    {0xc3, "IA32_PMC2", kIntelLike},
    {0xc4, "IA32_PMC3", kIntelLike},
    {0xc5, "IA32_PMC4", kIntelLike},
    {0xc6, "IA32_PMC5", kIntelLike},
    {0xc7, "IA32_PMC6", kIntelLike},
    {0xc8, "IA32_PMC7", kIntelLike},
    {0xce, "MSR_PLATFORM_INFO", kIntel},
    {0xcf, "IA32_CORE_CAPABILITIES", kIntel},
    {0xe1, "IA32_UMWAIT_CONTROL", kIntel},
    {0xe2, "MSR_PKG_CST_CONFIG_CONTROL", kIntel},
    {0xe4, "MSR_PMG_IO_CAPTURE_BASE", kIntel},
    {0xe7, "IA32_MPERF", kAll},
    {0xe8, "IA32_APERF", kAll},
    {0xfe, "IA32_MTRRCAP", kAll},
    {0x10a, "IA32_ARCH_CAPABILITIES", kIntel},
    {0x10b, "IA32_FLUSH_CMD", kIntel},
    {0x10f, "MSR_TSX_FORCE_ABORT", kIntel},
    {0x122, "IA32_TSX_CTRL", kIntel},
    {0x123, "IA32_MCU_OPT_CTRL", kIntel},
    {0x140, "MSR_MISC_FEATURES_ENABLES", kIntel},
    {0x174, "IA32_SYSENTER_CS", kAll},
    {0x175, "IA32_SYSENTER_ESP", kAll},
    {0x176, "IA32_SYSENTER_EIP", kAll},
    {0x179, "IA32_MCG_CAP", kAll},
    {0x17a, "IA32_MCG_STATUS", kAll},
    {0x17b, "IA32_MCG_CTL", kAll},
    {0x186, "IA32_PERFEVTSEL0", kIntelLike},
    {0x187, "IA32_PERFEVTSEL1", kIntelLike},
    {0x188, "IA32_PERFEVTSEL2", kIntelLike},
    {0x189, "IA32_PERFEVTSEL3", kIntelLike},
    {0x18a, "IA32_PERFEVTSEL4", kIntelLike},
    {0x18b, "IA32_PERFEVTSEL5", kIntelLike},
    {0x18c, "IA32_PERFEVTSEL6", kIntelLike},
    {0x18d, "IA32_PERFEVTSEL7", kIntelLike},
    {0x198, "IA32_PERF_STATUS", kIntelLike},
    {0x199, "IA32_PERF_CTL", kIntelLike},
    {0x19a, "IA32_THERM_CONTROL", kIntel},
    {0x19a, "IA32_CLOCK_MODULATION", kIntel},
    {0x19b, "IA32_THERM_INTERRUPT", kIntel},
    {0x19c, "IA32_THERM_STATUS", kIntel},
    {0x1a0, "IA32_MISC_ENABLE", kIntelLike},
    {0x1a2, "MSR_TEMPERATURE_TARGET", kIntel},
    {0x1a4, "MSR_MISC_FEATURE_CONTROL", kIntel},
    {0x1a6, "MSR_OFFCORE_RSP_0", kIntel},
    {0x1a7, "MSR_OFFCORE_RSP_1", kIntel},
    {0x1aa, "MSR_MISC_PWR_MGMT", kIntel},
    {0x1ad, "MSR_TURBO_RATIO_LIMIT", kIntel},
    {0x1ae, "MSR_TURBO_RATIO_LIMIT1", kIntel},
    {0x1af, "MSR_TURBO_RATIO_LIMIT2", kIntel},
    {0x1b0, "IA32_ENERGY_PERF_BIAS", kIntel},
    {0x1b1, "IA32_PACKAGE_THERM_STATUS", kIntel},
    {0x1b2, "IA32_PACKAGE_THERM_INTERRUPT", kIntel},
    {0x1c4, "IA32_XFD", kIntel},
    {0x1c5, "IA32_XFD_ERR", kIntel},
    {0x1c8, "MSR_LBR_SELECT", kIntel},
    {0x1c9, "MSR_LASTBRANCH_TOS", kIntel},
    {0x1d9, "IA32_DEBUGCTL", kAll},
    {0x1db, "MSR_LASTBRANCHFROMIP", kAll},
    {0x1dc, "MSR_LASTBRANCHTOIP", kAll},
    {0x1dd, "MSR_LASTINTFROMIP", kAll},
    {0x1de, "MSR_LASTINTTOIP", kAll},
    {0x1f2, "IA32_SMRR_PHYSBASE", kIntel},
    {0x1f3, "IA32_SMRR_PHYSMASK", kIntel},
    {0x1fc, "MSR_POWER_CTL", kIntel},
    {0x200, "IA32_MTRR_PHYSBASE0", kAll},
    {0x201, "IA32_MTRR_PHYSMASK0", kAll},
    {0x202, "IA32_MTRR_PHYSBASE1", kAll},
    {0x203, "IA32_MTRR_PHYSMASK1", kAll},
    {0x204, "IA32_MTRR_PHYSBASE2", kAll},
    {0x205, "IA32_MTRR_PHYSMASK2", kAll},
    {0x206, "IA32_MTRR_PHYSBASE3", kAll},
    {0x207, "IA32_MTRR_PHYSMASK3", kAll},
    {0x208, "IA32_MTRR_PHYSBASE4", kAll},
    {0x209, "IA32_MTRR_PHYSMASK4", kAll},
    {0x20a, "IA32_MTRR_PHYSBASE5", kAll},
    {0x20b, "IA32_MTRR_PHYSMASK5", kAll},
    {0x20c, "IA32_MTRR_PHYSBASE6", kAll},
    {0x20d, "IA32_MTRR_PHYSMASK6", kAll},
    {0x20e, "IA32_MTRR_PHYSBASE7", kAll},
    {0x20f, "IA32_MTRR_PHYSMASK7", kAll},
    {0x250, "IA32_MTRR_FIX64K_00000", kAll},
    {0x258, "IA32_MTRR_FIX16K_80000", kAll},
    {0x259, "IA32_MTRR_FIX16K_A0000", kAll},
    {0x268, "IA32_MTRR_FIX4K_C0000", kAll},
    {0x269, "IA32_MTRR_FIX4K_C8000", kAll},
    {0x26a, "IA32_MTRR_FIX4K_D0000", kAll},
    {0x26b, "IA32_MTRR_FIX4K_D8000", kAll},
    {0x26c, "IA32_MTRR_FIX4K_E0000", kAll},
    {0x26d, "IA32_MTRR_FIX4K_E8000", kAll},
    {0x26e, "IA32_MTRR_FIX4K_F0000", kAll},
    {0x26f, "IA32_MTRR_FIX4K_F8000", kAll},
    {0x277, "IA32_PAT", kAll},
    {0x280, "IA32_MC0_CTL2", kIntel},
    {0x281, "IA32_MC1_CTL2", kIntel},
    {0x282, "IA32_MC2_CTL2", kIntel},
    {0x283, "IA32_MC3_CTL2", kIntel},
    {0x284, "IA32_MC4_CTL2", kIntel},
    {0x285, "IA32_MC5_CTL2", kIntel},
    {0x286, "IA32_MC6_CTL2", kIntel},
    {0x287, "IA32_MC7_CTL2", kIntel},
    {0x288, "IA32_MC8_CTL2", kIntel},
    {0x289, "IA32_MC9_CTL2", kIntel},
    {0x2ff, "IA32_MTRR_DEF_TYPE", kAll},
    {0x309, "IA32_FIXED_CTR0", kIntelLike},
    {0x30a, "IA32_FIXED_CTR1", kIntelLike},
    {0x30b, "IA32_FIXED_CTR2", kIntelLike},
    {0x30c, "IA32_FIXED_CTR3", kIntelLike},
    {0x345, "IA32_PERF_CAPABILITIES", kIntelLike},
    {0x38d, "IA32_FIXED_CTR_CTRL", kIntelLike},
    {0x38e, "IA32_PERF_GLOBAL_STATUS", kIntelLike},
    {0x38f, "IA32_PERF_GLOBAL_CTRL", kIntelLike},
    {0x390, "IA32_PERF_GLOBAL_OVF_CTRL", kIntelLike},
    {0x390, "IA32_PERF_GLOBAL_STATUS_RESET", kIntelLike},
    {0x391, "IA32_PERF_GLOBAL_STATUS_SET", kIntelLike},
    {0x392, "IA32_PERF_GLOBAL_INUSE", kIntelLike},
    {0x3f1, "IA32_PEBS_ENABLE", kIntel},
    {0x3f6, "MSR_PEBS_LD_LAT_THRESHOLD", kIntel},
    {0x3f8, "MSR_PKG_C3_RESIDENCY", kIntel},
    {0x3f9, "MSR_PKG_C6_RESIDENCY", kIntel},
    {0x3fa, "MSR_PKG_C7_RESIDENCY", kIntel},
    {0x3fc, "MSR_CORE_C3_RESIDENCY", kIntel},
    {0x3fd, "MSR_CORE_C6_RESIDENCY", kIntel},
    {0x3fe, "MSR_CORE_C7_RESIDENCY", kIntel},
    {0x400, "IA32_MC0_CTL", kAll},
    {0x401, "IA32_MC0_STATUS", kAll},
    {0x402, "IA32_MC0_ADDR", kAll},
    {0x403, "IA32_MC0_MISC", kAll},
    {0x404, "IA32_MC1_CTL", kAll},
    {0x405, "IA32_MC1_STATUS", kAll},
    {0x406, "IA32_MC1_ADDR", kAll},
    {0x407, "IA32_MC1_MISC", kAll},
    {0x408, "IA32_MC2_CTL", kAll},
    {0x409, "IA32_MC2_STATUS", kAll},
    {0x40a, "IA32_MC2_ADDR", kAll},
    {0x40b, "IA32_MC2_MISC", kAll},
    {0x40c, "IA32_MC3_CTL", kAll},
    {0x40d, "IA32_MC3_STATUS", kAll},
    {0x40e, "IA32_MC3_ADDR", kAll},
    {0x40f, "IA32_MC3_MISC", kAll},
    {0x410, "IA32_MC4_CTL", kAll},
    {0x411, "IA32_MC4_STATUS", kAll},
    {0x412, "IA32_MC4_ADDR", kAll},
    {0x413, "IA32_MC4_MISC", kAll},
    {0x414, "IA32_MC5_CTL", kAll},
    {0x415, "IA32_MC5_STATUS", kAll},
    {0x416, "IA32_MC5_ADDR", kAll},
    {0x417, "IA32_MC5_MISC", kAll},
    {0x418, "IA32_MC6_CTL", kAll},
    {0x419, "IA32_MC6_STATUS", kAll},
    {0x41a, "IA32_MC6_ADDR", kAll},
    {0x41b, "IA32_MC6_MISC", kAll},
    {0x41c, "IA32_MC7_CTL", kAll},
    {0x41d, "IA32_MC7_STATUS", kAll},
    {0x41e, "IA32_MC7_ADDR", kAll},
    {0x41f, "IA32_MC7_MISC", kAll},
    {0x420, "IA32_MC8_CTL", kAll},
    {0x421, "IA32_MC8_STATUS", kAll},
    {0x422, "IA32_MC8_ADDR", kAll},
    {0x423, "IA32_MC8_MISC", kAll},
    {0x424, "IA32_MC9_CTL", kAll},
    {0x425, "IA32_MC9_STATUS", kAll},
    {0x426, "IA32_MC9_ADDR", kAll},
    {0x427, "IA32_MC9_MISC", kAll},
    {0x480, "IA32_VMX_BASIC", kIntelLike},
    {0x481, "IA32_VMX_PINBASED_CTLS", kIntelLike},
    {0x482, "IA32_VMX_PROCBASED_CTLS", kIntelLike},
    {0x483, "IA32_VMX_EXIT_CTLS", kIntelLike},
    {0x484, "IA32_VMX_ENTRY_CTLS", kIntelLike},
    {0x485, "IA32_VMX_MISC", kIntelLike},
    {0x486, "IA32_VMX_CR0_FIXED0", kIntelLike},
    {0x487, "IA32_VMX_CR0_FIXED1", kIntelLike},
    {0x488, "IA32_VMX_CR4_FIXED0", kIntelLike},
    {0x489, "IA32_VMX_CR4_FIXED1", kIntelLike},
    {0x48a, "IA32_VMX_VMCS_ENUM", kIntelLike},
    {0x48b, "IA32_VMX_PROCBASED_CTLS2", kIntelLike},
    {0x48c, "IA32_VMX_EPT_VPID_CAP", kIntelLike},
    {0x48d, "IA32_VMX_TRUE_PINBASED_CTLS", kIntelLike},
    {0x48e, "IA32_VMX_TRUE_PROCBASED_CTLS", kIntelLike},
    {0x48f, "IA32_VMX_TRUE_EXIT_CTLS", kIntelLike},
    {0x490, "IA32_VMX_TRUE_ENTRY_CTLS", kIntelLike},
    {0x491, "IA32_VMX_VMFUNC", kIntelLike},
    {0x492, "IA32_VMX_PROCBASED_CTLS3", kIntelLike},
    {0x4c1, "IA32_A_PMC0", kIntel},
    {0x4c2, "IA32_A_PMC1", kIntel},
    {0x4c3, "IA32_A_PMC2", kIntel},
    {0x4c4, "IA32_A_PMC3", kIntel},
    {0x4c5, "IA32_A_PMC4", kIntel},
    {0x4c6, "IA32_A_PMC5", kIntel},
    {0x4c7, "IA32_A_PMC6", kIntel},
    {0x4c8, "IA32_A_PMC7", kIntel},
    {0x4d0, "IA32_MCG_EXT_CTL", kIntel},
    {0x560, "IA32_RTIT_OUTPUT_BASE", kIntel},
    {0x561, "IA32_RTIT_OUTPUT_MASK_PTRS", kIntel},
    {0x570, "IA32_RTIT_CTL", kIntel},
    {0x571, "IA32_RTIT_STATUS", kIntel},
    {0x572, "IA32_RTIT_CR3_MATCH", kIntel},
    {0x580, "IA32_RTIT_ADDR0_A", kIntel},
    {0x581, "IA32_RTIT_ADDR0_B", kIntel},
    {0x582, "IA32_RTIT_ADDR1_A", kIntel},
    {0x583, "IA32_RTIT_ADDR1_B", kIntel},
    {0x584, "IA32_RTIT_ADDR2_A", kIntel},
    {0x585, "IA32_RTIT_ADDR2_B", kIntel},
    {0x586, "IA32_RTIT_ADDR3_A", kIntel},
    {0x587, "IA32_RTIT_ADDR3_B", kIntel},
    {0x600, "IA32_DS_AREA", kIntel},
    {0x606, "MSR_RAPL_POWER_UNIT", kIntel},
    {0x60a, "MSR_PKGC3_IRTL", kIntel},
    {0x610, "MSR_PKG_POWER_LIMIT", kIntel},
    {0x611, "MSR_PKG_ENERGY_STATUS", kIntel},
    {0x613, "MSR_PKG_PERF_STATUS", kIntel},
    {0x614, "MSR_PKG_POWER_INFO", kIntel},
    {0x618, "MSR_DRAM_POWER_LIMIT", kIntel},
    {0x619, "MSR_DRAM_ENERGY_STATUS", kIntel},
    {0x61b, "MSR_DRAM_PERF_STATUS", kIntel},
    {0x61c, "MSR_DRAM_POWER_INFO", kIntel},
    {0x638, "MSR_PP0_POWER_LIMIT", kIntel},
    {0x639, "MSR_PP0_ENERGY_STATUS", kIntel},
    {0x63a, "MSR_PP0_POLICY", kIntel},
    {0x63b, "MSR_PP0_PERF_STATUS", kIntel},
    {0x640, "MSR_PP1_POWER_LIMIT", kIntel},
    {0x641, "MSR_PP1_ENERGY_STATUS", kIntel},
    {0x642, "MSR_PP1_POLICY", kIntel},
    {0x648, "MSR_CONFIG_TDP_NOMINAL", kIntel},
    {0x649, "MSR_CONFIG_TDP_LEVEL_1", kIntel},
    {0x64a, "MSR_CONFIG_TDP_LEVEL_2", kIntel},
    {0x64b, "MSR_CONFIG_TDP_CONTROL", kIntel},
    {0x64c, "MSR_TURBO_ACTIVATION_RATIO", kIntel},
    {0x64d, "MSR_PLATFORM_ENERGY_STATUS", kIntel},
    {0x690, "MSR_CORE_PERF_LIMIT_REASONS", kIntel},
    {0x6a0, "IA32_U_CET", kAll},
    {0x6a2, "IA32_S_CET", kAll},
    {0x6a4, "IA32_PL0_SSP", kAll},
    {0x6a5, "IA32_PL1_SSP", kAll},
    {0x6a6, "IA32_PL2_SSP", kAll},
    {0x6a7, "IA32_PL3_SSP", kAll},
    {0x6a8, "IA32_INTERRUPT_SSP_TABLE_ADDR", kAll},
    {0x6e0, "IA32_TSC_DEADLINE", kIntelLike},
    {0x6e1, "IA32_PKRS", kIntel},
    {0x770, "IA32_PM_ENABLE", kIntel},
    {0x771, "IA32_HWP_CAPABILITIES", kIntel},
    {0x772, "IA32_HWP_REQUEST_PKG", kIntel},
    {0x773, "IA32_HWP_INTERRUPT", kIntel},
    {0x774, "IA32_HWP_REQUEST", kIntel},
    {0x777, "IA32_HWP_STATUS", kIntel},
    {0x802, "IA32_X2APIC_APICID", kAll},
    {0x803, "IA32_X2APIC_VERSION", kAll},
    {0x808, "IA32_X2APIC_TPR", kAll},
    {0x80a, "IA32_X2APIC_PPR", kAll},
    {0x80b, "IA32_X2APIC_EOI", kAll},
    {0x80d, "IA32_X2APIC_LDR", kAll},
    {0x80f, "IA32_X2APIC_SIVR", kAll},
    {0x810, "IA32_X2APIC_ISR0", kAll},
    {0x811, "IA32_X2APIC_ISR1", kAll},
    {0x812, "IA32_X2APIC_ISR2", kAll},
    {0x813, "IA32_X2APIC_ISR3", kAll},
    {0x814, "IA32_X2APIC_ISR4", kAll},
    {0x815, "IA32_X2APIC_ISR5", kAll},
    {0x816, "IA32_X2APIC_ISR6", kAll},
    {0x817, "IA32_X2APIC_ISR7", kAll},
    {0x818, "IA32_X2APIC_TMR0", kAll},
    {0x819, "IA32_X2APIC_TMR1", kAll},
    {0x81a, "IA32_X2APIC_TMR2", kAll},
    {0x81b, "IA32_X2APIC_TMR3", kAll},
    {0x81c, "IA32_X2APIC_TMR4", kAll},
    {0x81d, "IA32_X2APIC_TMR5", kAll},
    {0x81e, "IA32_X2APIC_TMR6", kAll},
    {0x81f, "IA32_X2APIC_TMR7", kAll},
    {0x820, "IA32_X2APIC_IRR0", kAll},
    {0x821, "IA32_X2APIC_IRR1", kAll},
    {0x822, "IA32_X2APIC_IRR2", kAll},
    {0x823, "IA32_X2APIC_IRR3", kAll},
    {0x824, "IA32_X2APIC_IRR4", kAll},
    {0x825, "IA32_X2APIC_IRR5", kAll},
    {0x826, "IA32_X2APIC_IRR6", kAll},
    {0x827, "IA32_X2APIC_IRR7", kAll},
    {0x828, "IA32_X2APIC_ESR", kAll},
    {0x82f, "IA32_X2APIC_LVT_CMCI", kAll},
    {0x830, "IA32_X2APIC_ICR", kAll},
    {0x832, "IA32_X2APIC_LVT_TIMER", kAll},
    {0x833, "IA32_X2APIC_LVT_THERMAL", kAll},
    {0x834, "IA32_X2APIC_LVT_PMI", kAll},
    {0x835, "IA32_X2APIC_LVT_LINT0", kAll},
    {0x836, "IA32_X2APIC_LVT_LINT1", kAll},
    {0x837, "IA32_X2APIC_LVT_ERROR", kAll},
    {0x838, "IA32_X2APIC_INIT_COUNT", kAll},
    {0x839, "IA32_X2APIC_CUR_COUNT", kAll},
    {0x83e, "IA32_X2APIC_DIV_CONF", kAll},
    {0x83f, "IA32_X2APIC_SELF_IPI", kAll},
    {0xc80, "IA32_DEBUG_INTERFACE", kIntel},
    {0xc81, "IA32_L3_QOS_CFG", kIntel},
    {0xc8d, "IA32_QM_EVTSEL", kAll},
    {0xc8e, "IA32_QM_CTR", kAll},
    {0xc8f, "IA32_PQR_ASSOC", kAll},
    {0xd90, "IA32_BNDCFGS", kIntel},
    {0xda0, "IA32_XSS", kAll},
    {0x1107, "MSR_VIA_FCR", kCentaur | kZhaoxin},
    {0x110b, "MSR_VIA_RNG", kCentaur | kZhaoxin},
    {0x40000000, "HV_X64_MSR_GUEST_OS_ID", kAll},
    {0x40000001, "HV_X64_MSR_HYPERCALL", kAll},
    {0x40000002, "HV_X64_MSR_VP_INDEX", kAll},
    {0x40000003, "HV_X64_MSR_RESET", kAll},
    {0x40000010, "HV_X64_MSR_VP_RUNTIME", kAll},
    {0x40000020, "HV_X64_MSR_TIME_REF_COUNT", kAll},
    {0x40000021, "HV_X64_MSR_REFERENCE_TSC", kAll},
    {0x40000022, "HV_X64_MSR_TSC_FREQUENCY", kAll},
    {0x40000023, "HV_X64_MSR_APIC_FREQUENCY", kAll},
    {0x40000070, "HV_X64_MSR_EOI", kAll},
    {0x40000071, "HV_X64_MSR_ICR", kAll},
    {0x40000072, "HV_X64_MSR_TPR", kAll},
    {0x40000073, "HV_X64_MSR_VP_ASSIST_PAGE", kAll},
    {0x40000080, "HV_X64_MSR_SCONTROL", kAll},
    {0x40000081, "HV_X64_MSR_SVERSION", kAll},
    {0x40000082, "HV_X64_MSR_SIEFP", kAll},
    {0x40000083, "HV_X64_MSR_SIMP", kAll},
    {0x40000084, "HV_X64_MSR_EOM", kAll},
    {0x40000090, "HV_X64_MSR_SINT0", kAll},
    {0x40000091, "HV_X64_MSR_SINT1", kAll},
    {0x40000092, "HV_X64_MSR_SINT2", kAll},
    {0x40000093, "HV_X64_MSR_SINT3", kAll},
    {0x40000094, "HV_X64_MSR_SINT4", kAll},
    {0x40000095, "HV_X64_MSR_SINT5", kAll},
    {0x40000096, "HV_X64_MSR_SINT6", kAll},
    {0x40000097, "HV_X64_MSR_SINT7", kAll},
    {0x40000098, "HV_X64_MSR_SINT8", kAll},
    {0x40000099, "HV_X64_MSR_SINT9", kAll},
    {0x4000009a, "HV_X64_MSR_SINT10", kAll},
    {0x4000009b, "HV_X64_MSR_SINT11", kAll},
    {0x4000009c, "HV_X64_MSR_SINT12", kAll},
    {0x4000009d, "HV_X64_MSR_SINT13", kAll},
    {0x4000009e, "HV_X64_MSR_SINT14", kAll},
    {0x4000009f, "HV_X64_MSR_SINT15", kAll},
    {0x400000b0, "HV_X64_MSR_STIMER0_CONFIG", kAll},
    {0x400000b1, "HV_X64_MSR_STIMER0_COUNT", kAll},
    {0x400000b2, "HV_X64_MSR_STIMER1_CONFIG", kAll},
    {0x400000b3, "HV_X64_MSR_STIMER1_COUNT", kAll},
    {0x400000b4, "HV_X64_MSR_STIMER2_CONFIG", kAll},
    {0x400000b5, "HV_X64_MSR_STIMER2_COUNT", kAll},
    {0x400000b6, "HV_X64_MSR_STIMER3_CONFIG", kAll},
    {0x400000b7, "HV_X64_MSR_STIMER3_COUNT", kAll},
    {0x40000100, "HV_X64_MSR_CRASH_P0", kAll},
    {0x40000101, "HV_X64_MSR_CRASH_P1", kAll},
    {0x40000102, "HV_X64_MSR_CRASH_P2", kAll},
    {0x40000103, "HV_X64_MSR_CRASH_P3", kAll},
    {0x40000104, "HV_X64_MSR_CRASH_P4", kAll},
    {0x40000105, "HV_X64_MSR_CRASH_CTL", kAll},
    {0x40000000, "XEN_HYPERCALL_PAGE", kAll},
    {0x40000200, "XEN_HYPERCALL_PAGE_VIRIDIAN", kAll},
    {0x4b564d00, "MSR_KVM_WALL_CLOCK_NEW", kAll},
    {0x4b564d01, "MSR_KVM_SYSTEM_TIME_NEW", kAll},
    {0x4b564d02, "MSR_KVM_ASYNC_PF_EN", kAll},
    {0x4b564d03, "MSR_KVM_STEAL_TIME", kAll},
    {0x4b564d04, "MSR_KVM_PV_EOI_EN", kAll},
    {0x4b564d05, "MSR_KVM_POLL_CONTROL", kAll},
    {0x4b564d06, "MSR_KVM_ASYNC_PF_INT", kAll},
    {0x4b564d07, "MSR_KVM_ASYNC_PF_ACK", kAll},
    {0x4b564d08, "MSR_KVM_MIGRATION_CONTROL", kAll},
    {0xc0000080, "IA32_EFER", kAll},
    {0xc0000080, "MSR_EFER", kAll},
    {0xc0000081, "IA32_STAR", kAll},
    {0xc0000081, "MSR_STAR", kAll},
    {0xc0000082, "IA32_LSTAR", kAll},
    {0xc0000082, "MSR_LSTAR", kAll},
    {0xc0000083, "IA32_CSTAR", kAll},
    {0xc0000083, "MSR_CSTAR", kAll},
    {0xc0000084, "IA32_FMASK", kAll},
    {0xc0000084, "MSR_SYSCALL_MASK", kAll},
    {0xc0000084, "MSR_SFMASK", kAll},
    {0xc00000e7, "MSR_AMD64_MPERF_RO", kAmdLike},
    {0xc00000e8, "MSR_AMD64_APERF_RO", kAmdLike},
    {0xc00000e9, "MSR_AMD64_IRPERF_COUNT", kAmdLike},
    {0xc0000100, "IA32_FS_BASE", kAll},
    {0xc0000100, "MSR_FS_BASE", kAll},
    {0xc0000101, "IA32_GS_BASE", kAll},
    {0xc0000101, "MSR_GS_BASE", kAll},
    {0xc0000102, "IA32_KERNEL_GS_BASE", kAll},
    {0xc0000102, "MSR_SHADOW_GS_BASE", kAll},
    {0xc0000103, "IA32_TSC_AUX", kAll},
    {0xc0000103, "MSR_TSC_AUX", kAll},
    {0xc0000104, "MSR_AMD64_TSC_RATIO", kAmdLike},
    {0xc0000300, "MSR_AMD64_PERF_CNTR_GLOBAL_STATUS", kAmdLike},
    {0xc0000301, "MSR_AMD64_PERF_CNTR_GLOBAL_CTL", kAmdLike},
    {0xc0000302, "MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR", kAmdLike},
    {0xc0010000, "MSR_K7_EVNTSEL0", kAmdLike},
    {0xc0010001, "MSR_K7_EVNTSEL1", kAmdLike},
    {0xc0010002, "MSR_K7_EVNTSEL2", kAmdLike},
    {0xc0010003, "MSR_K7_EVNTSEL3", kAmdLike},
    {0xc0010004, "MSR_K7_PERFCTR0", kAmdLike},
    {0xc0010005, "MSR_K7_PERFCTR1", kAmdLike},
    {0xc0010006, "MSR_K7_PERFCTR2", kAmdLike},
    {0xc0010007, "MSR_K7_PERFCTR3", kAmdLike},
    {0xc0010010, "MSR_K8_SYSCFG", kAmdLike},
    {0xc0010015, "MSR_K7_HWCR", kAmdLike},
    {0xc0010015, "MSR_K8_HWCR", kAmdLike},
    {0xc0010016, "MSR_K8_IORR_BASE0", kAmdLike},
    {0xc0010017, "MSR_K8_IORR_MASK0", kAmdLike},
    {0xc0010018, "MSR_K8_IORR_BASE1", kAmdLike},
    {0xc0010019, "MSR_K8_IORR_MASK1", kAmdLike},
    {0xc001001a, "MSR_K8_TOP_MEM1", kAmdLike},
    {0xc001001d, "MSR_K8_TOP_MEM2", kAmdLike},
    {0xc001001f, "MSR_AMD64_NB_CFG", kAmdLike},
    {0xc001001f, "MSR_K8_NB_CFG", kAmdLike},
    {0xc0010020, "MSR_AMD64_PATCH_LOADER", kAmdLike},
    {0xc0010041, "MSR_K7_FID_VID_CTL", kAmdLike},
    {0xc0010042, "MSR_K7_FID_VID_STATUS", kAmdLike},
    {0xc0010044, "MSR_AMD64_MC0_MASK", kAmdLike},
    {0xc0010045, "MSR_AMD64_MC1_MASK", kAmdLike},
    {0xc0010046, "MSR_AMD64_MC2_MASK", kAmdLike},
    {0xc0010047, "MSR_AMD64_MC3_MASK", kAmdLike},
    {0xc0010048, "MSR_AMD64_MC4_MASK", kAmdLike},
    {0xc0010049, "MSR_AMD64_MC5_MASK", kAmdLike},
    {0xc0010055, "MSR_K8_INT_PENDING_MSG", kAmdLike},
    {0xc0010058, "MSR_FAM10H_MMIO_CONF_BASE", kAmdLike},
    {0xc0010058, "MSR_MMIO_CONF_BASE", kAmdLike},
    {0xc0010061, "MSR_K8_PSTATE_LIMIT", kAmdLike},
    {0xc0010061, "MSR_AMD_PSTATE_CUR_LIMIT", kAmdLike},
    {0xc0010062, "MSR_K8_PSTATE_CTRL", kAmdLike},
    {0xc0010062, "MSR_AMD_PERF_CTL", kAmdLike},
    {0xc0010063, "MSR_K8_PSTATE_STATUS", kAmdLike},
    {0xc0010063, "MSR_AMD_PERF_STATUS", kAmdLike},
    {0xc0010064, "MSR_K8_PSTATE0", kAmdLike},
    {0xc0010065, "MSR_K8_PSTATE1", kAmdLike},
    {0xc0010066, "MSR_K8_PSTATE2", kAmdLike},
    {0xc0010067, "MSR_K8_PSTATE3", kAmdLike},
    {0xc0010068, "MSR_K8_PSTATE4", kAmdLike},
    {0xc0010069, "MSR_K8_PSTATE5", kAmdLike},
    {0xc001006a, "MSR_K8_PSTATE6", kAmdLike},
    {0xc001006b, "MSR_K8_PSTATE7", kAmdLike},
    {0xc0010064, "MSR_AMD_PSTATE_DEF_BASE", kAmdLike},
    {0xc0010071, "MSR_K10_COFVID_STATUS", kAmdLike},
    {0xc0010073, "MSR_K10_CSTATE_ADDR", kAmdLike},
    {0xc0010111, "MSR_K8_SMM_BASE", kAmdLike},
    {0xc0010112, "MSR_K8_TSEG_ADDR", kAmdLike},
    {0xc0010113, "MSR_K8_TSEG_MASK", kAmdLike},
    {0xc0010114, "MSR_K8_VM_CR", kAmdLike},
    {0xc0010115, "MSR_K8_IGNNE", kAmdLike},
    {0xc0010117, "MSR_K8_VM_HSAVE_PA", kAmdLike},
    {0xc001011e, "MSR_AMD64_VM_PAGE_FLUSH", kAmdLike},
    {0xc001011f, "MSR_AMD64_VIRT_SPEC_CTRL", kAmdLike},
    {0xc0010130, "MSR_AMD64_SEV_ES_GHCB", kAmdLike},
    {0xc0010131, "MSR_AMD64_SEV", kAmdLike},
    {0xc0010140, "MSR_AMD64_OSVW_ID_LENGTH", kAmdLike},
    {0xc0010141, "MSR_AMD64_OSVW_STATUS", kAmdLike},
    {0xc0010200, "MSR_F15H_PERF_CTL0", kAmdLike},
    {0xc0010201, "MSR_F15H_PERF_CTR0", kAmdLike},
    {0xc0010202, "MSR_F15H_PERF_CTL1", kAmdLike},
    {0xc0010203, "MSR_F15H_PERF_CTR1", kAmdLike},
    {0xc0010204, "MSR_F15H_PERF_CTL2", kAmdLike},
    {0xc0010205, "MSR_F15H_PERF_CTR2", kAmdLike},
    {0xc0010206, "MSR_F15H_PERF_CTL3", kAmdLike},
    {0xc0010207, "MSR_F15H_PERF_CTR3", kAmdLike},
    {0xc0010208, "MSR_F15H_PERF_CTL4", kAmdLike},
    {0xc0010209, "MSR_F15H_PERF_CTR4", kAmdLike},
    {0xc001020a, "MSR_F15H_PERF_CTL5", kAmdLike},
    {0xc001020b, "MSR_F15H_PERF_CTR5", kAmdLike},
    {0xc0010240, "MSR_F15H_NB_PERF_CTL0", kAmdLike},
    {0xc0010241, "MSR_F15H_NB_PERF_CTR0", kAmdLike},
    {0xc0010242, "MSR_F15H_NB_PERF_CTL1", kAmdLike},
    {0xc0010243, "MSR_F15H_NB_PERF_CTR1", kAmdLike},
    {0xc0010244, "MSR_F15H_NB_PERF_CTL2", kAmdLike},
    {0xc0010245, "MSR_F15H_NB_PERF_CTR2", kAmdLike},
    {0xc0010246, "MSR_F15H_NB_PERF_CTL3", kAmdLike},
    {0xc0010247, "MSR_F15H_NB_PERF_CTR3", kAmdLike},
    {0xc0010299, "MSR_AMD_RAPL_POWER_UNIT", kAmdLike},
    {0xc001029a, "MSR_AMD_CORE_ENERGY_STATUS", kAmdLike},
    {0xc001029b, "MSR_AMD_PKG_ENERGY_STATUS", kAmdLike},
    {0xc00102f0, "MSR_AMD_PPIN_CTL", kAmdLike},
    {0xc00102f1, "MSR_AMD_PPIN", kAmdLike},
    {0xc0011004, "MSR_K8_FEATURE_MASK", kAmdLike},
    {0xc0011005, "MSR_K8_EXT_FEATURE_MASK", kAmdLike},
    {0xc001100c, "MSR_FAM10H_NODE_ID", kAmdLike},
    {0xc0011019, "MSR_AMD64_DR1_ADDRESS_MASK", kAmdLike},
    {0xc001101a, "MSR_AMD64_DR2_ADDRESS_MASK", kAmdLike},
    {0xc001101b, "MSR_AMD64_DR3_ADDRESS_MASK", kAmdLike},
    {0xc0011020, "MSR_AMD64_LS_CFG", kAmdLike},
    {0xc0011022, "MSR_AMD64_DC_CFG", kAmdLike},
    {0xc0011023, "MSR_AMD64_TW_CFG", kAmdLike},
    {0xc0011027, "MSR_AMD64_DR0_ADDRESS_MASK", kAmdLike},
    {0xc0011029, "MSR_AMD64_DE_CFG", kAmdLike},
    {0xc0011029, "MSR_F10H_DECFG", kAmdLike},
    {0xc001102a, "MSR_AMD64_BU_CFG2", kAmdLike},
    {0xc0011030, "MSR_AMD64_IBSFETCHCTL", kAmdLike},
    {0xc0011031, "MSR_AMD64_IBSFETCHLINAD", kAmdLike},
    {0xc0011032, "MSR_AMD64_IBSFETCHPHYSAD", kAmdLike},
    {0xc0011033, "MSR_AMD64_IBSOPCTL", kAmdLike},
    {0xc0011034, "MSR_AMD64_IBSOPRIP", kAmdLike},
    {0xc0011035, "MSR_AMD64_IBSOPDATA", kAmdLike},
    {0xc0011036, "MSR_AMD64_IBSOPDATA2", kAmdLike},
    {0xc0011037, "MSR_AMD64_IBSOPDATA3", kAmdLike},
    {0xc0011038, "MSR_AMD64_IBSDCLINAD", kAmdLike},
    {0xc0011039, "MSR_AMD64_IBSDCPHYSAD", kAmdLike},
    {0xc001103a, "MSR_AMD64_IBSCTL", kAmdLike},
    {0xc001103b, "MSR_AMD64_IBSBRTARGET", kAmdLike},
    {0xc001103c, "MSR_AMD64_ICIBSEXTDCTL", kAmdLike},
    {0xc0002000, "MSR_AMD64_SMCA_MC0_CTL", kAmdLike},
    {0xc0002001, "MSR_AMD64_SMCA_MC0_STATUS", kAmdLike},
    {0xc0002002, "MSR_AMD64_SMCA_MC0_ADDR", kAmdLike},
    {0xc0002003, "MSR_AMD64_SMCA_MC0_MISC0", kAmdLike},
    {0xc0002004, "MSR_AMD64_SMCA_MC0_CONFIG", kAmdLike},
    {0xc0002005, "MSR_AMD64_SMCA_MC0_IPID", kAmdLike},
    {0xc0002006, "MSR_AMD64_SMCA_MC0_SYND", kAmdLike},
    {0xc0002010, "MSR_AMD64_SMCA_MC1_CTL", kAmdLike},
    {0xc0002011, "MSR_AMD64_SMCA_MC1_STATUS", kAmdLike},
    {0xc0002012, "MSR_AMD64_SMCA_MC1_ADDR", kAmdLike},
    {0xc0002013, "MSR_AMD64_SMCA_MC1_MISC0", kAmdLike},
    {0xc0002014, "MSR_AMD64_SMCA_MC1_CONFIG", kAmdLike},
    {0xc0002015, "MSR_AMD64_SMCA_MC1_IPID", kAmdLike},
    {0xc0002016, "MSR_AMD64_SMCA_MC1_SYND", kAmdLike},
    {0xc0002020, "MSR_AMD64_SMCA_MC2_CTL", kAmdLike},
    {0xc0002021, "MSR_AMD64_SMCA_MC2_STATUS", kAmdLike},
    {0xc0002022, "MSR_AMD64_SMCA_MC2_ADDR", kAmdLike},
    {0xc0002023, "MSR_AMD64_SMCA_MC2_MISC0", kAmdLike},
    {0xc0002024, "MSR_AMD64_SMCA_MC2_CONFIG", kAmdLike},
    {0xc0002025, "MSR_AMD64_SMCA_MC2_IPID", kAmdLike},
    {0xc0002026, "MSR_AMD64_SMCA_MC2_SYND", kAmdLike},
    {0xc0002030, "MSR_AMD64_SMCA_MC3_CTL", kAmdLike},
    {0xc0002031, "MSR_AMD64_SMCA_MC3_STATUS", kAmdLike},
    {0xc0002032, "MSR_AMD64_SMCA_MC3_ADDR", kAmdLike},
    {0xc0002033, "MSR_AMD64_SMCA_MC3_MISC0", kAmdLike},
    {0xc0002034, "MSR_AMD64_SMCA_MC3_CONFIG", kAmdLike},
    {0xc0002035, "MSR_AMD64_SMCA_MC3_IPID", kAmdLike},
    {0xc0002036, "MSR_AMD64_SMCA_MC3_SYND", kAmdLike},
};

struct Index {
  absl::flat_hash_map<std::string, const MsrInfo*> by_name;  // lower case
  absl::flat_hash_map<uint32_t, const MsrInfo*> by_index;     // canonical row
};

// Built once, on first use; never destroyed (trivially safe at exit).
const Index& GetIndex() {
  static const Index* const index = [] {
    auto* idx = new Index;
    for (const MsrInfo& m : kCatalog) {
      idx->by_name.emplace(absl::AsciiStrToLower(m.name), &m);
      idx->by_index.emplace(m.index, &m);  // keeps the first row per index
    }
    return idx;
  }();
  return *index;
}

// Levenshtein distance, case-insensitive; both words are short.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t subst = prev[j - 1] +
                     (absl::ascii_tolower(a[i - 1]) == absl::ascii_tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool LooksNumeric(absl::string_view s) {
  return !s.empty() && std::isdigit(static_cast<unsigned char>(s[0]));
}

}  // namespace

uint32_t VendorBit(Vendor vendor) {
  switch (vendor) {
    case Vendor::kIntel: return kVendorIntel;
    case Vendor::kAmd: return kVendorAmd;
    case Vendor::kHygon: return kVendorHygon;
    case Vendor::kCentaur: return kVendorCentaur;
    case Vendor::kZhaoxin: return kVendorZhaoxin;
    default: return 0;
  }
}

absl::Span<const MsrInfo> MsrCatalog() { return kCatalog; }

const MsrInfo* FindMsr(uint32_t index) {
  const Index& idx = GetIndex();
  auto it = idx.by_index.find(index);
  return it == idx.by_index.end() ? nullptr : it->second;
}

bool MsrExistsOn(uint32_t index, Vendor vendor) {
  const MsrInfo* m = FindMsr(index);
  return m != nullptr && (m->vendors & VendorBit(vendor)) != 0;
}

std::optional<uint32_t> MsrIndexByName(absl::string_view name) {
  const Index& idx = GetIndex();
  auto it = idx.by_name.find(absl::AsciiStrToLower(name));
  if (it == idx.by_name.end()) return std::nullopt;
  return it->second->index;
}

absl::string_view MsrName(uint32_t index) {
  const MsrInfo* m = FindMsr(index);
  return m == nullptr ? absl::string_view() : m->name;
}

std::string MsrDisplay(uint32_t index) {
  absl::string_view name = MsrName(index);
  if (name.empty()) return absl::StrFormat("0x%x", index);
  return absl::StrFormat("%s (0x%x)", name, index);
}

absl::string_view NearestMsrName(absl::string_view word) {
  absl::string_view best;
  size_t best_distance = ~size_t{0};
  for (const MsrInfo& m : kCatalog) {
    size_t d = EditDistance(word, m.name);
    if (d < best_distance) {
      best_distance = d;
      best = m.name;
    }
  }
  return best;
}

absl::StatusOr<uint32_t> ParseMsr(absl::string_view word) {
  word = absl::StripAsciiWhitespace(word);
  if (word.empty()) {
    return absl::InvalidArgumentError(
        "empty MSR; use a catalog name (IA32_ENERGY_PERF_BIAS) or a number "
        "(0x1b0)");
  }
  if (LooksNumeric(word)) {
    uint64_t n = 0;
    bool ok = (word.size() > 2 && word[0] == '0' && (word[1] == 'x' || word[1] == 'X'))
                  ? absl::SimpleHexAtoi(word.substr(2), &n)
                  : absl::SimpleAtoi(word, &n);
    if (!ok || word.find_first_of("+- ") != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad MSR number '", word, "'; use decimal (432) or 0x hex (0x1b0)"));
    }
    if (n > 0xffffffffu) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "MSR number '%s' does not fit in 32 bits (ECX); the largest is "
          "0xffffffff",
          word));
    }
    return static_cast<uint32_t>(n);
  }
  if (std::optional<uint32_t> index = MsrIndexByName(word)) return *index;
  // A suggestion costs an edit distance per catalog name, quadratic in the
  // word: only for words the length of a name (the longest is under 64), so
  // a megabyte of input over the API costs nothing and is quoted in part.
  constexpr size_t kMaxSuggestLength = 64;
  if (word.size() > kMaxSuggestLength) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown MSR '%s...' (%d bytes, longer than any catalog name); use a "
        "catalog name or a number (decimal or 0x hex)",
        word.substr(0, kMaxSuggestLength), word.size()));
  }
  absl::string_view near = NearestMsrName(word);
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown MSR '%s'; did you mean %s (0x%x)? Use a catalog name or a "
      "number (decimal or 0x hex)",
      word, near, *MsrIndexByName(near)));
}

}  // namespace pvemu::x86
