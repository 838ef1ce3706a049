#include "policy/shipped.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policy/loader.h"
#include "tests/policy/test_util.h"
#include "tests/status_matchers.h"

namespace pvemu::policy {
namespace {

using ::pvemu::testing::IsOk;
using ::testing::UnorderedElementsAre;

std::string ReadSource(const std::string& rel) {
  std::ifstream in(testutil::SourceRoot() + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Shipped, Names) {
  EXPECT_THAT(ShippedPolicyNames(),
              UnorderedElementsAre("default", "xen-pre-4.15", "kvm-ignore-msrs"));
  EXPECT_EQ(ShippedPolicy("nope"), "");
}

TEST(Shipped, EmbeddedPoliciesEqualTheFilesAndValidate) {
  for (absl::string_view name : ShippedPolicyNames()) {
    std::string file = "policy/defaults/" + std::string(name) + ".textproto";
    EXPECT_EQ(ShippedPolicy(name), ReadSource(file)) << file;
    EXPECT_THAT(LoadPolicyFile(testutil::SourceRoot() + "/" + file), IsOk());
  }
}

}  // namespace
}  // namespace pvemu::policy
