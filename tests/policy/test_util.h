// Helpers shared by the policy tests.
#ifndef PVEMU_TESTS_POLICY_TEST_UTIL_H_
#define PVEMU_TESTS_POLICY_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "policy/loader.h"

namespace pvemu::policy::testutil {

inline std::string SourceRoot() {
  const char* root = std::getenv("PVEMU_SOURCE_ROOT");
  return root != nullptr ? root : ".";
}

// A fresh directory under the test temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string base = ::testing::TempDir();
    std::string tmpl = base + "/pvemu-policy-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Parses a policy that must be valid.
inline LoadedPolicy MustParse(absl::string_view text, absl::string_view name = "t.textproto") {
  absl::StatusOr<LoadedPolicy> p = ParsePolicy(text, name);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return LoadedPolicy{v1::Policy(), SourceMap("invalid")};
  return *std::move(p);
}

}  // namespace pvemu::policy::testutil

#endif  // PVEMU_TESTS_POLICY_TEST_UTIL_H_
