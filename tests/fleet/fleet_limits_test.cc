// Resource bounds on what an etcd writer controls, against a real 3-member
// etcd cluster and three fleet-mode pvemud in process (h1 web Intel, h2
// web+gpu Intel, h3 gpu AMD):
//   - values just under etcd's request limit (--max-request-bytes, 1.5 MiB
//     by default) in the default, a class and a host layer reach every
//     host, though h1's one read of its three keys is larger than gRPC's
//     default receive limit (4 MiB);
//   - an edit whose value is over etcd's limit is refused with the value's
//     size, etcd's limit and what to do, nothing written, no host moved;
//   - thousands of revisions a second of one layer: every host converges
//     to exactly the last one within 15 s, every policy a host publishes is
//     the layer as etcd held it at that generation, and resident memory
//     stays bounded.
// Each test prints its figures into the test log.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "fleet/etcd_client.h"
#include "tests/fleet/etcd_cluster.h"
#include "tests/fleet/fleet_hosts.h"
#include "tests/memory_trend.h"
#include "tests/sanitizers.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

// etcd's default --max-request-bytes (the test cluster's members keep it).
constexpr size_t kEtcdRequestLimit = 3 << 19;  // 1.5 MiB
// gRPC's default receive limit, which pvemud's channel to etcd no longer has.
constexpr size_t kGrpcDefaultReceive = 4 << 20;
// An MSR every generated layer sets (the highest layer wins); the generated
// rules' MSRs start at a base of their layer's (none of them a catalog's or
// the base policy's).
constexpr uint32_t kProbe = 0x6fff0000;
constexpr int kRules = 1000;
// Under AddressSanitizer the process's resident memory says nothing about
// pvemud's: freed blocks stay resident in ASan's quarantine and every
// allocation carries redzones and shadow. There the tests keep their
// functional checks and print the growth; the bound is checked by the plain
// build (as tests/server/metrics_hostile_test.cc does).
constexpr bool kResidentMemoryMeasurable = !kUnderAddressSanitizer;

double Since(Clock::time_point start) { return Seconds(Clock::now() - start).count(); }
double MiB(double bytes) { return bytes / (1 << 20); }

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

std::string Hex(uint64_t n) { return absl::StrCat("0x", absl::Hex(n)); }

// One CONST rule as protobuf's text printer writes it in a layer.
std::string RuleText(uint32_t msr, uint64_t value, absl::string_view comment) {
  std::string r = absl::StrCat("  msr {\n    msr: \"", Hex(msr), "\"\n    read: CONST\n    value: ",
                               value, "\n");
  if (!comment.empty()) absl::StrAppend(&r, "    comment: \"", comment, "\"\n");
  absl::StrAppend(&r, "  }\n");
  return r;
}

// A valid layer's value in the printer's own format (what an edit stores,
// so an edit keeps its size): kProbe reads `probe_value`, then kRules rules,
// MSR base + n reading base + n, each with a comment that pads the whole
// text to at most `bytes` and within a few hundred bytes of it.
std::string LayerText(uint32_t base, uint64_t probe_value, size_t bytes) {
  std::string text = absl::StrCat("default {\n", RuleText(kProbe, probe_value, ""));
  size_t bare = text.size() + 2;  // and "}\n"
  for (int n = 0; n < kRules; ++n) bare += RuleText(base + n, base + n, "").size();
  const size_t per_rule = bytes > bare ? (bytes - bare) / kRules : 0;
  constexpr size_t kCommentField = 16;  // `    comment: "` and `"\n`
  const size_t pad = per_rule > kCommentField ? per_rule - kCommentField : 0;
  // Printable, and nothing the printer escapes (no quote, apostrophe or
  // backslash), so the stored value has this text's size.
  const std::string filler = "generated filler to bring this layer near the request limit of etcd. ";
  std::string comment;
  while (comment.size() < pad) comment += filler;
  comment.resize(pad);
  for (int n = 0; n < kRules; ++n) text += RuleText(base + n, base + n, comment);
  text += "}\n";
  return text;
}

// The value of the first `value: N` in a layer's text.
std::optional<uint64_t> ValueIn(const std::string& text) {
  static const std::regex value(R"(value: (\d+))");
  std::smatch m;
  uint64_t n = 0;
  if (!std::regex_search(text, m, value) || !absl::SimpleAtoi(m[1].str(), &n)) return std::nullopt;
  return n;
}

class FleetLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    etcd_ = std::make_unique<EtcdCluster>(dir_);
    ASSERT_TRUE(etcd_->Start()) << "the etcd cluster did not come up; see " << dir_;
    hosts_ = ThreeFleetHosts(dir_, etcd_->Url());
    for (FleetHost& h : hosts_) {
      h.Start();
      ASSERT_FALSE(HasFatalFailure());
    }
    etcdc_ = etcd_->Client();
    ASSERT_NE(etcdc_, nullptr);
    // Every host has read etcd once (its first revision, no layer yet), so
    // what it applies next comes from the watch.
    ASSERT_TRUE(WaitFor(
        [&] {
          for (size_t i = 0; i < hosts_.size(); ++i) {
            if (Stats(i).fleet().applied_revision() <= 0) return false;
          }
          return true;
        },
        std::chrono::seconds(20)));
  }
  void TearDown() override {
    for (FleetHost& h : hosts_) h.Stop();
    etcdc_.reset();
    etcd_.reset();
    std::filesystem::remove_all(dir_);
  }

  // What a guest of domain 1 on host i reads from `msr`; -1 for #GP.
  int64_t Read(size_t i, uint32_t msr) { return hosts_[i].ReadMsr(1, msr); }

  v1::StatsResponse Stats(size_t i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::StatsResponse stats;
    grpc::Status s = hosts_[i].emulator->GetStats(&context, v1::StatsRequest(), &stats);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return stats;
  }

  // Each host's fleet state, for failure messages.
  std::string Describe() {
    std::vector<std::string> out;
    for (size_t i = 0; i < hosts_.size(); ++i) {
      const v1::FleetSelf self = Stats(i).fleet();
      out.push_back(absl::StrCat(hosts_[i].id, ": applied revision ", self.applied_revision(),
                                 self.has_last_error()
                                     ? absl::StrCat(", last error: ", self.last_error().message())
                                     : "",
                                 self.stale_since().empty() ? "" : ", stale"));
    }
    return absl::StrJoin(out, "; ");
  }

  // pvemuctl against host i.
  CommandRun Ctl(size_t i, const std::string& args) {
    return RunCommand(absl::StrCat(std::getenv("PVEMU_BUILD_ROOT"), "/client/pvemuctl --server=",
                                   hosts_[i].options.listen, " ", args));
  }

  std::string dir_;
  std::unique_ptr<EtcdCluster> etcd_;
  std::vector<FleetHost> hosts_;
  std::unique_ptr<fleet::EtcdClient> etcdc_;  // writes around pvemu, as etcdctl would
};

