// pvemuctl as scripts use it: exit statuses (0 ok, 1 invalid input, 2 usage,
// 3 unreachable), error messages that say what and where, JSON Lines output.
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/server/daemon_fixture.h"
#include "traplog/writer.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using CliRun = CommandRun;

// Runs pvemuctl with `args` (shell words) and optional stdin text.
CliRun Pvemuctl(const std::string& args, const std::string& input = "") {
  std::string cmd = std::string(std::getenv("PVEMU_BUILD_ROOT")) + "/client/pvemuctl " + args;
  if (!input.empty()) {
    std::string file = MakeTempDir() + "/stdin";
    std::ofstream(file) << input;
    cmd += " < " + file;
  }
  return RunCommand(cmd);
}

TEST(CliTest, UsageErrorsExitTwoAndSayWhat) {
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"", "Usage: pvemuctl COMMAND"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"decode --bogus-flag 0f32", "unknown flag --bogus_flag"},
      {"-o yaml decode 0f32", "use -o text or -o json"},
      {"decode", "decode needs HEX"},
      {"decode --mode=48 0f32", "--mode=48: use 64, 32, 16 or real"},
      {"explain --msr=0x10", "explain needs --domain=N and one of --msr=MSR or --port=P"},
      {"explain --domain=1 --msr=0x10 --port=0x80", "one of --msr=MSR or --port=P"},
      {"emulate --domain=1", "emulate needs --domain=N and --bytes=HEX"},
      {"import some.log", "import needs --out=FILE"},
      {"replay", "replay needs TRAPLOG"},
      {"replay --jobs=2 --server=unix:///nonexistent.sock log.traps",
       "replay --jobs splits a replay in process; with --server pvemud decides each trap: "
       "drop --jobs"},
      {"policy", "policy needs one of"},
      {"policy frob", "unknown policy command 'frob'"},
      {"domains extra", "domains takes no arguments"},
      {"decode --timeout", "--timeout needs a value"},
      {"msr", "msr needs a subcommand: msr search TEXT"},
      {"msr find IA32_TSC", "msr needs a subcommand"},
      {"msr search", "msr search needs one TEXT"},
      {"msr search IA32_TSC IA32_PAT", "msr search needs one TEXT"},
      {"kvm-filter --policy=kvm", "kvm-filter needs --domain=N"},
      {"kvm-filter --domain=1 extra", "kvm-filter takes flags only"},
      {"kvm-filter --domain=1 --server=unix:///nonexistent.sock --policy=kvm",
       "kvm-filter: --server=unix:///nonexistent.sock uses the daemon's policy and host "
       "vendor; drop --policy"},
      {"kvm-filter --domain=1 --server=unix:///nonexistent.sock --host-vendor=amd",
       "drop --host-vendor"},
      {"xen-config --policy=default", "xen-config needs --domain=N"},
      {"xen-config --domain=1 extra", "xen-config takes flags only"},
      {"xen-config --domain=1 --server=unix:///nonexistent.sock --policy=default",
       "xen-config: --server=unix:///nonexistent.sock uses the daemon's policy and host "
       "vendor; drop --policy"},
      {"explain --kvm --domain=1 --port=0x80", "explain --kvm is for MSRs"},
      {"explain --kvm --domain=1 --msr=0x10 --server=unix:///nonexistent.sock "
       "--host-profile=amd-epyc-7443p",
       "explain --kvm: --server=unix:///nonexistent.sock uses the daemon's policy"},
  };
  for (const Case& c : cases) {
    CliRun r = Pvemuctl(c.args);
    EXPECT_EQ(r.status, 2) << c.args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << c.args;
  }
}

