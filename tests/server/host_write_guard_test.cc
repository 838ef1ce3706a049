// The two-key rule for host MSR writes (DESIGN.md, "Security"): a guest
// WRMSR reaches the host only if the deciding rule says allow_host_write AND
// the daemon was started with host writes enabled. Tried for every MSR the
// catalog names plus every rule's targets, on every shipped policy and host
// profile, for the hardware domain and an ordinary one.
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "emulator/trap.h"
#include "gtest/gtest.h"
#include "x86/msr_catalog.h"
#include "policy/loader.h"
#include "policy/rule_target.h"
#include "policy/shipped.h"
#include "hosts/profiles.h"
#include "policy/store.h"
#include "base/textproto.h"
#include "dispatch/dispatch.h"
#include "hosts/sim_host.h"

namespace pvemu::testing {
namespace {

// Passes everything to the sim host and counts the writes that reach it.
class CountingHost final : public emulator::Host {
 public:
  explicit CountingHost(std::unique_ptr<hosts::SimHost> inner) : inner_(std::move(inner)) {}
  v1::Vendor vendor() const override { return inner_->vendor(); }
  absl::string_view description() const override { return inner_->description(); }
  uint64_t tsc_khz() const override { return inner_->tsc_khz(); }
  bool ReadMsr(uint32_t cpu, uint32_t index, uint64_t* value) override {
    return inner_->ReadMsr(cpu, index, value);
  }
  bool WriteMsr(uint32_t cpu, uint32_t index, uint64_t value) override {
    written.insert(index);
    return inner_->WriteMsr(cpu, index, value);
  }
  emulator::CpuidRegs Cpuid(uint32_t leaf, uint32_t subleaf) override {
    return inner_->Cpuid(leaf, subleaf);
  }
  std::set<uint32_t> written;

 private:
  std::unique_ptr<hosts::SimHost> inner_;
};

TEST(HostWriteGuardTest, NoHostWriteWithoutBothKeys) {
  int attempts = 0;
  size_t writes_with_both_keys = 0;
  for (absl::string_view policy_name : policy::ShippedPolicyNames()) {
    for (absl::string_view profile_name : hosts::ShippedProfileNames()) {
      SCOPED_TRACE(absl::StrCat(policy_name, " on ", profile_name));
      v1::HostProfile profile;
      ASSERT_TRUE(ParseTextProto(hosts::ShippedProfile(profile_name), profile_name, &profile).ok());
      auto loaded = policy::ParsePolicy(policy::ShippedPolicy(policy_name), policy_name);
      ASSERT_TRUE(loaded.ok()) << loaded.status();

      // Every MSR worth trying: the catalog and every rule's first/last.
      std::set<uint32_t> msrs;
      for (const auto& info : x86::MsrCatalog()) msrs.insert(info.index);
      std::vector<const v1::Layer*> layers = {&loaded->policy.default_()};
      for (const auto& d : loaded->policy.domain()) layers.push_back(&d);
      for (const v1::Layer* layer : layers) {
        for (const v1::MsrRule& rule : layer->msr()) {
          auto target = policy::ResolveTarget(rule);
          ASSERT_TRUE(target.ok());
          msrs.insert(target->first);
          msrs.insert(target->last);
        }
      }

      for (bool daemon_allows : {false, true}) {
        auto host = std::make_unique<CountingHost>(
            std::move(hosts::SimHost::Create(profile, profile_name)).value());
        auto store = std::move(policy::Store::FromPolicy(loaded->policy, loaded->source,
                                                          host->vendor()))
                         .value();
        dispatch::DispatchOptions options;
        options.allow_host_writes = daemon_allows;
        dispatch::Dispatcher dispatcher(*store, *host, nullptr, options);
        auto session = dispatcher.NewSession();
        std::set<uint32_t> allowed;  // MSRs whose rule holds the first key
        for (uint32_t domain : {0u, 5u}) {
          const policy::DomainSnapshot& snap = store->Current()->ForDomain(domain);
          for (uint32_t msr : msrs) {
            const policy::MsrEntry& e = snap.Lookup(msr);
            if (e.write == v1::WriteAction::PASSTHROUGH && e.allow_host_write) allowed.insert(msr);
            emulator::Trap trap;
            trap.domain = domain;
            trap.insn[0] = 0x0f;
            trap.insn[1] = 0x30;
            trap.insn_len = 2;
            trap.regs.gpr[emulator::kRcx] = msr;
            trap.regs.gpr[emulator::kRax] = 0;  // a value every mask accepts
            session->Handle(trap);
            ++attempts;
          }
        }
        if (!daemon_allows) {
          EXPECT_TRUE(host->written.empty())
              << "host MSR 0x" << std::hex << *host->written.begin()
              << " written with --allow-host-writes off";
        } else {
          writes_with_both_keys += host->written.size();
          for (uint32_t msr : host->written) {
            EXPECT_TRUE(allowed.count(msr))
                << "host MSR 0x" << std::hex << msr << " written without allow_host_write";
          }
        }
      }
    }
  }
  // With both keys some writes must go through (the Intel hardware domain's
  // ENERGY_PERF_BIAS), or the guard above is checking a path never taken.
  EXPECT_GT(writes_with_both_keys, 0u);
  std::printf("%d guest WRMSRs tried, %zu host writes with both keys\n", attempts,
              writes_with_both_keys);
}

}  // namespace
}  // namespace pvemu::testing