TEST_F(FleetLimitsTest, ValuesAtEtcdsSizeLimitReachEveryHost) {
  // Just under etcd's limit: the request carries the key and a few bytes
  // besides the value.
  constexpr size_t kValueBytes = kEtcdRequestLimit - (64 << 10);
  struct Big {
    std::string key;
    uint32_t base;
    uint64_t probe;
    std::string text;
    int64_t revision = 0;
  };
  std::vector<Big> layers = {{"/pvemu/policy/default", 0x60000000, 0xd0, "", 0},
                             {"/pvemu/policy/class/web", 0x61000000, 0xc0, "", 0},
                             {"/pvemu/policy/host/h1", 0x62000000, 0x10, "", 0}};
  size_t total = 0;
  for (Big& l : layers) {
    l.text = LayerText(l.base, l.probe, kValueBytes);
    ASSERT_LE(l.text.size(), kValueBytes);
    ASSERT_GT(l.text.size(), kValueBytes - 4096);
    total += l.text.size();
  }
  // h1 reads its three keys in one Txn: more than gRPC's default limit.
  ASSERT_GT(total, kGrpcDefaultReceive);

  const Clock::time_point began = Clock::now();
  for (Big& l : layers) {
    absl::StatusOr<int64_t> put = etcdc_->Put(l.key, l.text, 0, absl::Seconds(10));
    ASSERT_TRUE(put.ok()) << l.key << " (" << l.text.size() << " bytes): " << put.status();
    l.revision = *put;
  }
  const double writing = Since(began);
  const Clock::time_point last_put = Clock::now();

  // h1 has all three layers, h2 default and web, h3 default only.
  const std::vector<std::vector<size_t>> has = {{0, 1, 2}, {0, 1}, {0}};
  std::vector<double> converged(hosts_.size(), -1);
  WaitFor(
      [&] {
        bool all = true;
        for (size_t i = 0; i < hosts_.size(); ++i) {
          if (converged[i] >= 0) continue;
          if (Stats(i).fleet().applied_revision() >= layers[has[i].back()].revision) {
            converged[i] = Since(last_put);
          } else {
            all = false;
          }
        }
        return all;
      },
      std::chrono::seconds(60));
  std::printf("limits: 3 values of %zu, %zu and %zu bytes (etcd's limit: %zu) written in %.2f s; "
              "h1 reads %.2f MiB of layers in one Txn (gRPC's default limit: %.0f MiB)\n",
              layers[0].text.size(), layers[1].text.size(), layers[2].text.size(),
              kEtcdRequestLimit, writing, MiB(static_cast<double>(total)),
              MiB(kGrpcDefaultReceive));
  for (size_t i = 0; i < hosts_.size(); ++i) {
    size_t bytes = 0;
    for (size_t l : has[i]) bytes += layers[l].text.size();
    std::printf("limits: %s (%zu layers, %.2f MiB) applied revision %lld %.2f s after the last "
                "put\n",
                hosts_[i].id.c_str(), has[i].size(), MiB(static_cast<double>(bytes)),
                static_cast<long long>(layers[has[i].back()].revision), converged[i]);
  }
  std::fflush(stdout);

  for (size_t i = 0; i < hosts_.size(); ++i) {
    ASSERT_GE(converged[i], 0) << hosts_[i].id << " did not apply revision "
                               << layers[has[i].back()].revision << " within 60 s; "
                               << Describe();
    const v1::StatsResponse stats = Stats(i);
    EXPECT_FALSE(stats.fleet().has_last_error()) << stats.fleet().last_error().message();
    EXPECT_EQ(static_cast<uint64_t>(stats.fleet().applied_revision()), stats.generation());
    // The highest of the host's layers decides the probe, and the last rule
    // of every layer the host has is served: each value arrived whole.
    EXPECT_EQ(Read(i, kProbe), static_cast<int64_t>(layers[has[i].back()].probe))
        << hosts_[i].id;
    for (size_t l = 0; l < layers.size(); ++l) {
      const uint32_t last = layers[l].base + kRules - 1;
      const bool mine = std::find(has[i].begin(), has[i].end(), l) != has[i].end();
      if (mine) {
        EXPECT_EQ(Read(i, last), static_cast<int64_t>(last)) << hosts_[i].id << " " << layers[l].key;
      } else {
        EXPECT_NE(Read(i, last), static_cast<int64_t>(last)) << hosts_[i].id << " " << layers[l].key;
      }
    }
  }
}