TEST(CliTest, InvalidValuesExitOneAndNameTheFlag) {
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"explain --domain=abc --msr=0x10", "--domain: 'abc' is not a number"},
      {"explain --domain=1 --msr=IA32_ENERGY_PERF_BAIS", "did you mean IA32_ENERGY_PERF_BIAS"},
      {"explain --domain=1 --msr=0x10 --host-vendor=via", "unknown vendor 'via'"},
      {"explain --domain=1 --msr=0x10 --write=0x1ffffffffffffffff", "--write"},
      {"emulate --domain=1 --bytes=0f3", "odd number of hex digits"},
      {"explain --domain=1 --port=0x10000", "--port: 0x10000 is not an I/O port; ports are 0..0xffff"},
      {"explain --domain=1 --port=0x80 --width=3", "--width: 3 is not an I/O access width; use 1, 2 or 4"},
      {"emulate --domain=1 --bytes=0f32 --rcx=zz", "--rcx: 'zz' is not a number"},
      {"emulate --domain=99999999999 --bytes=0f32", "does not fit in 32 bits"},
      {"emulate --domain=1 --bytes=0f32 --host-profile=nosuch",
       "unknown host profile 'nosuch'; the shipped profiles are "},
      {"emulate --domain=1 --bytes=0f32 --host-profile=/nonexistent/host.textproto",
       "/nonexistent/host.textproto"},
      {"emulate --domain=1 --bytes=0f32 --policy=nosuch", "neither a file nor a shipped policy"},
      {"replay /nonexistent/log.traps", "/nonexistent/log.traps"},
      {"replay --jobs=abc /nonexistent/log.traps",
       "--jobs=abc: give the number of threads to replay on (1 to 1024), or 0 for one per CPU"},
      {"replay --jobs=-2 /nonexistent/log.traps", "--jobs=-2: give the number of threads"},
      {"import --out=x.csv /dev/null", "x.csv"},
      {"decode 0f32 zz", "not a hex digit"},
      {"kvm-filter --domain=abc --policy=kvm", "--domain: 'abc' is not a number"},
      {"kvm-filter --domain=-1 --policy=kvm", "--domain: '-1' is not a number"},
      {"kvm-filter --domain=0x100000000 --policy=kvm", "--domain: 0x100000000 does not fit in 32 bits"},
      {"kvm-filter --domain=1 --policy=nosuch", "neither a file nor a shipped policy"},
      {"kvm-filter --domain=1 --policy=kvm --host-vendor=via", "unknown vendor 'via'"},
      {"kvm-filter --domain=1 --policy=kvm --host-profile=nosuch", "unknown host profile 'nosuch'"},
      {"xen-config --domain=abc --policy=default", "--domain: 'abc' is not a number"},
      {"xen-config --domain=1 --policy=nosuch", "neither a file nor a shipped policy"},
      {"explain --kvm --domain=1 --msr=IA32_ENERGY_PERF_BAIS --policy=kvm",
       "did you mean IA32_ENERGY_PERF_BIAS"},
  };
  for (const Case& c : cases) {
    CliRun r = Pvemuctl(c.args);
    EXPECT_EQ(r.status, 1) << c.args << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << c.args;
  }
}

// A .traps log of IA32_ENERGY_PERF_BIAS reads by four vCPUs of domain 1 (the
// default policy passes them through to the sim host: 6), every one
// expecting 6 but record 7, imported from "host.log:42", which expects 7.
std::string ReadsLog() {
  const std::string path = MakeTempDir() + "/reads.traps";
  auto writer = traplog::TrapLogWriter::Open(path);
  EXPECT_TRUE(writer.ok());
  for (int i = 1; i <= 12; ++i) {
    v1::TrapRecord rec;
    rec.mutable_trap()->set_domain(1);
    rec.mutable_trap()->set_vcpu(static_cast<uint32_t>(i % 4));
    rec.mutable_trap()->set_mode(v1::MODE_64);
    rec.mutable_trap()->set_insn(std::string("\x0f\x32", 2));
    rec.mutable_trap()->mutable_regs()->set_rcx(0x1b0);
    rec.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
    rec.mutable_expect()->set_value(i == 7 ? 7 : 6);
    if (i == 7) rec.set_source("host.log:42");
    EXPECT_TRUE((*writer)->Append(rec).ok());
  }
  EXPECT_TRUE((*writer)->Close().ok());
  return path;
}

TEST(CliTest, ReplayOnThreadsGivesTheSameSummaryAndNamesTheMismatch) {
  const std::string log = ReadsLog();
  for (const char* jobs : {"1", "2", "3", "0"}) {
    CliRun r = Pvemuctl(absl::StrCat("-o json replay --jobs=", jobs, " ", log));
    EXPECT_EQ(r.status, 1) << jobs << ": " << r.output;  // a mismatch
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("{\"mismatch\":\"", log,
                                                 " record 7 (host.log:42)\",\"diff\":\"")))
        << jobs;
    EXPECT_THAT(r.output, HasSubstr("{\"traps\":12,\"completed\":12,\"exceptions\":0,"
                                    "\"unhandled\":0,\"checked\":12,\"mismatches\":1}"))
        << jobs << ": " << r.output;
  }
}

TEST(CliTest, UnreachableServerExitsThree) {
  CliRun r = Pvemuctl("--server=unix:///nonexistent/pvemu.sock --timeout=2 policy get");
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot reach pvemud at unix:///nonexistent/pvemu.sock"));
}

TEST(CliTest, TcpServerWithoutCertificatesIsRefusedBeforeConnecting) {
  CliRun r = Pvemuctl("--server=127.0.0.1:1 stats");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("only over TLS"));
}

TEST(CliTest, BatchDecodeAnswersEveryLineAndNeverStops) {
  CliRun r = Pvemuctl("-o json decode -", "0f 32\nzz\n\nf0 0f 32\n90\n0f\n66 ed\n");
  EXPECT_EQ(r.status, 0) << r.output;
  std::vector<std::string> lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 6u) << r.output;
  EXPECT_THAT(lines[0], HasSubstr("\"mnemonic\":\"rdmsr\""));
  EXPECT_THAT(lines[1], HasSubstr("\"privileged\":false"));
  EXPECT_THAT(lines[2], HasSubstr("\"exception\":\"UD\""));
  EXPECT_THAT(lines[3], HasSubstr("\"exception\":null"));
  EXPECT_THAT(lines[4], HasSubstr("truncated"));
  EXPECT_THAT(lines[5], HasSubstr("\"operand_size\":16"));
}

