// What one gRPC peer can hold of pvemud, with the real pvemud binary (so
// that its resident memory and threads are its own): messages past
// --max-message-bytes, streams past --max-streams-per-peer, a ReportTraps
// stream that sends faster than pvemud drains it while a watcher reads
// nothing, and a reporter that names more data planes than pvemud keeps.
// Each test prints its figures ("figure: ...") for the issue notes.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "dispatch/audit.h"
#include "tests/sanitizers.h"
#include "tests/server/daemon_fixture.h"

extern char** environ;

namespace pvemu {
namespace {

using ::testing::HasSubstr;
using testing::kUnderAddressSanitizer;

// A field of /proc/PID/status ("VmRSS", "Threads"), as a number (VmRSS in KiB).
int64_t ProcStatus(pid_t pid, absl::string_view field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field) || !absl::ConsumePrefix(&rest, ":")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, " kB");
    int64_t value = 0;
    if (absl::SimpleAtoi(rest, &value)) return value;
  }
  ADD_FAILURE() << "no " << field << " in /proc/" << pid << "/status";
  return 0;
}

class PeerLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir(); }
  void TearDown() override {
    Stop();
    std::filesystem::remove_all(dir_);
  }

  std::string listen() const { return "unix://" + dir_ + "/pvemu.sock"; }
  std::string log_path() const { return dir_ + "/pvemud.log"; }

  // The pvemud binary with `flags`, up and answering.
  void Start(std::vector<std::string> flags) {
    const std::string binary = std::string(std::getenv("PVEMU_BUILD_ROOT")) + "/server/pvemud";
    std::vector<std::string> args = {binary, "--listen=" + listen(),
                                     "--state-dir=" + dir_ + "/state"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log_path().c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    ASSERT_EQ(posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    channel_ = Connect();
    ASSERT_TRUE(channel_->WaitForConnected(std::chrono::system_clock::now() +
                                           std::chrono::seconds(30)))
        << "pvemud did not come up; see " << log_path();
    policy_ = v1::PolicyService::NewStub(channel_);
    audit_ = v1::AuditService::NewStub(channel_);
    kvm_ = v1::KvmService::NewStub(channel_);
  }
  void Stop() {
    policy_.reset();
    audit_.reset();
    kvm_.reset();
    channel_.reset();
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // A channel of its own: gRPC shares one connection among channels with
  // equal arguments, and a test that means a new connection says so.
  std::shared_ptr<grpc::Channel> Connect(int salt = 0) const {
    grpc::ChannelArguments args;
    args.SetInt("pvemu.test.connection", salt);
    args.SetMaxReceiveMessageSize(64 << 20);
    return grpc::CreateCustomChannel(listen(), grpc::InsecureChannelCredentials(), args);
  }
  // Whether pvemud still answers a unary read.
  bool Answers() const {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::GetPolicyResponse response;
    return policy_->GetPolicy(&context, v1::GetPolicyRequest(), &response).ok();
  }
  int64_t RssKiB() const { return ProcStatus(pid_, "VmRSS"); }
  int64_t Threads() const { return ProcStatus(pid_, "Threads"); }
  std::string Log() const {
    std::ifstream in(log_path());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PolicyService::Stub> policy_;
  std::unique_ptr<v1::AuditService::Stub> audit_;
  std::unique_ptr<v1::KvmService::Stub> kvm_;
};

// A Watch stream, open once pvemud has sent its initial metadata (the
// stream is admitted) or finished with the status it refused it with.
struct OpenWatch {
  std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
  std::unique_ptr<grpc::ClientReader<v1::AuditEvent>> reader;
};

OpenWatch Watch(v1::AuditService::Stub& audit, const v1::WatchRequest& request = {}) {
  OpenWatch w;
  w.reader = audit.Watch(w.context.get(), request);
  w.reader->WaitForInitialMetadata();
  return w;
}

TEST_F(PeerLimitsTest, LimitsOutOfRangeAreRefusedAtStartNamingTheFlag) {
  const std::string pvemud = std::string(std::getenv("PVEMU_BUILD_ROOT")) + "/server/pvemud";
  const std::string common = " --listen=" + listen() + " --state-dir=" + dir_ + "/state";
  for (const std::string flag : {"--max-streams-per-peer=0", "--max-streams-per-peer=2000000",
                                 "--max-message-bytes=100"}) {
    testing::CommandRun run = testing::RunCommand(pvemud + common + " " + flag);
    EXPECT_NE(run.status, 0) << flag;
    EXPECT_THAT(run.output, HasSubstr(flag)) << run.output;
    EXPECT_THAT(run.output, HasSubstr("must be")) << run.output;
  }
}

TEST_F(PeerLimitsTest, MessagesPastTheLimitAreRefusedOnCallsAndStreamsAndPvemudServesOn) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max-message-bytes=65536"}));
  ASSERT_TRUE(Answers());
  const int64_t rss_before = RssKiB();
  // A unary request 4x the limit, fifty times.
  for (int i = 0; i < 50; ++i) {
    v1::ApplyPolicyRequest request;
    request.set_textproto(std::string(256 * 1024, '#'));
    v1::EditResponse edit;
    grpc::ClientContext context;
    grpc::Status status = policy_->ApplyPolicy(&context, request, &edit);
    ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  }
  // A stream whose third message is too large: the first two were taken,
  // the stream ends RESOURCE_EXHAUSTED.
  grpc::ClientContext context;
  v1::KvmReportResponse response;
  auto writer = kvm_->ReportTraps(&context, &response);
  v1::KvmTrapBatch small;
  small.set_domain(7);
  small.set_traps(1);
  EXPECT_TRUE(writer->Write(small));
  EXPECT_TRUE(writer->Write(small));
  v1::KvmTrapBatch large = small;
  large.add_log(std::string(256 * 1024, 'x'));
  writer->Write(large);
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(Answers());
  const int64_t grown = RssKiB() - rss_before;
  std::printf("figure: 50 requests of 256 KiB and a stream message of 256 KiB against "
              "--max-message-bytes=65536: all refused, pvemud's resident memory %+lld KiB\n",
              static_cast<long long>(grown));
  if (!kUnderAddressSanitizer) {
    EXPECT_LT(grown, 8 * 1024);
  }
  // Nothing of the refused message reached pvemud's log.
  EXPECT_THAT(Log(), ::testing::Not(HasSubstr(std::string(64, 'x'))));
}

TEST_F(PeerLimitsTest, StreamsPastTheLimitPerPeerAreRefusedNamingThePeerAndTheFlag) {
  constexpr int kLimit = 32;
  ASSERT_NO_FATAL_FAILURE(Start({absl::StrCat("--max-streams-per-peer=", kLimit)}));
  ASSERT_TRUE(Answers());
  const int64_t threads_before = Threads();
  const int64_t rss_before = RssKiB();
  // The limit's worth over several connections: the peer is the uid, not
  // the connection.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::AuditService::Stub>> stubs;
  for (int c = 0; c < 4; ++c) {
    channels.push_back(Connect(c + 1));
    stubs.push_back(v1::AuditService::NewStub(channels.back()));
  }
  std::vector<OpenWatch> open;
  for (int i = 0; i < kLimit; ++i) open.push_back(Watch(*stubs[i % stubs.size()]));
  // One more, on any connection, is refused.
  OpenWatch refused = Watch(*stubs[0]);
  v1::AuditEvent event;
  EXPECT_FALSE(refused.reader->Read(&event));
  grpc::Status status = refused.reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("uid "));
  EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat("--max-streams-per-peer=", kLimit)));
  EXPECT_THAT(status.error_message(), HasSubstr("Watch"));
  // So is a KVM data plane's subscription: one budget for every stream.
  {
    grpc::ClientContext context;
    v1::SubscribePolicyRequest request;
    request.set_domain(3);
    auto updates = v1::KvmService::NewStub(channels[1])->SubscribePolicy(&context, request);
    v1::PolicyUpdate update;
    EXPECT_FALSE(updates->Read(&update));
    EXPECT_EQ(updates->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // Unary calls are not streams: the peer still reads and edits.
  EXPECT_TRUE(Answers());
  const int64_t threads_held = Threads() - threads_before;
  const int64_t rss_held = RssKiB() - rss_before;
  std::printf("figure: %d open Watch streams of one uid: pvemud %+lld threads, %+lld KiB "
              "resident (%.1f KiB a stream); stream %d refused RESOURCE_EXHAUSTED\n",
              kLimit, static_cast<long long>(threads_held), static_cast<long long>(rss_held),
              static_cast<double>(rss_held) / kLimit, kLimit + 1);
  // Every admitted stream holds a thread; nothing else grows with them.
  EXPECT_LE(threads_held, kLimit + 16);
  if (!kUnderAddressSanitizer) {
    EXPECT_LT(rss_held, kLimit * 512);
  }

  // A stream that ends gives its place back.
  open.back().context->TryCancel();
  open.back().reader->Finish();
  open.pop_back();
  bool admitted = false;
  for (int attempt = 0; attempt < 50 && !admitted; ++attempt) {
    OpenWatch again = Watch(*stubs[1]);
    // Admitted streams get an edit event; refused ones end at once.
    v1::SetRuleRequest set;
    set.mutable_layer()->set_domain(7);
    set.mutable_rule()->set_msr("IA32_ENERGY_PERF_BIAS");
    set.mutable_rule()->set_read(v1::ReadAction::CONST);
    set.mutable_rule()->set_value(attempt);
    grpc::ClientContext edit_context;
    v1::EditResponse edit;
    (void)policy_->SetRule(&edit_context, set, &edit);
    if (again.reader->Read(&event)) {
      admitted = true;
      open.push_back(std::move(again));
    } else {
      again.reader->Finish();
      absl::SleepFor(absl::Milliseconds(100));  // the cancelled one is still ending
    }
  }
  EXPECT_TRUE(admitted) << "a stream's place was not given back when it ended";
  for (OpenWatch& w : open) w.context->TryCancel();
  for (OpenWatch& w : open) w.reader->Finish();
}

TEST_F(PeerLimitsTest, AReportStreamFasterThanPvemudDrainsWithAStuckWatcherKeepsMemoryBounded) {
  ASSERT_NO_FATAL_FAILURE(Start({}));
  ASSERT_TRUE(Answers());
  // A watcher that reads nothing: every audited event queues for it.
  OpenWatch stuck = Watch(*audit_);
  const int64_t rss_before = RssKiB();
  constexpr int kBatches = 20000;
  constexpr int kEventsPerBatch = 100;
  constexpr int kLogLinesPerBatch = 2;
  v1::KvmTrapBatch batch;
  batch.set_domain(9);
  batch.set_vcpus(1);
  batch.set_cumulative(true);
  for (int e = 0; e < kEventsPerBatch; ++e) {
    v1::TrapEvent* event = batch.add_events();
    event->set_domain(9);
    event->set_reason("audit-rule");
    event->set_msr(0x10 + e);
    event->set_mnemonic("wrmsr");
  }
  for (int l = 0; l < kLogLinesPerBatch; ++l) batch.add_log("first access: rdmsr 0x10 (flood)");
  grpc::ClientContext context;
  v1::KvmReportResponse response;
  auto writer = kvm_->ReportTraps(&context, &response);
  std::vector<int64_t> rss;  // sampled every tenth of the batches
  const absl::Time began = absl::Now();
  for (int i = 0; i < kBatches; ++i) {
    batch.set_traps(static_cast<uint64_t>(i) * kEventsPerBatch);
    ASSERT_TRUE(writer->Write(batch)) << "pvemud ended the stream at batch " << i;
    if ((i + 1) % (kBatches / 10) == 0) rss.push_back(RssKiB());
  }
  writer->WritesDone();
  EXPECT_TRUE(writer->Finish().ok());
  const double seconds = absl::ToDoubleSeconds(absl::Now() - began);
  EXPECT_TRUE(Answers());
  const int64_t peak = *std::max_element(rss.begin(), rss.end()) - rss_before;
  const int64_t second_half = rss.back() - rss[rss.size() / 2 - 1];
  std::printf("figure: %d batches of %d audited events (%.0f events/s taken by pvemud) with a "
              "watcher reading nothing: resident memory %+lld KiB at its peak, %+lld KiB over the "
              "second half (the watcher's queue full at %zu events)\n",
              kBatches, kEventsPerBatch, kBatches * kEventsPerBatch / seconds,
              static_cast<long long>(peak), static_cast<long long>(second_half),
              dispatch::AuditHub::kQueueBudget);
  if (!kUnderAddressSanitizer) {
    // The watcher's queue is bounded (the audit queue budget): once it is
    // full, memory stops growing whatever the stream sends.
    EXPECT_LT(peak, 256 * 1024);
    EXPECT_LT(second_half, 16 * 1024);
  }
  // pvemud's log took a bounded share of the flood's lines, and said so.
  const std::string log = Log();
  EXPECT_THAT(log, HasSubstr("more than 16384 log lines on one ReportTraps stream"));
  size_t flood_lines = 0;
  for (size_t at = log.find("(flood)"); at != std::string::npos; at = log.find("(flood)", at + 1)) {
    ++flood_lines;
  }
  EXPECT_EQ(flood_lines, 16384u);
  // The watcher, when it reads, is told how many it missed.
  v1::AuditEvent event;
  ASSERT_TRUE(stuck.reader->Read(&event));
  const absl::Time stopping = absl::Now();
  Stop();
  std::printf("figure: pvemud stopped in %.2f s with the watcher's queue full\n",
              absl::ToDoubleSeconds(absl::Now() - stopping));
  stuck.context->TryCancel();
  stuck.reader->Finish();
}

TEST_F(PeerLimitsTest, AReporterNamingMoreDataPlanesThanPvemudKeepsIsRefusedNotGrown) {
  ASSERT_NO_FATAL_FAILURE(Start({}));
  ASSERT_TRUE(Answers());
  const int64_t rss_before = RssKiB();
  grpc::ClientContext context;
  v1::KvmReportResponse response;
  auto writer = kvm_->ReportTraps(&context, &response);
  // One data plane per domain, all in this (live) process: pvemud keeps
  // 4096 and refuses the next.
  int written = 0;
  for (uint32_t domain = 1; domain <= 8192; ++domain) {
    v1::KvmTrapBatch batch;
    batch.set_domain(domain);
    batch.set_cumulative(true);
    batch.set_traps(1);
    v1::KvmMsrCount* m = batch.add_msrs();
    m->set_msr(0x10);
    m->set_action("PASSTHROUGH");
    m->set_count(1);
    if (!writer->Write(batch)) break;
    ++written;
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("4096 KVM data planes already report"));
  EXPECT_TRUE(Answers());
  const int64_t grown = RssKiB() - rss_before;
  std::printf("figure: a reporter naming 8192 data planes: refused after 4096, pvemud %+lld KiB "
              "resident\n", static_cast<long long>(grown));
  if (!kUnderAddressSanitizer) {
    EXPECT_LT(grown, 32 * 1024);
  }
}

}  // namespace
}  // namespace pvemu