TEST_F(FleetLimitsTest, AValueOverEtcdsLimitIsRefusedWithItsSize) {
  // A small good layer first: every host at its revision.
  v1::FleetApplyRequest small;
  small.set_layer("default");
  small.set_textproto(LayerText(0x60000000, 0x77, 0));
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::FleetEditResponse response;
    grpc::Status s = hosts_[0].fleet->ApplyLayer(&context, small, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(response.applied()) << response.not_applied();
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        for (size_t i = 0; i < hosts_.size(); ++i) {
          if (Read(i, kProbe) != 0x77) return false;
        }
        return true;
      },
      std::chrono::seconds(10)))
      << Describe();
  absl::StatusOr<fleet::RangeResult> before = etcdc_->Get("/pvemu/policy/default", "", 0,
                                                         absl::Seconds(5));
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->kvs.size(), 1u);
  std::vector<int64_t> applied;
  std::vector<uint64_t> generation;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const v1::StatsResponse stats = Stats(i);
    applied.push_back(stats.fleet().applied_revision());
    generation.push_back(stats.generation());
  }

  // The message names the value's size (this text and the edit's header
  // line), etcd's limit, that nothing was written and what to do.
  const auto check_message = [&](const std::string& message, const std::string& text) {
    EXPECT_THAT(message, HasSubstr("/pvemu/policy/default"));
    EXPECT_THAT(message, HasSubstr("--max-request-bytes"));
    EXPECT_THAT(message, HasSubstr("nothing was written"));
    EXPECT_THAT(message, HasSubstr("Split the layer"));
    EXPECT_THAT(message, ::testing::Not(HasSubstr("outcome unknown")));
    static const std::regex size(R"(is (\d+) bytes)");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(message, m, size)) << message;
    const size_t named = std::stoull(m[1].str());
    EXPECT_GE(named, text.size()) << message;
    EXPECT_LE(named, text.size() + 1024) << message;
  };

  // Over etcd's limit by 200 KiB: etcd's own check refuses it ("etcdserver:
  // request is too large", INVALID_ARGUMENT).
  const std::string over = LayerText(0x60000000, 0x99, kEtcdRequestLimit + (200 << 10));
  ASSERT_GT(over.size(), kEtcdRequestLimit + (190 << 10));
  {
    v1::FleetApplyRequest request;
    request.set_layer("default");
    request.set_textproto(over);
    request.set_source_name("over.textproto");
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::FleetEditResponse response;
    const Clock::time_point sent = Clock::now();
    grpc::Status s = hosts_[0].fleet->ApplyLayer(&context, request, &response);
    std::printf("limits: an edit of %zu bytes answered in %.2f s: %s: %s\n", over.size(),
                Since(sent), s.ok() ? "OK" : "refused", s.error_message().c_str());
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    check_message(s.error_message(), over);
  }

  // 3 MiB, past etcd's gRPC server's own limit (--max-request-bytes + 512
  // KiB: RESOURCE_EXHAUSTED), but under pvemud's 4 MiB: through pvemuctl,
  // as the operator sees it.
  const std::string far_over = LayerText(0x60000000, 0x99, 3 << 20);
  const std::string file = dir_ + "/far-over.textproto";
  std::ofstream(file, std::ios::trunc) << far_over;
  {
    const Clock::time_point sent = Clock::now();
    CommandRun r = Ctl(0, "fleet apply -f " + file + " --layer=default");
    std::printf("limits: `fleet apply` of %zu bytes answered in %.2f s, exit %d: %s",
                far_over.size(), Since(sent), r.status, r.output.c_str());
    EXPECT_EQ(r.status, 1) << r.output;
    check_message(r.output, far_over);
  }
  std::fflush(stdout);

  // Nothing was written, and no host moved.
  absl::StatusOr<fleet::RangeResult> after = etcdc_->Get("/pvemu/policy/default", "", 0,
                                                        absl::Seconds(5));
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->kvs.size(), 1u);
  EXPECT_EQ(after->kvs[0].mod_revision, before->kvs[0].mod_revision);
  EXPECT_EQ(after->kvs[0].value, before->kvs[0].value);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const v1::StatsResponse stats = Stats(i);
    EXPECT_EQ(stats.fleet().applied_revision(), applied[i]) << hosts_[i].id;
    EXPECT_EQ(stats.generation(), generation[i]) << hosts_[i].id;
    EXPECT_FALSE(stats.fleet().has_last_error()) << stats.fleet().last_error().message();
    EXPECT_EQ(Read(i, kProbe), 0x77) << hosts_[i].id;
  }
}