TEST(CliTest, ValidateReportsFileLineColumnAndExitsOne) {
  std::string dir = MakeTempDir();
  std::ofstream(dir + "/bad.textproto") << "default {\n  msr { msr: \"0x10\" read: CONST }\n}\n";
  std::ofstream(dir + "/good.textproto") << "default { unknown_msr: UNKNOWN_GP }\n";
  CliRun r = Pvemuctl("validate " + dir + "/good.textproto " + dir + "/bad.textproto");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dir + "/good.textproto: ok"));
  EXPECT_THAT(r.output, HasSubstr(dir + "/bad.textproto:2:"));
}

TEST(CliTest, ExplainJsonFollowsTheContract) {
  CliRun r = Pvemuctl("-o json explain --host-vendor=amd --domain=0 --msr=IA32_ENERGY_PERF_BIAS");
  EXPECT_EQ(r.status, 0) << r.output;
  for (const char* field : {"\"domain\":0", "\"msr\":\"0x1b0\"", "\"name\":\"IA32_ENERGY_PERF_BIAS\"",
                            "\"access\":\"read\"", "\"action\":\"ZERO\"", "\"value\":\"0x0\"",
                            "\"layer\":\"default\"", "\"source\":\"default.textproto:"}) {
    EXPECT_THAT(r.output, HasSubstr(field));
  }
}

// Every -o json output prints its keys in one documented order.
TEST(CliTest, JsonKeysComeInTheDocumentedOrderEveryTime) {
  const std::string args =
      "-o json explain --host-vendor=amd --domain=0 --msr=IA32_ENERGY_PERF_BIAS";
  CliRun first = Pvemuctl(args);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_THAT(first.output,
              ::testing::StartsWith("{\"domain\":0,\"msr\":\"0x1b0\",\"name\":\"IA32_ENERGY_PERF_BIAS\","
                                    "\"access\":\"read\",\"action\":\"ZERO\",\"value\":\"0x0\","
                                    "\"rule\":{\"layer\":\"default\",\"source\":"));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Pvemuctl(args).output, first.output);
  CliRun emulate = Pvemuctl("-o json emulate --domain=0 --bytes='0f 32' --rcx=0x1b0");
  EXPECT_THAT(emulate.output, ::testing::StartsWith("{\"outcome\":\"COMPLETED\",\"mnemonic\":\"rdmsr\","
                                                    "\"exception\":null,\"regs\":{\"rax\":"));
}

TEST(CliTest, EmulateJsonGivesRegistersAfterTheTrap) {
  CliRun r = Pvemuctl("-o json emulate --domain=0 --bytes='0f 32' --rcx=IA32_ENERGY_PERF_BIAS --rip=0x1000");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"outcome\":\"COMPLETED\""));
  EXPECT_THAT(r.output, HasSubstr("\"mnemonic\":\"rdmsr\""));
  EXPECT_THAT(r.output, HasSubstr("\"rax\":\"0x6\""));
  EXPECT_THAT(r.output, HasSubstr("\"rip\":\"0x1002\""));
  EXPECT_THAT(r.output, HasSubstr("\"exception\":null"));
}

// With a policy that grants only port 0x80, `in al,0x70` and
// `in al,0x80` used to answer alike (0xff, completed). They differ now, and
// emulate and explain say which case applies.
class CliPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    policy_ = MakeTempDir() + "/ports.textproto";
    std::ofstream(policy_) << "default {\n"
                              "  unknown_msr: UNKNOWN_GP\n"
                              "  io_port { first: 0x80 last: 0x80 comment: \"POST code\" }\n"
                              "}\n";
  }
  std::string policy_;
};

TEST_F(CliPortTest, EmulateOfAPortOutsideTheRangesReadsAllOnesAndSaysSo) {
  CliRun r = Pvemuctl("-o json emulate --policy=" + policy_ +
                      " --domain=3 --bytes='e4 70' --rax=0x1200 --rip=0x1000");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"outcome\":\"COMPLETED\""));
  EXPECT_THAT(r.output, HasSubstr("\"rax\":\"0x12ff\""));
  EXPECT_THAT(r.output, HasSubstr("\"rip\":\"0x1002\""));
  EXPECT_THAT(r.output, HasSubstr("\"port_denied\":true"));
  EXPECT_THAT(r.output, HasSubstr("not in the domain's io_port ranges"));
}

TEST_F(CliPortTest, EmulateOfAGrantedPortGoesToTheDeviceModelUnchanged) {
  CliRun r = Pvemuctl("-o json emulate --policy=" + policy_ +
                      " --domain=3 --bytes='e4 80' --rax=0x1200 --rip=0x1000");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"outcome\":\"DEVICE_IO\""));
  EXPECT_THAT(r.output, HasSubstr("\"rax\":\"0x1200\""));
  EXPECT_THAT(r.output, HasSubstr("\"rip\":\"0x1000\""));
  EXPECT_THAT(r.output, HasSubstr("\"port_denied\":false"));
  EXPECT_THAT(r.output, HasSubstr("handed to the device model"));
}

