// A million edits of one policy::Store in process (in memory: no state
// directory, so CPU bound) with the live heap flat. Each edit sets the same
// rule of one domain to a CONST value alternating between two, so the policy
// itself does not grow: whatever the heap gains per edit is kept garbage.
// After a warm-up the live heap (malloc's bytes in use, all arenas) is
// sampled every kSampleEvery edits and judged by its least-squares slope per
// edit (tests/memory_trend.h). Suite 'slow'; $PVEMU_SOAK_EDITS runs another
// count.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "policy/store.h"
#include "tests/memory_trend.h"
#include "tests/policy/test_util.h"
#include "tests/sanitizers.h"

namespace pvemu::policy {
namespace {

using ::pvemu::testing::LiveHeapKiB;
using ::pvemu::testing::MemoryTrend;

// The smallest leak, one malloc chunk an edit, is 32 bytes: a bound of about
// 10 bytes an edit catches any per-edit leak, and the heap of a store that
// keeps nothing moves by far less (its slope is a few bytes over a million
// edits, from caches that settle).
constexpr double kMaxLiveHeapKiBPerEdit = 0.01;
constexpr uint64_t kSampleEvery = 10'000;

TEST(StoreSoak, AMillionEditsKeepTheLiveHeapFlat) {
  uint64_t edits = 1'000'000;
  if (const char* env = std::getenv("PVEMU_SOAK_EDITS")) (void)absl::SimpleAtoi(env, &edits);
  const uint64_t warm_up = edits / 10;

  // A small policy: every edit validates, renders, compiles and diffs the
  // whole policy, so on the shipped default (about 200 us an edit) a million
  // edits would take minutes; here an edit costs the store's fixed work.
  LoadedPolicy loaded = testutil::MustParse("default {\n  unknown_msr: UNKNOWN_GP\n}\n");
  auto opened = Store::FromPolicy(loaded.policy, loaded.source, v1::INTEL);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Store& store = **opened;
  uint64_t heard = 0, heard_out_of_order = 0;
  store.SetEditListener([&](const EditEvent& e) {
    if (e.generation != store.generation()) ++heard_out_of_order;
    ++heard;
  });
  v1::MsrRule rule;
  rule.set_msr("0x1b0");
  rule.set_read(v1::ReadAction::CONST);

  MemoryTrend heap("live heap", "edit");
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 1; i <= edits; ++i) {
    rule.set_value(i % 2);
    EditOptions options;
    options.if_generation = store.generation();
    absl::StatusOr<EditResult> result = store.SetRule(LayerRef::Domain(9), rule, options);
    ASSERT_TRUE(result.ok()) << "edit " << i << ": " << result.status();
    if (i > warm_up && i % kSampleEvery == 0) heap.Add(static_cast<double>(i), LiveHeapKiB());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  EXPECT_EQ(store.generation(), edits + 1);
  EXPECT_EQ(heard, edits);
  EXPECT_EQ(heard_out_of_order, 0u);
  // ASan's allocator is not malloc's: mallinfo2 does not see its heap.
  if (!::pvemu::testing::kUnderAddressSanitizer) {
    EXPECT_TRUE(heap.IsFlat(kMaxLiveHeapKiBPerEdit));
  }
  std::printf("%llu edits in %.1f s (%.1f us an edit)\n%s\n",
              static_cast<unsigned long long>(edits), seconds, seconds * 1e6 / edits,
              heap.Describe().c_str());
}

}  // namespace
}  // namespace pvemu::policy