TEST_F(FleetLimitsTest, ThousandsOfRevisionsASecondConvergeWithBoundedMemory) {
  // One layer every host reads, put as fast as etcd takes it by several
  // writers: each host's watcher gets revisions faster than it can read and
  // apply them one by one.
  const std::string key = "/pvemu/policy/default";
  constexpr uint32_t kMsr = 0x6fff1000;
  constexpr int kWriters = 8;
  constexpr int kRevisions = 5000;
  constexpr auto kWriteFor = std::chrono::seconds(5);
  constexpr auto kConverge = std::chrono::seconds(15);
  // What the run may leave resident: glibc arenas of the writer threads,
  // gRPC's buffers, the test's record of what it wrote and saw (well under
  // 1 MiB). A leak of 2 KiB for each revision each host is sent (3 x 5,000)
  // is 30 MiB; a composed policy kept per revision is far more.
  constexpr double kResidentBoundKiB = 32 * 1024;
  const auto layer = [&](uint64_t value) {
    return absl::StrCat("default {\n", RuleText(kMsr, value, ""), "}\n");
  };

  // Every policy each host publishes: its generation and the rule's value.
  struct Published {
    uint64_t generation;
    std::optional<uint64_t> value;
  };
  absl::Mutex mu;
  std::vector<std::vector<Published>> published(hosts_.size());
  std::map<int64_t, uint64_t> written;  // revision -> value, from the puts' answers
  std::atomic<bool> stop{false};
  std::vector<std::thread> observers;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    observers.emplace_back([&, i] {
      auto stub = v1::KvmService::NewStub(hosts_[i].channel);
      while (!stop) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
        v1::SubscribePolicyRequest request;
        request.set_domain(1);
        auto stream = stub->SubscribePolicy(&context, request);
        v1::PolicyUpdate update;
        while (!stop && stream->Read(&update)) {
          Published p{update.generation(), std::nullopt};
          for (const v1::MsrRule& r : update.policy().default_().msr()) {
            if (r.msr() == Hex(kMsr)) p.value = r.value();
          }
          absl::MutexLock lock(&mu);
          published[i].push_back(p);
        }
        context.TryCancel();
        stream->Finish().IgnoreError();
      }
    });
  }
  // The observers end with the test, however it ends.
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (std::thread& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{stop, observers};

  struct Run {
    int puts = 0, failed = 0;
    double seconds = 0;
    std::string first_error;
  };
  // Puts up to `count` revisions (values value_base + 1 ...) for at most
  // `limit` with kWriters threads.
  const auto write = [&](int count, uint64_t value_base, std::chrono::seconds limit) {
    std::atomic<int> next{0}, puts{0}, failed{0};
    std::string first_error;
    const Clock::time_point began = Clock::now();
    const Clock::time_point deadline = began + limit;
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&] {
        while (Clock::now() < deadline) {
          const int n = next++;
          if (n >= count) break;
          const uint64_t value = value_base + n + 1;
          absl::StatusOr<int64_t> put = etcdc_->Put(key, layer(value), 0, absl::Seconds(5));
          absl::MutexLock lock(&mu);
          if (put.ok()) {
            written[*put] = value;
            ++puts;
          } else {
            if (failed++ == 0) first_error = std::string(put.status().message());
          }
        }
      });
    }
    for (std::thread& t : writers) t.join();
    return Run{puts.load(), failed.load(), Since(began), first_error};
  };
  // Every host serves the key as etcd holds it now, at exactly its
  // revision; the seconds that took, or -1.
  struct Now {
    int64_t revision = 0;
    uint64_t value = 0;
  };
  const auto converge = [&](Now* now) {
    const Clock::time_point from = Clock::now();
    absl::StatusOr<fleet::RangeResult> read = etcdc_->Get(key, "", 0, absl::Seconds(5));
    EXPECT_TRUE(read.ok()) << read.status();
    if (!read.ok() || read->kvs.size() != 1) return -1.0;
    now->revision = read->kvs[0].mod_revision;
    std::optional<uint64_t> value = ValueIn(read->kvs[0].value);
    EXPECT_TRUE(value.has_value()) << read->kvs[0].value;
    now->value = value.value_or(0);
    const bool done = WaitFor(
        [&] {
          for (size_t i = 0; i < hosts_.size(); ++i) {
            if (Stats(i).fleet().applied_revision() != now->revision ||
                Read(i, kMsr) != static_cast<int64_t>(now->value)) {
              return false;
            }
          }
          return true;
        },
        kConverge);
    return done ? Since(from) : -1.0;
  };

  // A warm-up, so that the figures below leave out what a first burst
  // allocates once (the writers' arenas, connections to each member).
  const Run warm = write(200, 0, kWriteFor);
  ASSERT_GT(warm.puts, 0) << warm.first_error;
  Now now;
  ASSERT_GE(converge(&now), 0) << "after the warm-up: " << Describe();

  std::vector<uint64_t> edits_before;
  for (size_t i = 0; i < hosts_.size(); ++i) edits_before.push_back(Stats(i).edits());
  const double rss_before = ResidentKiB();
  const Run run = write(kRevisions, 1'000'000, kWriteFor);
  const double converged = converge(&now);
  const double rss_after = ResidentKiB();
  std::vector<uint64_t> applies;
  for (size_t i = 0; i < hosts_.size(); ++i) applies.push_back(Stats(i).edits() - edits_before[i]);
  stop = true;
  for (std::thread& t : observers) t.join();

  std::printf("limits: %d revisions of %s by %d writers in %.2f s: %.0f revisions/s (%d puts "
              "failed%s%s)\n",
              run.puts, key.c_str(), kWriters, run.seconds, run.puts / run.seconds, run.failed,
              run.failed > 0 ? ", the first: " : "", run.first_error.c_str());
  std::printf("limits: every host at revision %lld (value %llu) %.2f s after the last put; "
              "applies: %s %llu, %s %llu, %s %llu\n",
              static_cast<long long>(now.revision), static_cast<unsigned long long>(now.value),
              converged, hosts_[0].id.c_str(), static_cast<unsigned long long>(applies[0]),
              hosts_[1].id.c_str(), static_cast<unsigned long long>(applies[1]),
              hosts_[2].id.c_str(), static_cast<unsigned long long>(applies[2]));
  std::printf("limits: resident memory %.0f KiB before, %.0f KiB after: %+.1f MiB (bound %.0f "
              "MiB%s)\n",
              rss_before, rss_after, (rss_after - rss_before) / 1024, kResidentBoundKiB / 1024,
              kResidentMemoryMeasurable ? "" : "; not checked under AddressSanitizer");
  std::fflush(stdout);

  EXPECT_GE(run.puts, 1000) << "etcd took only " << run.puts << " revisions in " << run.seconds
                            << " s: too few to load the watchers (a slow disk for etcd's WAL?)";
  ASSERT_GE(converged, 0) << "not every host at revision " << now.revision << " (value "
                          << now.value << ") within 15 s of the last put; " << Describe();
  if (run.failed == 0) {
    // The last value written is the one with the highest revision.
    absl::MutexLock lock(&mu);
    ASSERT_FALSE(written.empty());
    EXPECT_EQ(written.rbegin()->first, now.revision);
    EXPECT_EQ(written.rbegin()->second, now.value);
  }
  for (size_t i = 0; i < hosts_.size(); ++i) {
    const v1::StatsResponse stats = Stats(i);
    EXPECT_EQ(stats.fleet().applied_revision(), now.revision) << hosts_[i].id;
    EXPECT_EQ(stats.generation(), static_cast<uint64_t>(now.revision)) << hosts_[i].id;
    EXPECT_FALSE(stats.fleet().has_last_error()) << stats.fleet().last_error().message();
  }
  if (kResidentMemoryMeasurable) {
    EXPECT_LT(rss_after - rss_before, kResidentBoundKiB)
        << "resident memory grew by " << (rss_after - rss_before) << " KiB over " << run.puts
        << " revisions";
  }

  // Every policy a host published while the layer existed is the layer as
  // etcd held it at that generation (a whole revision etcd had), and
  // generations only moved forward.
  std::map<int64_t, uint64_t> at = [&] {
    absl::MutexLock lock(&mu);
    return written;
  }();
  const int64_t first_written = at.empty() ? 0 : at.begin()->first;
  size_t checked = 0, wrong = 0;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    std::vector<Published> seen;
    {
      absl::MutexLock lock(&mu);
      seen = published[i];
    }
    uint64_t last = 0;
    for (const Published& p : seen) {
      if (p.generation < last) {
        ADD_FAILURE() << hosts_[i].id << " published generation " << p.generation << " after "
                      << last;
      }
      last = p.generation;
      if (static_cast<int64_t>(p.generation) < first_written) continue;
      const int64_t g = static_cast<int64_t>(p.generation);
      if (at.find(g) == at.end()) {
        // A put whose answer was lost may still have been committed: ask etcd.
        absl::StatusOr<fleet::RangeResult> then = etcdc_->Get(key, "", g, absl::Seconds(5));
        std::optional<uint64_t> v;
        if (then.ok() && then->kvs.size() == 1) v = ValueIn(then->kvs[0].value);
        at[g] = v.value_or(~uint64_t{0});
      }
      ++checked;
      if (p.value != at[g] && ++wrong <= 5) {
        ADD_FAILURE() << hosts_[i].id << " published generation " << g << " with "
                      << (p.value.has_value() ? absl::StrCat(*p.value) : "no rule for the MSR")
                      << "; etcd at that revision holds " << at[g];
      }
    }
  }
  std::printf("limits: %zu published policies checked against etcd, %zu wrong\n", checked, wrong);
  EXPECT_GT(checked, 0u);
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace pvemu::testing