TEST_F(CliPortTest, ExplainPortSaysWhichCaseApplies) {
  CliRun granted = Pvemuctl("-o json explain --policy=" + policy_ + " --domain=3 --port=0x80");
  EXPECT_EQ(granted.status, 0) << granted.output;
  EXPECT_THAT(granted.output, HasSubstr("\"port\":\"0x80\""));
  EXPECT_THAT(granted.output, HasSubstr("\"action\":\"DEVICE\""));
  EXPECT_THAT(granted.output, HasSubstr("\"source\":\"io_port 0x80-0x80\""));

  CliRun denied = Pvemuctl("-o json explain --policy=" + policy_ + " --domain=3 --port=0x70");
  EXPECT_EQ(denied.status, 0) << denied.output;
  EXPECT_THAT(denied.output, HasSubstr("\"action\":\"FLOAT\""));
  EXPECT_THAT(denied.output, HasSubstr("\"value\":\"0xff\""));

  // Two bytes from 0x80 reach 0x81, which is not granted.
  CliRun wide =
      Pvemuctl("-o json explain --policy=" + policy_ + " --domain=3 --port=0x80 --width=2 --write=1");
  EXPECT_THAT(wide.output, HasSubstr("\"action\":\"FLOAT\""));
  EXPECT_THAT(wide.output, HasSubstr("\"access\":\"write\""));
}

// --host-profile takes a shipped profile's name or a file's path, as pvemud
// does; --host, its old spelling, still works and says it is deprecated.
TEST(CliTest, HostProfileIsAShippedNameOrAFile) {
  const std::string emulate =
      "-o json emulate --domain=0 --bytes=0f32 --rcx=IA32_ENERGY_PERF_BIAS ";
  // The vendor rule: an Intel-only MSR reads as zero on an AMD host.
  CliRun amd = Pvemuctl(emulate + "--host-profile=amd-epyc-7443p");
  EXPECT_EQ(amd.status, 0) << amd.output;
  EXPECT_THAT(amd.output, HasSubstr("\"rax\":\"0x0\""));
  EXPECT_THAT(amd.output, Not(HasSubstr("deprecated")));

  const std::string file = MakeTempDir() + "/intel.textproto";
  std::ofstream(file) << "name: \"Test Intel\" vendor: INTEL cpus: 1\n"
                      << "msr { msr: \"IA32_ENERGY_PERF_BIAS\" value: 9 }\n";
  CliRun from_file = Pvemuctl(emulate + "--host-profile=" + file);
  EXPECT_EQ(from_file.status, 0) << from_file.output;
  EXPECT_THAT(from_file.output, HasSubstr("\"rax\":\"0x9\""));

  CliRun old = Pvemuctl(emulate + "--host=amd-epyc-7443p");
  EXPECT_EQ(old.status, 0) << old.output;
  EXPECT_THAT(old.output, HasSubstr("\"rax\":\"0x0\""));
  EXPECT_THAT(old.output,
              HasSubstr("pvemuctl: --host is deprecated; use --host-profile=amd-epyc-7443p\n"));

  CliRun both = Pvemuctl(emulate + "--host=amd-epyc-7443p --host-profile=intel-xeon-e-2136");
  EXPECT_EQ(both.status, 2) << both.output;
  EXPECT_THAT(both.output, HasSubstr("name different profiles"));
}

// `pvemuctl msr search`, and the Linux/Xen names operators use.
TEST(CliMsrTest, SearchByFragmentListsEveryMsrWhoseNameContainsIt) {
  CliRun r = Pvemuctl("msr search energy_perf");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("0x1b0 IA32_ENERGY_PERF_BIAS\n"
                                  "  aliases: MSR_IA32_ENERGY_PERF_BIAS\n"
                                  "  vendors: intel\n"
                                  "  default policy, domain 1: intel host: read "));
  EXPECT_THAT(r.output, HasSubstr("; amd host: read ZERO, write "));

  // One JSON line per MSR, by index; the fragment matches aliases too.
  CliRun json = Pvemuctl("-o json msr search pkgc");
  EXPECT_EQ(json.status, 0) << json.output;
  std::vector<std::string> lines = absl::StrSplit(json.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 6u) << json.output;
  EXPECT_THAT(lines[0], ::testing::StartsWith("{\"index\":\"0x60a\",\"name\":\"MSR_PKGC3_IRTL\","));
  EXPECT_THAT(lines[5], ::testing::StartsWith("{\"index\":\"0x635\",\"name\":\"MSR_PKGC10_IRTL\","));
}

TEST(CliMsrTest, SearchByIndexDecimalOrHexGivesTheSameFixedKeyOrderLine) {
  CliRun hex = Pvemuctl("-o json msr search 0x4c1");
  CliRun dec = Pvemuctl("-o json msr search 1217");
  EXPECT_EQ(hex.status, 0) << hex.output;
  EXPECT_EQ(hex.output, dec.output);
  EXPECT_THAT(hex.output,
              ::testing::MatchesRegex(
                  "\\{\"index\":\"0x4c1\",\"name\":\"IA32_A_PMC0\","
                  "\"aliases\":\\[\"MSR_IA32_PMC0\",\"MSR_IA32_A_PERFCTR0\"\\],"
                  "\"vendors\":\\[\"intel\"\\],"
                  "\"default\":\\{\"intel\":\\{\"read\":\"[A-Z]+\",\"write\":\"[A-Z]+\"\\},"
                  "\"amd\":\\{\"read\":\"[A-Z]+\",\"write\":\"[A-Z]+\"\\}\\}\\}\n"));
}

