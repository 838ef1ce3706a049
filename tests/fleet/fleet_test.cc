// Fleet mode against a real 3-member etcd cluster:
// three fleet-mode pvemud in process (two on the sim Intel profile, one on
// AMD; classes web and gpu), edited through pvemuctl and etcdctl, with
// etcd members killed, the whole cluster stopped, and history compacted.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "tests/fleet/etcd_cluster.h"
#include "tests/fleet/fleet_hosts.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kEpb = 0x1b0;      // IA32_ENERGY_PERF_BIAS
constexpr uint32_t kTherm = 0x19a;    // IA32_THERM_CONTROL

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    etcd_ = std::make_unique<EtcdCluster>(dir_);
    ASSERT_TRUE(etcd_->Start()) << "the etcd cluster did not come up; see " << dir_;
    // h1, h2: Intel; h3: AMD. Classes: h1 web, h2 web+gpu, h3 gpu.
    hosts_ = ThreeFleetHosts(dir_, etcd_->Url());
    for (size_t i = 0; i < hosts_.size(); ++i) StartHost(i);
  }
  void TearDown() override {
    for (size_t i = 0; i < hosts_.size(); ++i) StopHost(i);
    etcd_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartHost(size_t i) { hosts_[i].Start(); }
  void StopHost(size_t i) { hosts_[i].Stop(); }

  // What a guest of domain 1 on host i reads from `msr`; -1 for #GP.
  int64_t Read(size_t i, uint32_t msr) { return hosts_[i].ReadMsr(1, msr); }
  bool AllRead(uint32_t msr, const std::vector<int64_t>& want, std::chrono::milliseconds limit) {
    return WaitFor(
        [&] {
          for (size_t i = 0; i < hosts_.size(); ++i) {
            if (Read(i, msr) != want[i]) return false;
          }
          return true;
        },
        limit);
  }

  v1::StatsResponse Stats(size_t i) {
    grpc::ClientContext context;
    v1::StatsResponse stats;
    EXPECT_TRUE(hosts_[i].emulator->GetStats(&context, v1::StatsRequest(), &stats).ok());
    return stats;
  }

  // pvemuctl against host i.
  CommandRun Ctl(size_t i, const std::string& args) {
    return RunCommand(absl::StrCat(std::getenv("PVEMU_BUILD_ROOT"), "/client/pvemuctl --server=",
                                   hosts_[i].options.listen, " ", args));
  }

  int64_t ModRevision(size_t i, const std::string& layer) {
    grpc::ClientContext context;
    v1::GetLayerRequest request;
    request.set_layer(layer);
    v1::GetLayerResponse response;
    EXPECT_TRUE(hosts_[i].fleet->GetLayer(&context, request, &response).ok());
    return response.mod_revision();
  }

  std::string dir_;
  std::unique_ptr<EtcdCluster> etcd_;
  std::vector<FleetHost> hosts_;
};

TEST_F(FleetTest, DefaultEditReachesEveryHostClassEditOnlyItsClassVendorRuleByHost) {
  // Before any fleet key: the shipped default, whose vendor rule passes the
  // Intel host's EPB through (the sim profile's value) and reads 0 on AMD.
  const int64_t intel_epb = Read(0, kEpb);
  EXPECT_NE(intel_epb, 0);
  EXPECT_EQ(Read(2, kEpb), 0);

  CommandRun r = Ctl(0, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=0x11");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(applied on this host)"));
  EXPECT_TRUE(AllRead(kEpb, {0x11, 0x11, 0x11}, std::chrono::seconds(5)));

  // The vendor rule, in the fleet default: AMD hosts read 0x22.
  r = Ctl(1, "fleet set-rule --layer=default --msr=0x1b0 --host-vendor=amd --read=CONST "
             "--value=0x22");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(AllRead(kEpb, {0x11, 0x11, 0x22}, std::chrono::seconds(5)));

  // A class edit reaches only that class: gpu is h2 and h3.
  r = Ctl(0, "fleet set-rule --layer=class:gpu --msr=IA32_THERM_CONTROL --read=CONST --value=7");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not one of this host's layers"));
  const int64_t h1_therm = Read(0, kTherm);
  EXPECT_TRUE(AllRead(kTherm, {h1_therm, 7, 7}, std::chrono::seconds(5)));
  EXPECT_NE(h1_therm, 7);

  // Each host's generation is the revision it applied, the same everywhere.
  const uint64_t g = Stats(0).generation();
  EXPECT_TRUE(WaitFor([&] { return Stats(1).generation() >= g && Stats(2).generation() >= g; },
                      std::chrono::seconds(5)));
  EXPECT_EQ(Stats(0).fleet().id(), "h1");
  EXPECT_EQ(static_cast<uint64_t>(Stats(0).fleet().applied_revision()), Stats(0).generation());
}

