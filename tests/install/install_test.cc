// `meson install` into a DESTDIR, and what it installed, run from there: the
// binaries, shipped and operator-added policies and profiles found by name,
// the systemd units (systemd-analyze verify and security), the man pages and
// pvemuctl's bash completion.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// One install for the whole suite, removed at the end.
class InstallTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    destdir_ = new std::string(MakeTempDir());
    install_ = new CommandRun(RunCommand(absl::StrCat(
        Env("PVEMU_MESON"), " install -C ", Env("PVEMU_BUILD_ROOT"), " --destdir ", *destdir_,
        " --no-rebuild --quiet")));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*destdir_);
    delete destdir_;
    delete install_;
  }
  void SetUp() override {
    ASSERT_EQ(install_->status, 0) << install_->output;
    dir_ = MakeTempDir();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Where meson installs `what` (an absolute path from meson.build), under DESTDIR.
  static std::string Installed(const char* what, const std::string& name = "") {
    std::string path = *destdir_ + Env(what);
    return name.empty() ? path : path + "/" + name;
  }
  // A command line running an installed binary, with the installed data dir.
  static std::string Bin(const std::string& name) {
    return absl::StrCat("PVEMU_DATADIR=", Installed("PVEMU_INSTALL_DATADIR"), " ",
                        Installed("PVEMU_INSTALL_BINDIR", name));
  }

  static std::string* destdir_;
  static CommandRun* install_;
  std::string dir_;
};
std::string* InstallTest::destdir_ = nullptr;
CommandRun* InstallTest::install_ = nullptr;

TEST_F(InstallTest, EverythingIsWhereItShouldBe) {
  for (const std::string& path : {
           Installed("PVEMU_INSTALL_BINDIR", "pvemud"),
           Installed("PVEMU_INSTALL_BINDIR", "pvemuctl"),
           Installed("PVEMU_INSTALL_UNITDIR", "pvemud.service"),
           Installed("PVEMU_INSTALL_UNITDIR", "pvemud.socket"),
           Installed("PVEMU_INSTALL_MANDIR", "man8/pvemud.8"),
           Installed("PVEMU_INSTALL_MANDIR", "man1/pvemuctl.1"),
           Installed("PVEMU_INSTALL_COMPLETIONDIR", "pvemuctl"),
           Installed("PVEMU_INSTALL_DATADIR", "pvemu/policies/default.textproto"),
           Installed("PVEMU_INSTALL_DATADIR", "pvemu/policies/kvm-ignore-msrs.textproto"),
           Installed("PVEMU_INSTALL_DATADIR", "pvemu/policies/kvm.textproto"),
           Installed("PVEMU_INSTALL_DATADIR", "pvemu/profiles/amd-epyc-7443p.textproto"),
       }) {
    EXPECT_TRUE(std::filesystem::is_regular_file(path)) << path;
  }
  struct stat st {};
  ASSERT_EQ(stat(Installed("PVEMU_INSTALL_BINDIR", "pvemud").c_str(), &st), 0);
  EXPECT_NE(st.st_mode & S_IXUSR, 0u);
}

TEST_F(InstallTest, ManPagesAreRoff) {
  for (const char* page : {"man8/pvemud.8", "man1/pvemuctl.1"}) {
    CommandRun head = RunCommand("head -c 4000 " + Installed("PVEMU_INSTALL_MANDIR", page));
    EXPECT_THAT(head.output, HasSubstr(".TH ")) << page;
    EXPECT_THAT(head.output, HasSubstr("NAME")) << page;
  }
  CommandRun pvemud = RunCommand("cat " + Installed("PVEMU_INSTALL_MANDIR", "man8/pvemud.8"));
  EXPECT_THAT(pvemud.output, HasSubstr("LISTEN"));  // the socket activation section
}

TEST_F(InstallTest, BashCompletionParsesAndCompletes) {
  const std::string file = Installed("PVEMU_INSTALL_COMPLETIONDIR", "pvemuctl");
  CommandRun syntax = RunCommand("bash -n " + file);
  EXPECT_EQ(syntax.status, 0) << syntax.output;
  CommandRun complete = RunCommand(absl::StrCat(
      "bash -c 'source ", file, "; COMP_LINE=\"pvemuctl policy set-rule --re\"; ",
      "COMP_POINT=${#COMP_LINE}; _pvemuctl; echo \"${COMPREPLY[*]}\"; ",
      "COMP_LINE=\"pvemuctl \"; COMP_POINT=${#COMP_LINE}; _pvemuctl; echo \"${COMPREPLY[*]}\"'"));
  EXPECT_EQ(complete.status, 0) << complete.output;
  EXPECT_THAT(complete.output, HasSubstr("--read="));
  EXPECT_THAT(complete.output, HasSubstr("decode validate explain"));
}