TEST(CliMsrTest, SearchByLinuxOrXenAliasShowsTheSdmName) {
  // Linux's MSR_IA32_PMC0 is IA32_A_PMC0 (0x4c1), not IA32_PMC0 (0xc1).
  CliRun linux_name = Pvemuctl("-o json msr search MSR_IA32_PMC0");
  EXPECT_EQ(linux_name.status, 0) << linux_name.output;
  EXPECT_THAT(linux_name.output, HasSubstr("\"index\":\"0x4c1\",\"name\":\"IA32_A_PMC0\""));
  EXPECT_THAT(linux_name.output, ::testing::Not(HasSubstr("\"index\":\"0xc1\"")));

  CliRun xen_name = Pvemuctl("msr search msr_k8_tseg_base");
  EXPECT_EQ(xen_name.status, 0) << xen_name.output;
  EXPECT_THAT(xen_name.output, HasSubstr("0xc0010112 MSR_K8_TSEG_ADDR\n"
                                         "  aliases: MSR_K8_TSEG_BASE\n"
                                         "  vendors: amd, hygon\n"));

  // explain takes the same names.
  CliRun explain =
      Pvemuctl("explain --host-vendor=intel --domain=1 --msr=MSR_IA32_ENERGY_PERF_BIAS");
  EXPECT_EQ(explain.status, 0) << explain.output;
  EXPECT_THAT(explain.output, HasSubstr("msr 0x1b0 (IA32_ENERGY_PERF_BIAS)"));
}

TEST(CliMsrTest, SearchWithoutAMatchExitsOneAndSuggests) {
  CliRun r = Pvemuctl("msr search IA32_ENERGY_PERF_BAIS");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no MSR matches 'IA32_ENERGY_PERF_BAIS'"));
  EXPECT_THAT(r.output, HasSubstr("nearest name: IA32_ENERGY_PERF_BIAS"));
  CliRun index = Pvemuctl("msr search 0x12345678");
  EXPECT_EQ(index.status, 1) << index.output;
  EXPECT_THAT(index.output, HasSubstr("no MSR matches '0x12345678'"));
}

// --- kvm-filter and explain --kvm.

// One JSON line as a protobuf Struct (so the test does not depend on spacing).
google::protobuf::Struct ParseJsonLine(const std::string& line) {
  google::protobuf::Struct parsed;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &parsed).ok()) << line;
  return parsed;
}

// The exiting intervals of a kvm-filter JSON object, as "first-last".
std::vector<std::string> ExitingOf(const google::protobuf::Struct& filter) {
  std::vector<std::string> out;
  if (!filter.fields().contains("exiting")) return out;
  for (const auto& v : filter.fields().at("exiting").list_value().values()) {
    const auto& f = v.struct_value().fields();
    out.push_back(f.at("first").string_value() + "-" + f.at("last").string_value());
  }
  return out;
}

TEST(CliKvmTest, KvmFilterPrintsTheShippedPresetsFilter) {
  CliRun text = Pvemuctl("kvm-filter --domain=1 --policy=kvm");
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_THAT(text.output, ::testing::StartsWith("domain 1, host vendor INTEL\n"));
  EXPECT_THAT(text.output, HasSubstr("IA32_THERM_CONTROL"));
  EXPECT_THAT(text.output, HasSubstr("IA32_ENERGY_PERF_BIAS"));
  EXPECT_THAT(text.output, Not(HasSubstr("IA32_EFER")));
  EXPECT_THAT(text.output, Not(HasSubstr("IA32_APIC_BASE")));

  CliRun json = Pvemuctl("-o json kvm-filter --domain=1 --policy=kvm --host-vendor=amd");
  EXPECT_EQ(json.status, 0) << json.output;
  std::vector<std::string> lines = absl::StrSplit(json.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u) << json.output;
  EXPECT_THAT(lines[0], ::testing::StartsWith("{\"domain\":1,\"host_vendor\":\"AMD\",\"ranges\":"));
  google::protobuf::Struct filter = ParseJsonLine(lines[0]);
  EXPECT_THAT(ExitingOf(filter), ::testing::Contains("0x19a-0x19a"));
  EXPECT_THAT(ExitingOf(filter), ::testing::Contains("0x1b0-0x1b0"));
  EXPECT_THAT(ExitingOf(filter), ::testing::Contains("0xc1-0xc8"));  // vPMU off
  EXPECT_FALSE(filter.fields().contains("generation")) << "offline: no daemon generation";
  EXPECT_GT(filter.fields().at("exiting_count").number_value(), 2);
}