TEST_F(FleetTest, HostLayerDoesNotReachAHostWhoseIdStartsTheSame) {
  // A watch on host/h1 must never match host/h10.
  ASSERT_EQ(etcd_->Etcdctl("put /pvemu/policy/host/h10 "
                           "'default { msr { msr: \"0x1b0\" read: CONST value: 99 } }'")
                .status,
            0);
  CommandRun r = Ctl(1, "fleet set-rule --layer=host:h2 --msr=0x1b0 --read=CONST --value=5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(applied on this host)"));
  EXPECT_NE(Read(0, kEpb), 99);
  EXPECT_EQ(Read(1, kEpb), 5);
}

TEST_F(FleetTest, InvalidLayerWrittenWithEtcdctlKeepsLastGoodAndShowsInStatus) {
  CommandRun r = Ctl(0, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=0x11");
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(AllRead(kEpb, {0x11, 0x11, 0x11}, std::chrono::seconds(5)));
  std::vector<uint64_t> good;
  for (size_t i = 0; i < hosts_.size(); ++i) good.push_back(Stats(i).generation());

  // Line 3 names an MSR no catalog has.
  ASSERT_EQ(etcd_->Put("/pvemu/policy/default",
                       "default {\n  msr {\n    msr: \"NO_SUCH_MSR\"\n    read: ZERO\n  }\n}\n"),
            0);
  ASSERT_TRUE(WaitFor(
      [&] {
        for (size_t i = 0; i < hosts_.size(); ++i) {
          if (!Stats(i).fleet().has_last_error()) return false;
        }
        return true;
      },
      std::chrono::seconds(5)));
  for (size_t i = 0; i < hosts_.size(); ++i) {
    v1::StatsResponse s = Stats(i);
    EXPECT_EQ(s.generation(), good[i]) << "host " << i << " applied the bad revision";
    EXPECT_EQ(s.fleet().last_error().key(), "/pvemu/policy/default");
    EXPECT_EQ(s.fleet().last_error().line(), 3u);
    EXPECT_THAT(s.fleet().last_error().message(), HasSubstr("NO_SUCH_MSR"));
    EXPECT_EQ(Read(i, kEpb), 0x11);
  }
  // fleet status shows every host's error with the key and line.
  ASSERT_TRUE(WaitFor(
      [&] {
        CommandRun st = Ctl(2, "fleet status -o json");
        return st.status == 0 && absl::StrContains(st.output, "\"line\":3") &&
               !absl::StrContains(st.output, "\"last_error\":null");
      },
      std::chrono::seconds(5)));
  r = Ctl(2, "fleet status -o json");
  EXPECT_THAT(r.output, HasSubstr("\"key\":\"/pvemu/policy/default\",\"line\":3"));
  EXPECT_THAT(r.output, HasSubstr("{\"id\":\"h1\",\"classes\":[\"web\"],\"vendor\":\"intel\","
                                  "\"alive\":true,\"applied_revision\":"));

  // An edit of a key this host uses now commits but cannot apply: it says
  // so, naming the key at fault, within 5 s.
  const auto start = std::chrono::steady_clock::now();
  r = Ctl(0, "fleet set-rule --layer=host:h1 --msr=0x19a --read=ZERO");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(7));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("not applied on this host"));
  EXPECT_THAT(r.output, HasSubstr("/pvemu/policy/default line 3"));

  // Fixing the layer: every host applies the next good revision.
  r = Ctl(0, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=0x33");
  EXPECT_EQ(r.status, 1) << "set-rule on an invalid layer is refused: " << r.output;
  EXPECT_THAT(r.output, HasSubstr("fleet apply -f FILE --layer=default"));
  const std::string fixed = dir_ + "/fixed.textproto";
  std::ofstream(fixed) << "default { msr { msr: \"0x1b0\" read: CONST value: 0x33 } }\n";
  r = Ctl(0, "fleet apply -f " + fixed + " --layer=default");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(AllRead(kEpb, {0x33, 0x33, 0x33}, std::chrono::seconds(5)));
  EXPECT_FALSE(Stats(0).fleet().has_last_error());
}

