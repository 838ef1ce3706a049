// base/durable_file.h: all-or-nothing durable writes on real files, and the
// one errno mapping every writer reports with.
#include "base/durable_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace pvemu::base {
namespace {

using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pvemu-durable-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    SetSyncDirectoryFailureForTesting(0);
    std::filesystem::remove_all(dir_);
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static bool Exists(const std::string& path) { return std::filesystem::exists(path); }
  std::string dir_;
};

TEST_F(DurableFileTest, WritesTheFileWithItsModeAndLeavesNoTemporary) {
  const std::string path = dir_ + "/state";
  ASSERT_THAT(WriteFileDurably(path, "one\n", 0640, /*keep_previous=*/false), IsOk());
  EXPECT_EQ(Read(path), "one\n");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_FALSE(Exists(path + ".tmp"));
  ASSERT_THAT(WriteFileDurably(path, "two\n", 0640, false), IsOk());
  EXPECT_EQ(Read(path), "two\n");
  EXPECT_FALSE(Exists(path + ".prev"));
  EXPECT_FALSE(Exists(path + ".replaced"));
}

TEST_F(DurableFileTest, KeepPreviousKeepsExactlyTheLastVersion) {
  const std::string path = dir_ + "/state";
  ASSERT_THAT(WriteFileDurably(path, "one", 0640, true), IsOk());
  EXPECT_FALSE(Exists(path + ".prev"));
  ASSERT_THAT(WriteFileDurably(path, "two", 0640, true), IsOk());
  ASSERT_THAT(WriteFileDurably(path, "three", 0640, true), IsOk());
  EXPECT_EQ(Read(path), "three");
  EXPECT_EQ(Read(path + ".prev"), "two");
  EXPECT_FALSE(Exists(path + ".prev.older"));
}

TEST_F(DurableFileTest, FailedDirectoryFsyncFailsTheWriteAndUndoesEveryRename) {
  const std::string path = dir_ + "/state";
  ASSERT_THAT(WriteFileDurably(path, "one", 0640, true), IsOk());
  ASSERT_THAT(WriteFileDurably(path, "two", 0640, true), IsOk());
  SetSyncDirectoryFailureForTesting(EIO);
  for (bool keep_previous : {true, false}) {
    SCOPED_TRACE(keep_previous ? "keep_previous" : "replace");
    EXPECT_THAT(WriteFileDurably(path, "three", 0640, keep_previous),
                StatusIs(absl::StatusCode::kUnavailable,
                         AllOf(HasSubstr("fsync of directory " + dir_),
                               HasSubstr("Input/output error"),
                               HasSubstr(path + " is left as it was"))));
    EXPECT_EQ(Read(path), "two");
    EXPECT_EQ(Read(path + ".prev"), "one");
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                            std::filesystem::directory_iterator()),
              2)
        << "no temporary or stepped-aside file is left";
  }
  // A new file that could not be made durable is not there either.
  EXPECT_THAT(WriteFileDurably(dir_ + "/new", "x", 0640, false),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("left as it was")));
  EXPECT_FALSE(Exists(dir_ + "/new"));
}

TEST_F(DurableFileTest, AWriteIntoAPlaceThatIsNoDirectoryNamesThePath) {
  const std::string file = dir_ + "/plain";
  ASSERT_THAT(WriteFileDurably(file, "x", 0640, false), IsOk());
  EXPECT_THAT(WriteFileDurably(file + "/state", "y", 0640, false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "create " + file + "/state.tmp: Not a directory"));
}

TEST(ErrnoToStatusTest, MapsEachFailureToTheCodeACallerActsOn) {
  struct Case {
    int err;
    absl::StatusCode code;
  } cases[] = {
      {ENOSPC, absl::StatusCode::kResourceExhausted}, {EDQUOT, absl::StatusCode::kResourceExhausted},
      {EFBIG, absl::StatusCode::kResourceExhausted},  {EACCES, absl::StatusCode::kFailedPrecondition},
      {EPERM, absl::StatusCode::kFailedPrecondition}, {EROFS, absl::StatusCode::kFailedPrecondition},
      {ENOENT, absl::StatusCode::kFailedPrecondition}, {ENOTDIR, absl::StatusCode::kFailedPrecondition},
      {EIO, absl::StatusCode::kUnavailable},          {EAGAIN, absl::StatusCode::kUnavailable},
  };
  for (const Case& c : cases) {
    absl::Status s = ErrnoToStatus(c.err, "write /x");
    EXPECT_EQ(s.code(), c.code) << c.err;
    EXPECT_THAT(std::string(s.message()), HasSubstr("write /x: ")) << c.err;
  }
}

TEST(DirectoryOfTest, SplitsAtTheLastSlash) {
  EXPECT_EQ(DirectoryOf("/var/lib/pvemu/policy.textproto"), "/var/lib/pvemu");
  EXPECT_EQ(DirectoryOf("/policy"), "/");
  EXPECT_EQ(DirectoryOf("policy"), ".");
}

}  // namespace
}  // namespace pvemu::base
