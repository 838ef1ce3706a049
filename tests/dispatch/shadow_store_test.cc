// The SHADOW registers' store: each (domain, vCPU, MSR) keeps its own value
// whether it sits at its first probe (the in-line path) or further on (the
// probing path), a full table says so instead of sharing a register, and a
// domain's reset forgets its registers and only its registers, also while
// other threads create vCPUs and registers at once.
#include "dispatch/shadow_store.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pvemu::dispatch {
namespace {

// A value no two registers of these tests share.
uint64_t ValueOf(uint32_t domain, uint32_t vcpu, uint32_t msr) {
  return uint64_t{domain} << 48 | uint64_t{vcpu} << 32 | msr;
}

TEST(ShadowStoreTest, EveryRegisterKeepsItsOwnValueThroughCollisions) {
  // Four vCPU slots and eight registers each: 3 domains x 1-2 vCPUs and 8
  // MSRs fill them, so most keys land past their first probe.
  ShadowStore store(/*vcpu_capacity=*/4, /*msrs_per_vcpu=*/8);
  const uint32_t kMsrs[] = {0x10, 0x1b, 0x3a, 0x8b, 0x1a0, 0xc0000080, 0xc0000103, 0};
  const std::pair<uint32_t, uint32_t> kVcpus[] = {{0, 0}, {0, 1}, {7, 0}, {0xfffe, 3}};
  for (const auto& [domain, vcpu] : kVcpus) {
    for (uint32_t msr : kMsrs) {
      bool fresh = false;
      uint64_t* reg = store.Get(domain, vcpu, msr, &fresh);
      ASSERT_NE(reg, nullptr) << domain << "/" << vcpu << "/" << msr;
      EXPECT_TRUE(fresh);
      EXPECT_EQ(*reg, 0u);
      *reg = ValueOf(domain, vcpu, msr);
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [domain, vcpu] : kVcpus) {
      for (uint32_t msr : kMsrs) {
        SCOPED_TRACE(absl::StrCat("pass ", pass, ": domain ", domain, " vcpu ", vcpu, " msr ",
                                  absl::Hex(msr)));
        bool fresh = true;
        uint64_t* reg = store.Get(domain, vcpu, msr, &fresh);
        ASSERT_NE(reg, nullptr);
        EXPECT_FALSE(fresh);
        EXPECT_EQ(*reg, ValueOf(domain, vcpu, msr));
      }
    }
  }
}

TEST(ShadowStoreTest, AFullTableRefusesInsteadOfSharingARegister) {
  ShadowStore store(/*vcpu_capacity=*/2, /*msrs_per_vcpu=*/2);
  bool fresh = false;
  ASSERT_NE(store.Get(1, 0, 0x10, &fresh), nullptr);
  ASSERT_NE(store.Get(1, 0, 0x11, &fresh), nullptr);
  EXPECT_EQ(store.Get(1, 0, 0x12, &fresh), nullptr) << "a third MSR in a two-register vCPU";
  ASSERT_NE(store.Get(1, 1, 0x10, &fresh), nullptr);
  EXPECT_EQ(store.Get(1, 2, 0x10, &fresh), nullptr) << "a third vCPU in a two-vCPU store";
  // What was there is still there.
  *store.Get(1, 0, 0x11, &fresh) = 42;
  EXPECT_EQ(*store.Get(1, 0, 0x11, &fresh), 42u);
  EXPECT_FALSE(fresh);
}

TEST(ShadowStoreTest, ResetDomainForgetsItsRegistersOnly) {
  ShadowStore store(/*vcpu_capacity=*/8, /*msrs_per_vcpu=*/4);
  bool fresh = false;
  for (uint32_t domain : {1u, 2u}) {
    for (uint32_t vcpu : {0u, 1u}) *store.Get(domain, vcpu, 0x1b, &fresh) = ValueOf(domain, vcpu, 0x1b);
  }
  store.ResetDomain(1);
  for (uint32_t vcpu : {0u, 1u}) {
    uint64_t* reg = store.Get(1, vcpu, 0x1b, &fresh);
    ASSERT_NE(reg, nullptr);
    EXPECT_TRUE(fresh) << "vcpu " << vcpu;
    EXPECT_EQ(*reg, 0u);
    reg = store.Get(2, vcpu, 0x1b, &fresh);
    ASSERT_NE(reg, nullptr);
    EXPECT_FALSE(fresh);
    EXPECT_EQ(*reg, ValueOf(2, vcpu, 0x1b));
  }
}

// vCPUs are created from any thread at once (one trap source per vCPU):
// each thread's registers are its own, and none is handed out twice.
TEST(ShadowStoreTest, ThreadsCreatingVcpusAtOnceEachGetTheirOwnRegisters) {
  constexpr uint32_t kThreads = 4, kVcpusEach = 16, kMsrsEach = 16;
  ShadowStore store(/*vcpu_capacity=*/64, /*msrs_per_vcpu=*/32);
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        for (uint32_t v = 0; v < kVcpusEach; ++v) {
          for (uint32_t m = 0; m < kMsrsEach; ++m) {
            bool fresh = false;
            uint64_t* reg = store.Get(t, v, 0xc0000000 + m, &fresh);
            if (reg == nullptr || fresh != (round == 0)) {
              ++wrong[t];
              continue;
            }
            if (round > 0 && *reg != ValueOf(t, v, m) + round - 1) ++wrong[t];
            *reg = ValueOf(t, v, m) + round;
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (uint32_t t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace pvemu::dispatch