TEST_F(FleetTest, AnEditThatWouldNotApplyHereIsRefusedBeforeItIsWritten) {
  const std::string bad = dir_ + "/bad.textproto";
  std::ofstream(bad) << "default {\n  msr { msr: \"0x1b0\" read: CONST }\n  bogus: 1\n}\n";
  CommandRun r = Ctl(0, "fleet apply -f " + bad + " --layer=default");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr(bad + ":3"));
  EXPECT_EQ(etcd_->Etcdctl("get /pvemu/policy/default").output, "");
  // A class edit that ties with another class of a registered host (h2 has
  // web and gpu) is refused, naming the host.
  ASSERT_EQ(Ctl(0, "fleet set-rule --layer=class:web --msr=0x1b0 --read=CONST --value=1").status, 0);
  r = Ctl(0, "fleet set-rule --layer=class:gpu --msr=0x1b0 --read=CONST --value=2");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr("host h2 has both classes gpu and web"));
  // --domain=default on a fleet host points at the fleet command.
  r = Ctl(0, "policy set-rule --domain=default --msr=0x1b0 --read=ZERO");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr("fleet set-rule --layer=host:h1"));
  // --domain=N writes this host's domain overlay key.
  r = Ctl(0, "policy set-rule --domain=1 --msr=0x1b0 --read=CONST --value=0x44");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(Read(0, kEpb), 0x44);
  EXPECT_THAT(etcd_->Etcdctl("get /pvemu/policy/host/h1/domain/1").output,
              HasSubstr("value: 68"));
}

TEST_F(FleetTest, TwoEditorsRaceWithIfRevisionOneIsAbortedWithoutItBothLand) {
  ASSERT_EQ(Ctl(0, "fleet set-rule --layer=default --msr=0x1b0 --read=ZERO").status, 0);
  const int64_t m = ModRevision(0, "default");
  ASSERT_GT(m, 0);
  std::atomic<int> ok{0}, aborted{0};
  std::vector<std::thread> editors;
  for (int e = 0; e < 2; ++e) {
    editors.emplace_back([&, e] {
      v1::FleetRuleRequest request;
      request.set_layer("default");
      request.mutable_rule()->set_msr("0x19a");
      request.mutable_rule()->set_read(v1::ReadAction::CONST);
      request.mutable_rule()->set_value(100 + e);
      request.set_if_revision(m);
      grpc::ClientContext context;
      v1::FleetEditResponse response;
      grpc::Status s = hosts_[e].fleet->SetRule(&context, request, &response);
      if (s.ok()) ++ok;
      if (s.error_code() == grpc::StatusCode::ABORTED) ++aborted;
    });
  }
  for (std::thread& t : editors) t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(aborted.load(), 1);
  // Without --if-revision the two read-modify-writes cannot lose each
  // other's work: the Txn compares the mod_revision each one read (from its
  // host's watch cache), and the loser makes its edit once more over the
  // winner's value, which the failed Txn returned. Both land.
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> more;
    std::atomic<int> done{0};
    std::vector<std::string> outputs(2);
    for (int e = 0; e < 2; ++e) {
      more.emplace_back([&, e] {
        CommandRun r = Ctl(e, absl::StrCat("fleet set-rule --layer=class:web --msr=",
                                           0x10 + 2 * round + e, " --read=ZERO"));
        outputs[e] = r.output;
        if (r.status == 0) ++done;
      });
    }
    for (std::thread& t : more) t.join();
    EXPECT_EQ(done.load(), 2) << outputs[0] << outputs[1];
  }
  const CommandRun got = Ctl(2, "fleet get --layer=class:web");
  for (int msr = 0x10; msr < 0x10 + 10; ++msr) {
    EXPECT_THAT(got.output, HasSubstr(absl::StrCat("msr: \"", msr, "\""))) << got.output;
  }
}

TEST_F(FleetTest, WithEtcdStoppedARestartedHostServesItsLastGoodPolicyAtOnceAndIsStale) {
  ASSERT_EQ(Ctl(0, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=0x55").status,
            0);
  ASSERT_TRUE(AllRead(kEpb, {0x55, 0x55, 0x55}, std::chrono::seconds(5)));
  const uint64_t generation = Stats(0).generation();
  etcd_->StopAll();
  StopHost(0);
  const auto start = std::chrono::steady_clock::now();
  StartHost(0);
  // Served at once, from state_dir/fleet.state, at the same generation.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(Read(0, kEpb), 0x55);
  EXPECT_EQ(Stats(0).generation(), generation);
  EXPECT_TRUE(WaitFor([&] { return !Stats(0).fleet().stale_since().empty(); },
                      std::chrono::seconds(5)));
  CommandRun r = Ctl(0, "stats");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("STALE since"));
  // fleet status answers from the last view, marked stale, exit 0.
  r = Ctl(0, "fleet status -o json");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"stale\":true"));
  // Traps never wait on etcd.
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) Read(0, kEpb);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // etcd back: the host reconnects (backoff capped at 5 s) and is no longer stale.
  etcd_->StartAll();
  ASSERT_TRUE(etcd_->WaitHealthy(std::chrono::seconds(20)));
  EXPECT_TRUE(WaitFor([&] { return Stats(0).fleet().stale_since().empty(); },
                      std::chrono::seconds(15)));
}