// Vendor rules decide what a domain names, so the filter follows the host
// vendor: the default policy's AMD P-state rule is dom0's on AMD hosts only.
TEST(CliKvmTest, KvmFilterFollowsTheHostVendor) {
  CliRun amd = Pvemuctl("-o json kvm-filter --domain=0 --policy=default --host-vendor=amd");
  CliRun intel =
      Pvemuctl("-o json kvm-filter --domain=0 --policy=default --host-profile=intel-xeon-e-2136");
  ASSERT_EQ(amd.status, 0) << amd.output;
  ASSERT_EQ(intel.status, 0) << intel.output;
  EXPECT_THAT(ExitingOf(ParseJsonLine(amd.output)), ::testing::Contains("0xc0010061-0xc001006b"));
  EXPECT_THAT(ExitingOf(ParseJsonLine(intel.output)),
              Not(::testing::Contains("0xc0010061-0xc001006b")));
}

TEST(CliKvmTest, KvmFilterOfAnInvalidPolicyFileNamesFileAndLine) {
  const std::string dir = MakeTempDir();
  std::ofstream(dir + "/bad.textproto") << "default {\n  msr { msr: \"0x10\" read: CONST }\n}\n";
  CliRun r = Pvemuctl("kvm-filter --domain=1 --policy=" + dir + "/bad.textproto");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dir + "/bad.textproto:2:"));
  EXPECT_THAT(r.output, HasSubstr("read CONST needs a value"));
}

// A rule KVM cannot filter (x2APIC) or too many ranges: the filter is
// refused, exit 1, naming the rule, as for an invalid policy.
TEST(CliKvmTest, KvmFilterRefusalExitsOneNamingTheRules) {
  const std::string dir = MakeTempDir();
  const std::string x2apic = dir + "/x2apic.textproto";
  std::ofstream(x2apic) << "default {\n  vpmu: true\n  msr { msr: \"0x808\" read: ZERO }\n}\n";
  CliRun r = Pvemuctl("kvm-filter --domain=1 --policy=" + x2apic);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("pvemuctl: domain 1's policy cannot be a KVM MSR filter: "));
  EXPECT_THAT(r.output, HasSubstr(x2apic + ":3"));
  EXPECT_THAT(r.output, HasSubstr("x2APIC"));

  // explain --kvm refuses the same way; explain without it still answers.
  CliRun explain = Pvemuctl("explain --kvm --domain=1 --msr=0x808 --policy=" + x2apic);
  EXPECT_EQ(explain.status, 1) << explain.output;
  EXPECT_THAT(explain.output, HasSubstr(x2apic + ":3"));
  EXPECT_EQ(Pvemuctl("explain --domain=1 --msr=0x808 --policy=" + x2apic).status, 0);

  const std::string many = dir + "/many.textproto";
  {
    std::ofstream out(many);
    out << "default {\n  vpmu: true\n";
    for (int i = 1; i <= 17; ++i) out << "  msr { msr: \"" << i * 0x10000 << "\" read: ZERO }\n";
    out << "}\n";
  }
  CliRun ranges = Pvemuctl("-o json kvm-filter --domain=1 --policy=" + many);
  EXPECT_EQ(ranges.status, 1) << ranges.output;
  EXPECT_THAT(ranges.output, HasSubstr(many + ":19"));
  EXPECT_THAT(ranges.output, Not(HasSubstr("{")));  // no filter on stdout
}

TEST(CliKvmTest, ExplainKvmSaysWhetherTheMsrExitsInTextAndJson) {
  CliRun text = Pvemuctl("explain --kvm --domain=1 --msr=IA32_ENERGY_PERF_BIAS --policy=kvm");
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("decided by default rule at kvm.textproto:"));
  EXPECT_THAT(text.output, ::testing::ContainsRegex("\n  kvm: [^\n]*exits to pvemu[^\n]*kvm\\.textproto:[0-9]+"));

  CliRun exits = Pvemuctl("-o json explain --kvm --domain=1 --msr=0x1b0 --policy=kvm");
  EXPECT_EQ(exits.status, 0) << exits.output;
  google::protobuf::Struct e = ParseJsonLine(exits.output);
  ASSERT_TRUE(e.fields().contains("kvm")) << exits.output;
  EXPECT_TRUE(e.fields().at("kvm").struct_value().fields().at("exits").bool_value());
  EXPECT_THAT(e.fields().at("kvm").struct_value().fields().at("detail").string_value(),
              HasSubstr("kvm.textproto:"));
  // "kvm" comes last, after the keys explain always prints.
  EXPECT_THAT(exits.output, ::testing::StartsWith("{\"domain\":1,\"msr\":\"0x1b0\","));
  EXPECT_THAT(exits.output, ::testing::ContainsRegex(",\"kvm\":\\{\"exits\":true,\"detail\":\"[^\"]*\"\\}\\}\n$"));

  // EFER: the preset names it not, so it stays with KVM.
  CliRun stays = Pvemuctl("-o json explain --kvm --domain=1 --msr=IA32_EFER --policy=kvm");
  EXPECT_EQ(stays.status, 0) << stays.output;
  google::protobuf::Struct s = ParseJsonLine(stays.output);
  EXPECT_FALSE(s.fields().at("kvm").struct_value().fields().at("exits").bool_value());
  EXPECT_THAT(s.fields().at("kvm").struct_value().fields().at("detail").string_value(),
              HasSubstr("stays with KVM"));

  // Without --kvm there is no "kvm" key and no kvm line.
  EXPECT_THAT(Pvemuctl("-o json explain --domain=1 --msr=0x1b0 --policy=kvm").output,
              Not(HasSubstr("\"kvm\"")));
  EXPECT_THAT(Pvemuctl("explain --domain=1 --msr=0x1b0 --policy=kvm").output,
              Not(HasSubstr("kvm:")));
}