TEST_F(InstallTest, InstalledPvemuctlDecodesAndValidatesAShippedPolicy) {
  CommandRun decode = RunCommand(Bin("pvemuctl") + " -o json decode '0f 32'");
  EXPECT_EQ(decode.status, 0) << decode.output;
  EXPECT_THAT(decode.output, HasSubstr("\"mnemonic\":\"rdmsr\""));
  CommandRun validate = RunCommand(
      Bin("pvemuctl") + " validate " +
      Installed("PVEMU_INSTALL_DATADIR", "pvemu/policies/xen-pre-4.15.textproto"));
  EXPECT_EQ(validate.status, 0) << validate.output;
}

// An operator adds a policy and a profile to the installed data directory:
// pvemuctl and pvemud find them by name; an unknown name lists them.
TEST_F(InstallTest, NamesNotEmbeddedAreLookedUpInTheInstalledDataDir) {
  const std::string data = Installed("PVEMU_INSTALL_DATADIR", "pvemu");
  std::filesystem::copy_file(data + "/policies/kvm-ignore-msrs.textproto",
                             data + "/policies/site-local.textproto");
  std::ofstream(data + "/profiles/site-host.textproto")
      << "name: \"Site Host\" vendor: AMD cpus: 2\n";

  CommandRun explain = RunCommand(Bin("pvemuctl") +
                                  " -o json explain --policy=site-local --host-profile=site-host"
                                  " --domain=3 --msr=0x1b0");
  EXPECT_EQ(explain.status, 0) << explain.output;
  EXPECT_THAT(explain.output, HasSubstr(data + "/policies/site-local.textproto"));

  CommandRun unknown = RunCommand(Bin("pvemuctl") + " explain --policy=nosuch --domain=0 --msr=0x10");
  EXPECT_EQ(unknown.status, 1) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("installed in " + data + "/policies: site-local"));

  CommandRun profile = RunCommand(Bin("pvemuctl") + " explain --host-profile=nosuch --domain=0 --msr=0x10");
  EXPECT_EQ(profile.status, 1) << profile.output;
  EXPECT_THAT(profile.output, HasSubstr("installed in " + data + "/profiles: site-host"));
}

// The installed pvemud on a temporary socket and state dir, started from an
// installed policy and profile by name, answers the installed pvemuctl.
TEST_F(InstallTest, InstalledPvemudAnswersStats) {
  const std::string server = "unix://" + dir_ + "/pvemu.sock";
  const std::string log = dir_ + "/pvemud.log";
  CommandRun run = RunCommand(absl::StrCat(
      Bin("pvemud"), " --listen=", server, " --state-dir=", dir_,
      "/state --policy=kvm-ignore-msrs --host-profile=amd-epyc-7443p 2>", log,
      " & pid=$!; for i in $(seq 200); do grep -q 'ready on' ", log,
      " && break; sleep 0.05; done; ", Bin("pvemuctl"), " -o json --server=", server,
      " stats; rc=$?; kill $pid; wait $pid; echo pvemud=$?; cat ", log, "; exit $rc"));
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("\"generation\""));
  EXPECT_THAT(run.output, HasSubstr("host sim: AMD EPYC 7443P"));
  EXPECT_THAT(run.output, HasSubstr("pvemud=0"));
}

// A VMM loads libpvemu-kvm on a host without Xen's libraries: the installed
// library needs none (only pvemud links the xen backend).
TEST_F(InstallTest, InstalledLibpvemuKvmNeedsNoXenLibrary) {
  const std::string lib = Installed("PVEMU_INSTALL_LIBDIR", "libpvemu-kvm.so.1");
  CommandRun needed = RunCommand("readelf -d " + lib);
  ASSERT_EQ(needed.status, 0) << needed.output;
  EXPECT_THAT(needed.output, HasSubstr("Library soname: [libpvemu-kvm.so.1]"));
  EXPECT_THAT(needed.output, HasSubstr("libgrpc++"));  // it does read the output
  EXPECT_THAT(needed.output, Not(HasSubstr("libxen")));
}