TEST_F(FleetTest, OneMemberDownEditsGoOnTwoDownEditsFailCleanlyAndTrapsGoOnThenConverge) {
  ASSERT_EQ(Ctl(0, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=1").status, 0);
  etcd_->KillMember(0);
  CommandRun r = Ctl(1, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(AllRead(kEpb, {2, 2, 2}, std::chrono::seconds(10)));

  etcd_->KillMember(1);
  const auto start = std::chrono::steady_clock::now();
  r = Ctl(1, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=3");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("etcd at " + etcd_->Endpoints()));
  EXPECT_THAT(r.output, HasSubstr("nothing was written"));
  // Traps go on, on the last good policy.
  for (size_t i = 0; i < hosts_.size(); ++i) EXPECT_EQ(Read(i, kEpb), 2);

  etcd_->StartAll();
  ASSERT_TRUE(etcd_->WaitHealthy(std::chrono::seconds(20)));
  ASSERT_TRUE(WaitFor(
      [&] {
        return Ctl(2, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=4")
                   .status == 0;
      },
      std::chrono::seconds(15)));
  // Every host converges within 15 s of etcd's return.
  EXPECT_TRUE(AllRead(kEpb, {4, 4, 4}, std::chrono::seconds(15)));
}

TEST_F(FleetTest, AHostAwayWhileEtcdCompactedPastItsRevisionConvergesWhenBack) {
  ASSERT_EQ(Ctl(0, "fleet set-rule --layer=default --msr=0x1b0 --read=CONST --value=1").status, 0);
  ASSERT_TRUE(AllRead(kEpb, {1, 1, 1}, std::chrono::seconds(5)));
  StopHost(2);
  for (int v = 2; v <= 5; ++v) {
    ASSERT_EQ(Ctl(0, absl::StrCat("fleet set-rule --layer=class:gpu --msr=0x1b0 --read=CONST "
                                  "--value=", v)).status,
              0);
  }
  // Compact at the current revision: the host's revision is history.
  CommandRun rev = etcd_->Etcdctl("get /pvemu/policy/class/gpu -w fields");
  const size_t at = rev.output.find("\"Revision\" : ");
  ASSERT_NE(at, std::string::npos) << rev.output;
  const std::string current = rev.output.substr(at + 13, rev.output.find('\n', at) - at - 13);
  CommandRun compacted = etcd_->Etcdctl("compact " + current);
  ASSERT_EQ(compacted.status, 0) << compacted.output;
  StartHost(2);
  EXPECT_TRUE(AllRead(kEpb, {1, 5, 5}, std::chrono::seconds(10)));
  EXPECT_GE(Stats(2).generation(), std::stoull(current));
}

// The read an edit starts beside its checks (EtcdClient::StartGet), on a
// cluster of its own: it answers as Get does, a dropped one is cancelled
// without waiting out its timeout, and under a lost quorum it fails in time
// naming etcd and the key.
TEST(EtcdClientTest, AReadStartedNowAnswersAsGetIsCancelledWhenDroppedAndFailsWithoutQuorum) {
  const std::string dir = MakeTempDir();
  EtcdCluster etcd(dir);
  ASSERT_TRUE(etcd.Start()) << "the etcd cluster did not come up; see " << dir;
  std::unique_ptr<fleet::EtcdClient> client = etcd.Client();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<int64_t> put = client->Put("/pvemu-test/k", "v1", 0, absl::Seconds(5));
  ASSERT_TRUE(put.ok()) << put.status();

  absl::StatusOr<fleet::RangeResult> read =
      client->StartGet("/pvemu-test/k", absl::Seconds(5))->Wait();
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->kvs.size(), 1u);
  EXPECT_EQ(read->kvs[0].value, "v1");
  EXPECT_EQ(read->kvs[0].mod_revision, *put);
  EXPECT_GE(read->revision, *put);
  read = client->StartGet("/pvemu-test/none", absl::Seconds(5))->Wait();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->kvs.empty());

  // Quorum lost: dropped unwaited, it goes at once; waited, it fails within
  // its timeout (and Get's retries), naming etcd and the key.
  etcd.KillMember(0);
  etcd.KillMember(1);
  auto start = std::chrono::steady_clock::now();
  client->StartGet("/pvemu-test/k", absl::Seconds(3)).reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  start = std::chrono::steady_clock::now();
  read = client->StartGet("/pvemu-test/k", absl::Seconds(3))->Wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("etcd at " + etcd.Endpoints()));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("reading /pvemu-test/k"));
  // `dir` goes when the process exits (MakeTempDir), after the member
  // still running in it.
}

}  // namespace
}  // namespace pvemu::testing