// With --server: the daemon's current policy, compiled for the daemon's host
// vendor, at its generation; edits show at once.
class CliKvmDaemonTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    options_.policy = "kvm";  // the test runs in the build tree, beside a kvm/ directory
    options_.host_profile = "amd-epyc-7443p";
    StartDaemon();
  }
  CliRun Online(const std::string& args) {
    return Pvemuctl(absl::StrCat("--server=", options_.listen, " ", args));
  }
};

TEST_F(CliKvmDaemonTest, KvmFilterUsesTheDaemonsPolicyVendorAndGeneration) {
  CliRun text = Online("kvm-filter --domain=1");
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_THAT(text.output, ::testing::StartsWith("domain 1, host vendor AMD, pvemud generation 1\n"));
  EXPECT_THAT(text.output, HasSubstr("IA32_ENERGY_PERF_BIAS"));

  CliRun set = Online("policy set-rule --domain=1 --msr=0x40000010 --read=ZERO");
  ASSERT_EQ(set.status, 0) << set.output;
  CliRun json = Online("-o json kvm-filter --domain=1");
  EXPECT_EQ(json.status, 0) << json.output;
  EXPECT_THAT(json.output,
              ::testing::StartsWith("{\"domain\":1,\"host_vendor\":\"AMD\",\"generation\":2,"));
  EXPECT_THAT(ExitingOf(ParseJsonLine(json.output)), ::testing::Contains("0x40000010-0x40000010"));
  // Domain 2 has no overlay: the edit is not its.
  CliRun other = Online("-o json kvm-filter --domain=2");
  EXPECT_THAT(ExitingOf(ParseJsonLine(other.output)),
              Not(::testing::Contains("0x40000010-0x40000010")));
}

// The rule a KVM note names is located as a line of `pvemuctl policy get`'s
// output at that generation, so an operator can find it there.
TEST_F(CliKvmDaemonTest, ExplainKvmNamesTheRulesLineInPolicyGet) {
  ASSERT_EQ(Online("policy set-rule --domain=1 --msr=0x40000010 --read=ZERO").status, 0);
  CliRun r = Online("-o json explain --kvm --domain=1 --msr=0x40000010");
  ASSERT_EQ(r.status, 0) << r.output;
  google::protobuf::Struct e = ParseJsonLine(r.output);
  ASSERT_TRUE(e.fields().contains("kvm")) << r.output;
  const auto& kvm = e.fields().at("kvm").struct_value().fields();
  EXPECT_TRUE(kvm.at("exits").bool_value());
  const std::string detail = kvm.at("detail").string_value();
  const std::string where = "pvemud generation 2:";
  size_t at = detail.find(where);
  ASSERT_NE(at, std::string::npos) << detail;
  int line = 0;
  std::string digits;
  for (size_t i = at + where.size(); i < detail.size() && absl::ascii_isdigit(detail[i]); ++i) {
    digits.push_back(detail[i]);
  }
  ASSERT_TRUE(absl::SimpleAtoi(digits, &line)) << detail;

  CliRun get = Online("policy get");
  ASSERT_EQ(get.status, 0) << get.output;
  std::vector<std::string> lines = absl::StrSplit(get.output, '\n');
  ASSERT_GE(static_cast<int>(lines.size()), line) << get.output;
  // The line is the rule's own (its `msr {`) or the target inside it.
  const std::string& at_line = lines[line - 1];
  const std::string& next = static_cast<int>(lines.size()) > line ? lines[line] : at_line;
  EXPECT_TRUE(absl::StrContains(at_line, "0x40000010") || absl::StrContains(next, "0x40000010"))
      << "line " << line << " of policy get: " << at_line << "\n" << get.output;

  // An MSR the policy does not name stays with KVM.
  CliRun efer = Online("explain --kvm --domain=1 --msr=IA32_EFER");
  EXPECT_EQ(efer.status, 0) << efer.output;
  EXPECT_THAT(efer.output, HasSubstr("stays with KVM"));
}

TEST_F(CliKvmDaemonTest, AnEditKvmCannotFilterIsRefusedForThatDomainOnly) {
  ASSERT_EQ(Online("policy set-rule --domain=1 --msr=0x808 --read=ZERO").status, 0);
  CliRun refused = Online("kvm-filter --domain=1");
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("domain 1's policy cannot be a KVM MSR filter"));
  EXPECT_THAT(refused.output, HasSubstr("pvemud generation 2:"));
  EXPECT_EQ(Online("kvm-filter --domain=2").status, 0);
}

TEST(CliKvmTest, KvmFilterWithAnUnreachableServerExitsThree) {
  CliRun r = Pvemuctl("--server=unix:///nonexistent/pvemu.sock --timeout=2 kvm-filter --domain=1");
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot reach pvemud at unix:///nonexistent/pvemu.sock"));
  CliRun e = Pvemuctl(
      "--server=unix:///nonexistent/pvemu.sock --timeout=2 explain --kvm --domain=1 --msr=0x10");
  EXPECT_EQ(e.status, 3) << e.output;
}