// A VMM written in C builds against the install with pkg-config alone and
// runs: it opens a standalone data plane on the shipped kvm policy and reads
// its MSR filter through the C ABI.
TEST_F(InstallTest, ACProgramBuildsWithPkgConfigAgainstTheInstallAndRuns) {
  std::ofstream(dir_ + "/vmm.c") << R"c(
#include <stdio.h>
#include <string.h>
#include <pvemu_kvm.h>

int main(void) {
  struct pvemu_kvm_options options;
  memset(&options, 0, sizeof(options));
  options.size = sizeof(options);
  options.domain = 7;
  options.policy = "kvm";
  pvemu_kvm *kvm = NULL;
  int rc = pvemu_kvm_open(&options, &kvm);
  if (rc != 0) {
    printf("open: %d %s\n", rc, pvemu_kvm_last_error());
    return 1;
  }
  char text[65536];
  rc = pvemu_kvm_filter_text(kvm, text, sizeof(text));
  printf("filter rc=%d\n%s\n", rc, text);
  pvemu_kvm_close(kvm);
  return rc < 0;
}
)c";
  const std::string libdir = Installed("PVEMU_INSTALL_LIBDIR");
  // A library built with the sanitizers (the CI's second pass) needs a
  // program built with them: their runtime must load first.
  CommandRun needed = RunCommand("readelf -d " + libdir + "/libpvemu-kvm.so.1");
  const std::string sanitize =
      absl::StrContains(needed.output, "libasan") ? " -fsanitize=address,undefined" : "";
  CommandRun run = RunCommand(absl::StrCat(
      "export PKG_CONFIG_PATH=", libdir, "/pkgconfig PKG_CONFIG_SYSROOT_DIR=", *destdir_,
      "; cd ", dir_, " && cc -std=c11 -Wall -Werror", sanitize,
      " vmm.c -o vmm $(pkg-config --cflags --libs pvemu-kvm) && PVEMU_DATADIR=",
      Installed("PVEMU_INSTALL_DATADIR"), " LD_LIBRARY_PATH=", libdir, " ./vmm"));
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("filter rc="));
}

TEST_F(InstallTest, UnitsPointAtTheInstalledDaemonAndVerify) {
  const std::string unit_dir = Installed("PVEMU_INSTALL_UNITDIR");
  const std::string installed_pvemud = Env("PVEMU_INSTALL_BINDIR") + "/pvemud";
  std::ifstream in(unit_dir + "/pvemud.service");
  std::string service((std::istreambuf_iterator<char>(in)), {});
  EXPECT_THAT(service, HasSubstr("\nExecStart=" + installed_pvemud + " "));
  EXPECT_THAT(service, HasSubstr("\nType=notify\n"));

  // verify checks that ExecStart's binary exists: point a copy at DESTDIR's.
  ASSERT_FALSE(Env("PVEMU_SYSTEMD_ANALYZE").empty())
      << "systemd-analyze not found (Debian: systemd, in scripts/install-deps)";
  std::string copy = std::regex_replace(service, std::regex("ExecStart=" + installed_pvemud),
                                        "ExecStart=" + Installed("PVEMU_INSTALL_BINDIR", "pvemud"));
  std::ofstream(dir_ + "/pvemud.service") << copy;
  std::filesystem::copy_file(unit_dir + "/pvemud.socket", dir_ + "/pvemud.socket");
  CommandRun verify = RunCommand(absl::StrCat(Env("PVEMU_SYSTEMD_ANALYZE"), " verify --man=no ",
                                              dir_, "/pvemud.socket ", dir_, "/pvemud.service"));
  EXPECT_EQ(verify.status, 0) << verify.output;
  EXPECT_EQ(verify.output, "");
}

TEST_F(InstallTest, ServiceExposureIsAtMost3) {
  ASSERT_FALSE(Env("PVEMU_SYSTEMD_ANALYZE").empty())
      << "systemd-analyze not found (Debian: systemd, in scripts/install-deps)";
  CommandRun security = RunCommand(absl::StrCat(
      Env("PVEMU_SYSTEMD_ANALYZE"), " security --offline=true --no-pager ",
      Installed("PVEMU_INSTALL_UNITDIR", "pvemud.service")));
  std::smatch match;
  ASSERT_TRUE(std::regex_search(security.output, match,
                                std::regex("Overall exposure level for pvemud.service: ([0-9.]+)")))
      << security.output;
  double score = 0;
  ASSERT_TRUE(absl::SimpleAtod(match[1].str(), &score)) << match[1];
  EXPECT_LE(score, 3.0) << security.output;
  RecordProperty("exposure", match[1].str());
}

}  // namespace
}  // namespace pvemu::testing
