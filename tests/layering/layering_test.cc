// The layering of layering.txt holds for every include and every meson
// dependency of the tree; and the check catches a planted bad include.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/layering/layering_check.h"
#include "tests/status_matchers.h"

namespace pvemu::layering {
namespace {

namespace fs = std::filesystem;
using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string SourceRoot() {
  const char* root = std::getenv("PVEMU_SOURCE_ROOT");
  return root != nullptr ? root : ".";
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

Table RealTable() {
  absl::StatusOr<Table> table =
      ParseTable(ReadFile(fs::path(SourceRoot()) / "layering.txt"), "layering.txt");
  EXPECT_THAT(table, IsOk());
  return table.ok() ? *table : Table{};
}

TEST(LayeringTest, EveryIncludeFollowsTheTable) {
  EXPECT_THAT(CheckIncludes(RealTable(), SourceRoot()), IsEmpty());
}

TEST(LayeringTest, EveryMesonDependencyFollowsTheTable) {
  EXPECT_THAT(CheckMesonDeps(RealTable(), SourceRoot()), IsEmpty());
}

TEST(LayeringTest, EveryFolderWithSourcesIsListed) {
  EXPECT_THAT(CheckEveryFolderIsListed(RealTable(), SourceRoot()), IsEmpty());
}

// The check itself, on a small tree of its own: a test that could not fail
// would prove nothing about the tree above.
class PlantedTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("layering-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    ASSERT_THAT(
        table_ = ParseTable("base:\npolicy: base\nkvm: policy base\nserver: kvm policy base\n"
                            "private policy/rules.h policy\ndep policy_dep policy\n"
                            "dep server_dep server\n",
                            "planted.txt"),
        IsOk());
    WriteFile(root_ / "policy/rules.h", "#pragma once\n");
    WriteFile(root_ / "policy/store.cc", "#include \"policy/rules.h\"\n#include <vector>\n");
    WriteFile(root_ / "server/daemon.cc", "#include \"kvm/plane.h\"\n");
    WriteFile(root_ / "kvm/plane.h", "#include \"policy/store.h\"\n");
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_;
  absl::StatusOr<Table> table_;
};

TEST_F(PlantedTreeTest, AGoodTreePasses) {
  EXPECT_THAT(CheckIncludes(*table_, root_), IsEmpty());
}

TEST_F(PlantedTreeTest, AnIncludeUpwardsIsNamedWithFileAndLine) {
  WriteFile(root_ / "kvm/plane.cc", "#include <cstdint>\n\n#include \"server/daemon.h\"\n");
  EXPECT_THAT(CheckIncludes(*table_, root_),
              ElementsAre(AllOf(HasSubstr("kvm/plane.cc:3: includes server/daemon.h"),
                                HasSubstr("which kvm may not use"),
                                HasSubstr("allows kvm: base policy"))));
}

TEST_F(PlantedTreeTest, APrivateHeaderOutsideItsFolderIsNamed) {
  WriteFile(root_ / "server/edit.cc", "#include \"policy/rules.h\"\n");
  EXPECT_THAT(CheckIncludes(*table_, root_),
              ElementsAre(HasSubstr("server/edit.cc:1: includes policy/rules.h, which is "
                                    "private to policy/")));
}

TEST_F(PlantedTreeTest, AMesonDependencyUpwardsIsNamed) {
  WriteFile(root_ / "policy/meson.build",
            "policy_dep = declare_dependency()\nlib = static_library('p',\n"
            "  dependencies: [server_dep, absl_deps])\n");
  EXPECT_THAT(CheckMesonDeps(*table_, root_),
              ElementsAre(HasSubstr("policy/meson.build:3: uses server_dep (folder server), "
                                    "which policy may not use")));
}

TEST_F(PlantedTreeTest, AnUnlistedFolderWithSourcesIsNamed) {
  WriteFile(root_ / "newthing/x.cc", "int x;\n");
  EXPECT_THAT(CheckEveryFolderIsListed(*table_, root_.string()),
              ElementsAre(HasSubstr("newthing/ holds sources")));
}

TEST(LayeringTableTest, ADependencyUpwardsInTheTableIsRefused) {
  EXPECT_THAT(ParseTable("base: policy\npolicy: base\n", "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.txt:1: base uses policy, which is not listed above it")));
}

TEST(LayeringTableTest, AnUnreadableLineIsNamed) {
  EXPECT_THAT(ParseTable("base:\nwhatever\n", "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.txt:2: expected")));
}

}  // namespace
}  // namespace pvemu::layering