// --- xen-config.

// The lines of `text` that are xl.cfg settings (not comments).
std::vector<std::string> Settings(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "#")) out.emplace_back(line);
  }
  return out;
}

TEST(CliXenTest, XenConfigPrintsTheFragmentThenTheReportAsComments) {
  const std::string dir = MakeTempDir();
  const std::string file = dir + "/p.textproto";
  std::ofstream(file) << "default {\n"
                         "  unknown_msr: UNKNOWN_GP\n"
                         "  msr { msr: \"IA32_TSC\" read: ZERO write: IGNORE }\n"
                         "  io_port { first: 0x80 last: 0x80 }\n"
                         "  cpuid { leaf: 1 clear { ecx: 0x80000000 } }\n"
                         "  cpuid { leaf: 0x40000000 source: CONST set { eax: 0x40000001 } }\n"
                         "}\n";
  CliRun text = Pvemuctl("xen-config --domain=1 --policy=" + file);
  EXPECT_EQ(text.status, 0) << text.output;  // 0 although the report is not empty
  EXPECT_THAT(text.output, ::testing::StartsWith("# pvemuctl xen-config: domain 1, host vendor INTEL\n"));
  EXPECT_THAT(Settings(text.output),
              ::testing::ElementsAre("msr_relaxed=0", "cpuid=[",
                                     "    \"0x1:ecx=0xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"", "]"));
  EXPECT_THAT(text.output, HasSubstr("# not expressible: " + file + ":3: MSR 0x10 "));
  EXPECT_THAT(text.output, HasSubstr("# not expressible: " + file + ":4: io_port 0x80: "));
  EXPECT_THAT(text.output, HasSubstr("# not expressible: " + file + ":6: CPUID leaf 0x40000000: "));

  CliRun json = Pvemuctl("-o json xen-config --domain=1 --policy=" + file);
  EXPECT_EQ(json.status, 0) << json.output;
  std::vector<std::string> lines = absl::StrSplit(json.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u) << json.output;
  google::protobuf::Struct parsed = ParseJsonLine(lines[0]);
  const auto& f = parsed.fields();
  EXPECT_EQ(f.at("domain").number_value(), 1);
  EXPECT_EQ(f.at("fragment").string_value(),
            "msr_relaxed=0\ncpuid=[\n    \"0x1:ecx=0xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"\n]\n");
  const auto& report = f.at("report").list_value().values();
  ASSERT_EQ(report.size(), 4) << json.output;  // the last: the built-in vPMU-off rule
  const auto& first = report[0].struct_value().fields();
  EXPECT_EQ(first.at("origin").string_value(), file + ":6");
  EXPECT_EQ(first.at("what").string_value(), "CPUID leaf 0x40000000");
  EXPECT_THAT(first.at("why").string_value(), HasSubstr("hypervisor leaves"));
}

TEST(CliXenTest, XenConfigOfTheShippedDefaultPolicy) {
  CliRun r = Pvemuctl("xen-config --domain=1 --policy=default");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(Settings(r.output), ::testing::Contains("msr_relaxed=0"));
  EXPECT_THAT(r.output, HasSubstr("default.textproto:"));
  EXPECT_THAT(r.output, HasSubstr("IA32_TIME_STAMP_COUNTER"));
}

TEST(CliXenTest, XenConfigOfAnInvalidPolicyFileNamesFileAndLine) {
  const std::string dir = MakeTempDir();
  std::ofstream(dir + "/bad.textproto") << "default {\n  msr { msr: \"0x10\" read: CONST }\n}\n";
  CliRun r = Pvemuctl("xen-config --domain=1 --policy=" + dir + "/bad.textproto");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dir + "/bad.textproto:2:"));
  EXPECT_THAT(r.output, HasSubstr("read CONST needs a value"));
}

TEST(CliXenTest, XenConfigWithAnUnreachableServerExitsThree) {
  CliRun r = Pvemuctl("--server=unix:///nonexistent/pvemu.sock --timeout=2 xen-config --domain=1");
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot reach pvemud at unix:///nonexistent/pvemu.sock"));
}

// With --server: the daemon's policy at its generation, rules located as
// lines of `pvemuctl policy get`'s output.
TEST_F(CliKvmDaemonTest, XenConfigUsesTheDaemonsPolicyAndGeneration) {
  ASSERT_EQ(Online("policy set-rule --domain=1 --msr=0x40000010 --read=ZERO").status, 0);
  CliRun r = Online("xen-config --domain=1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output,
              ::testing::StartsWith("# pvemuctl xen-config: domain 1, host vendor AMD, "
                                    "pvemud generation 2\n"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "# not expressible: pvemud generation 2:[0-9]+: MSR 0x40000010 "));
  CliRun json = Online("-o json xen-config --domain=1");
  EXPECT_THAT(json.output,
              ::testing::StartsWith("{\"domain\":1,\"host_vendor\":\"AMD\",\"generation\":2,"));
}

}  // namespace
}  // namespace pvemu::testing
