// Fleet mode's soak: many edits with random etcd
// member kills and pvemud restarts in between, against a real 3-member etcd
// cluster and three fleet-mode pvemud in process (h1 web Intel, h2 web+gpu
// Intel, h3 gpu AMD).
//
// Edit i sets its own MSR (kSoakBase + i) to its own value (kValueBase + i)
// in a random layer, through a random host. Checked:
//   - every edit etcd committed (acknowledged, or "outcome unknown" and
//     found in etcd) is served, by trap, on every host whose layers include
//     it, and on no other; an edit refused with "nothing was written" is in
//     no layer;
//   - no host ever served a mix of two revisions: every policy a host
//     published (KvmService.SubscribePolicy: generation and whole policy,
//     one snapshot) and every trap answer (Outcome.generation) carries
//     exactly the soak rules of that host's layers as etcd held them at
//     that revision (a Range at `revision`), read independently of pvemud.
//
// PVEMU_FLEET_SOAK_EDITS sets the number of edits (default 30: suite
// `fleet`; suite `slow` runs 200). PVEMU_FLEET_SOAK_SEED replays a run.
#include <google/protobuf/text_format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "fleet/etcd_client.h"
#include "fleet/keys.h"
#include "tests/fleet/etcd_cluster.h"
#include "tests/fleet/fleet_hosts.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

constexpr uint32_t kSoakBase = 0x60000000;  // an MSR no catalog or base policy names
constexpr uint64_t kValueBase = 0x5000;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int n = 0;
  return v != nullptr && absl::SimpleAtoi(v, &n) ? n : fallback;
}

// "0x60000005" or "1610612741" -> the number; nullopt for a name.
std::optional<uint32_t> MsrNumber(const std::string& text) {
  uint32_t n = 0;
  if (absl::StartsWithIgnoreCase(text, "0x")) {
    if (absl::SimpleHexAtoi(text.substr(2), &n)) return n;
    return std::nullopt;
  }
  if (absl::SimpleAtoi(text, &n)) return n;
  return std::nullopt;
}

std::string HexOf(uint64_t n) { return absl::StrCat("0x", absl::Hex(n)); }

// The soak rules (MSR -> CONST value) in a policy's default layer.
using SoakRules = std::map<uint32_t, uint64_t>;
SoakRules SoakRulesOf(const v1::Policy& policy) {
  SoakRules rules;
  for (const v1::MsrRule& r : policy.default_().msr()) {
    std::optional<uint32_t> msr = MsrNumber(r.msr());
    if (msr.has_value() && *msr >= kSoakBase && *msr < kSoakBase + 100000) {
      rules[*msr] = r.value();
    }
  }
  return rules;
}

// One published policy or one trap answer, as a host served it.
struct Served {
  size_t host;
  uint64_t generation;
  SoakRules rules;                 // a published policy: its soak rules
  std::optional<uint32_t> probed;  // a trap: the MSR read ...
  std::optional<uint64_t> value;   // ... and what it read (nullopt: not a CONST read)
};

enum class Outcome { kCommitted, kNotWritten, kUnknown };

struct Edit {
  std::string layer;
  uint32_t msr;
  uint64_t value;
  Outcome outcome;
  std::string error;
};

class FleetSoakTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    etcd_ = std::make_unique<EtcdCluster>(dir_);
    ASSERT_TRUE(etcd_->Start()) << "the etcd cluster did not come up; see " << dir_;
    hosts_ = ThreeFleetHosts(dir_, etcd_->Url());
    for (size_t i = 0; i < hosts_.size(); ++i) StartHost(i);
    oracle_ = etcd_->Client();
    ASSERT_NE(oracle_, nullptr);
  }
  void TearDown() override {
    StopObservers();
    for (size_t i = 0; i < hosts_.size(); ++i) StopHost(i);
    etcd_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartHost(size_t i) { hosts_[i].Start(); }
  void StopHost(size_t i) { hosts_[i].Stop(); }

  // Per host: one thread records every policy the host publishes, one
  // probes traps on the soak MSRs issued so far. Both outlive restarts
  // (a fresh channel per attempt).
  void StartObservers() {
    for (size_t i = 0; i < hosts_.size(); ++i) {
      observers_.emplace_back([this, i] {
        const std::string target = hosts_[i].options.listen;
        while (!stop_) {
          auto stub = v1::KvmService::NewStub(
              grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
          v1::SubscribePolicyRequest request;
          request.set_domain(1);
          auto stream = stub->SubscribePolicy(&context, request);
          v1::PolicyUpdate update;
          while (!stop_ && stream->Read(&update)) {
            Record(Served{i, update.generation(), SoakRulesOf(update.policy()), {}, {}});
          }
          context.TryCancel();
          stream->Finish().IgnoreError();
          if (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      });
      observers_.emplace_back([this, i] {
        const std::string target = hosts_[i].options.listen;
        std::mt19937 rng(static_cast<uint32_t>(i));
        auto stub = v1::EmulatorService::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
        int failures = 0;
        while (!stop_) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          const int issued = issued_.load();
          if (issued == 0) continue;
          const uint32_t msr = kSoakBase + static_cast<uint32_t>(rng() % issued);
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
          v1::Outcome outcome;
          if (!stub->Emulate(&context, RdmsrTrap(1, msr), &outcome).ok()) {
            // A restart: a new channel, without gRPC's reconnect backoff.
            if (++failures % 5 == 0) {
              stub = v1::EmulatorService::NewStub(
                  grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
            }
            continue;
          }
          std::optional<uint64_t> value;
          if (outcome.kind() == v1::Outcome::COMPLETED) {
            value = (outcome.regs().rdx() << 32) | (outcome.regs().rax() & 0xffffffff);
          }
          Record(Served{i, outcome.generation(), {}, msr, value});
        }
      });
    }
  }
  void StopObservers() {
    stop_ = true;
    for (std::thread& t : observers_) t.join();
    observers_.clear();
  }
  void Record(Served s) {
    absl::MutexLock lock(&served_mu_);
    served_.push_back(std::move(s));
  }

  // Host i's soak rules as etcd held its layers at `revision`.
  absl::StatusOr<SoakRules> EtcdRulesAt(size_t i, int64_t revision) {
    // Generation 0: the base policy, before any revision.
    if (revision == 0) return SoakRules();
    const auto cached = etcd_at_.find({i, revision});
    if (cached != etcd_at_.end()) return cached->second;
    const std::string prefix = "/pvemu/policy/";
    absl::StatusOr<fleet::RangeResult> range = absl::UnknownError("not read");
    for (int attempt = 0; attempt < 5 && !range.ok(); ++attempt) {
      range = oracle_->Get(prefix, fleet::PrefixEnd(prefix), revision, absl::Seconds(5));
    }
    if (!range.ok()) return range.status();
    std::set<std::string> mine = {"/pvemu/policy/default", "/pvemu/policy/host/" + hosts_[i].id};
    for (const std::string& c : hosts_[i].classes) mine.insert("/pvemu/policy/class/" + c);
    SoakRules rules;
    for (const fleet::KeyValue& kv : range->kvs) {
      if (!mine.contains(kv.key)) continue;
      v1::Policy policy;
      if (!google::protobuf::TextFormat::ParseFromString(kv.value, &policy)) {
        return absl::DataLossError(absl::StrCat(kv.key, " at revision ", revision,
                                                " does not parse: ", kv.value));
      }
      for (const auto& [msr, value] : SoakRulesOf(policy)) rules[msr] = value;
    }
    etcd_at_[{i, revision}] = rules;
    return rules;
  }

  // What host i reads from `msr`; nullopt for anything but a completed read.
  std::optional<uint64_t> Read(size_t i, uint32_t msr) {
    auto stub = v1::EmulatorService::NewStub(
        grpc::CreateChannel(hosts_[i].options.listen, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::Outcome outcome;
    if (!stub->Emulate(&context, RdmsrTrap(1, msr), &outcome).ok()) return std::nullopt;
    if (outcome.kind() != v1::Outcome::COMPLETED) return std::nullopt;
    return (outcome.regs().rdx() << 32) | (outcome.regs().rax() & 0xffffffff);
  }

  bool InScope(size_t i, const std::string& layer) const {
    if (layer == "default") return true;
    if (layer == "host:" + hosts_[i].id) return true;
    for (const std::string& c : hosts_[i].classes) {
      if (layer == "class:" + c) return true;
    }
    return false;
  }

  std::string dir_;
  std::unique_ptr<EtcdCluster> etcd_;
  std::vector<FleetHost> hosts_;
  std::unique_ptr<fleet::EtcdClient> oracle_;
  std::map<std::pair<size_t, int64_t>, SoakRules> etcd_at_;

  std::atomic<bool> stop_{false};
  std::atomic<int> issued_{0};
  std::vector<std::thread> observers_;
  absl::Mutex served_mu_;
  std::vector<Served> served_ ABSL_GUARDED_BY(served_mu_);
};

TEST_F(FleetSoakTest, EditsWithMemberKillsAndRestartsAreAllServedAndNoHostServesAMixedRevision) {
  const int edits = EnvInt("PVEMU_FLEET_SOAK_EDITS", 30);
  const uint32_t seed =
      static_cast<uint32_t>(EnvInt("PVEMU_FLEET_SOAK_SEED", static_cast<int>(time(nullptr))));
  std::printf("soak: %d edits, PVEMU_FLEET_SOAK_SEED=%u\n", edits, seed);
  std::fflush(stdout);  // before etcd members fork
  std::mt19937 rng(seed);
  // 200 edits take about a minute here; the bound leaves room for a slow CI.
  const auto budget = std::chrono::seconds(30 + edits);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string> layers = {"default", "class:web", "class:gpu",
                                           "host:h1", "host:h2",   "host:h3"};
  StartObservers();

  std::vector<size_t> down;  // etcd members killed and not yet restarted
  std::vector<Edit> done;
  int member_kills = 0, host_restarts = 0, quorum_losses = 0;
  for (int n = 0; n < edits; ++n) {
    ASSERT_LT(std::chrono::steady_clock::now() - start, budget)
        << "the soak ran out of time after " << n << " edits";
    // Between edits: now and then kill a member (one, so edits go on;
    // rarely a second, so that an edit fails with quorum lost), restart
    // what is down, or restart a pvemud.
    const int dice = static_cast<int>(rng() % 100);
    if (dice < 12 && down.size() < 1) {
      const size_t m = rng() % 3;
      etcd_->KillMember(m);
      down.push_back(m);
      ++member_kills;
    } else if (dice < 13 && down.size() == 1) {
      size_t m = (down[0] + 1 + rng() % 2) % 3;
      etcd_->KillMember(m);
      down.push_back(m);
      ++member_kills;
      ++quorum_losses;
    } else if (dice < 30 && !down.empty()) {
      for (size_t m : down) etcd_->StartMember(m);
      down.clear();
    } else if (dice < 38) {
      const size_t h = rng() % hosts_.size();
      StopHost(h);
      StartHost(h);
      ++host_restarts;
    }

    Edit e;
    e.layer = layers[rng() % layers.size()];
    e.msr = kSoakBase + static_cast<uint32_t>(n);
    e.value = kValueBase + static_cast<uint64_t>(n);
    v1::FleetRuleRequest request;
    request.set_layer(e.layer);
    request.mutable_rule()->set_msr(absl::StrCat("0x", absl::Hex(e.msr)));
    request.mutable_rule()->set_read(v1::ReadAction::CONST);
    request.mutable_rule()->set_value(e.value);
    issued_ = n + 1;
    const size_t via = rng() % hosts_.size();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::FleetEditResponse response;
    grpc::Status s = hosts_[via].fleet->SetRule(&context, request, &response);
    if (s.ok()) {
      e.outcome = Outcome::kCommitted;
    } else if (s.error_code() == grpc::StatusCode::UNKNOWN ||
               s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      e.outcome = Outcome::kUnknown;
      e.error = s.error_message();
    } else {
      e.outcome = Outcome::kNotWritten;
      e.error = s.error_message();
      EXPECT_NE(s.error_code(), grpc::StatusCode::ABORTED)
          << "edit " << n << ": one editor cannot lose a race: " << s.error_message();
    }
    done.push_back(e);
    if (down.size() >= 2) {
      // Quorum back after one edit: an edit without quorum takes up to
      // 10 s to fail, and the soak is bounded.
      for (size_t m : down) etcd_->StartMember(m);
      down.clear();
    }
  }
  for (size_t m : down) etcd_->StartMember(m);
  ASSERT_TRUE(etcd_->WaitHealthy(std::chrono::seconds(20)));

  // The final state, read from etcd: which edits are there.
  absl::StatusOr<fleet::RangeResult> now = absl::UnknownError("not read");
  for (int attempt = 0; attempt < 10 && !now.ok(); ++attempt) {
    now = oracle_->Get("/pvemu/policy/", fleet::PrefixEnd("/pvemu/policy/"), 0,
                       absl::Seconds(5));
    if (!now.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(now.ok()) << now.status();
  std::map<uint32_t, std::string> in_etcd;  // soak MSR -> the layer key holding it
  for (const fleet::KeyValue& kv : now->kvs) {
    v1::Policy policy;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kv.value, &policy)) << kv.key;
    for (const auto& [msr, value] : SoakRulesOf(policy)) in_etcd[msr] = kv.key;
  }
  int committed = 0, not_written = 0, unknown = 0;
  for (const Edit& e : done) {
    const bool present = in_etcd.contains(e.msr);
    switch (e.outcome) {
      case Outcome::kCommitted:
        ++committed;
        EXPECT_TRUE(present) << "acknowledged edit of " << HexOf(e.msr) << " in "
                             << e.layer << " is not in etcd";
        break;
      case Outcome::kNotWritten:
        ++not_written;
        EXPECT_FALSE(present) << "edit of " << HexOf(e.msr) << " in " << e.layer
                              << " failed (" << e.error << ") but is in etcd";
        break;
      case Outcome::kUnknown:
        ++unknown;
        break;
    }
  }
  std::printf("soak: %d committed, %d not written, %d outcome unknown; %d member kills "
              "(%d quorum losses), %d pvemud restarts\n",
              committed, not_written, unknown, member_kills, quorum_losses, host_restarts);
  EXPECT_GT(committed, edits / 2) << "too few edits committed for the soak to mean much";

  // Every edit in etcd is served on every host whose layers include it,
  // and on no other (within 15 s of etcd's return).
  for (size_t i = 0; i < hosts_.size(); ++i) {
    std::vector<std::string> wrong;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    do {
      wrong.clear();
      for (const Edit& e : done) {
        const bool want = in_etcd.contains(e.msr) && InScope(i, e.layer);
        const std::optional<uint64_t> got = Read(i, e.msr);
        if (want != (got == e.value)) {
          wrong.push_back(absl::StrCat("0x", absl::Hex(e.msr), " (", e.layer, ")"));
        }
      }
      if (!wrong.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } while (!wrong.empty() && std::chrono::steady_clock::now() < deadline);
    EXPECT_TRUE(wrong.empty()) << hosts_[i].id << " serves wrongly: "
                               << absl::StrJoin(wrong, ", ");
  }
  StopObservers();

  // Every policy and trap answer a host served matches its layers as etcd
  // held them at exactly that generation's revision.
  std::vector<Served> served;
  {
    absl::MutexLock lock(&served_mu_);
    served.swap(served_);
  }
  size_t policies = 0, traps = 0, mixed = 0;
  std::set<std::pair<size_t, uint64_t>> generations;
  for (const Served& s : served) {
    generations.insert({s.host, s.generation});
    absl::StatusOr<SoakRules> want = EtcdRulesAt(s.host, static_cast<int64_t>(s.generation));
    ASSERT_TRUE(want.ok()) << want.status();
    if (!s.probed.has_value()) {
      ++policies;
      if (s.rules != *want && ++mixed <= 5) {
        ADD_FAILURE() << hosts_[s.host].id << " published generation " << s.generation
                      << " with " << s.rules.size() << " soak rules; etcd at that revision has "
                      << want->size();
      }
      continue;
    }
    ++traps;
    const auto it = want->find(*s.probed);
    const bool ok = it == want->end() ? s.value != kValueBase + (*s.probed - kSoakBase)
                                      : s.value == it->second;
    if (!ok && ++mixed <= 5) {
      ADD_FAILURE() << hosts_[s.host].id << " answered a read of " << HexOf(*s.probed)
                    << " at generation " << s.generation << " with "
                    << (s.value.has_value() ? absl::StrCat("0x", absl::Hex(*s.value)) : "no value")
                    << "; etcd at that revision says "
                    << (it == want->end() ? "no rule" : absl::StrCat("0x", absl::Hex(it->second)));
    }
  }
  std::printf("soak: checked %zu published policies and %zu trap answers at %zu (host, "
              "generation) pairs against etcd; %zu mismatches; %.1f s\n",
              policies, traps, generations.size(), mixed,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_EQ(mixed, 0u);
  EXPECT_GT(policies, static_cast<size_t>(committed)) << "too few published policies seen";
  EXPECT_GT(traps, static_cast<size_t>(edits)) << "too few trap answers seen";
  EXPECT_LT(std::chrono::steady_clock::now() - start, budget);
}

}  // namespace
}  // namespace pvemu::testing
