// A real dispatcher on the sim Intel host (the shipped Xeon E-2136 profile)
// with the shipped default policy, for tests of the trap path and of what
// counts it (dispatch, metrics).
#ifndef PVEMU_TESTS_DISPATCH_DISPATCHER_FIXTURE_H_
#define PVEMU_TESTS_DISPATCH_DISPATCHER_FIXTURE_H_

#include <memory>

#include "base/textproto.h"
#include "dispatch/dispatch.h"
#include "gtest/gtest.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "policy/store.h"
#include "hosts/profiles.h"
#include "hosts/sim_host.h"

namespace pvemu::testing {

// The sim Intel host, the shipped default policy compiled for it, and a
// dispatcher on the two, for tests that need several (or none of a fixture's).
struct DefaultWorld {
  std::unique_ptr<hosts::SimHost> host;
  std::unique_ptr<policy::Store> store;
  std::unique_ptr<dispatch::Dispatcher> dispatcher;
};

inline DefaultWorld MakeDefaultWorld(const dispatch::DispatchOptions& options = {}) {
  DefaultWorld world;
  v1::HostProfile profile;
  EXPECT_TRUE(ParseTextProto(hosts::ShippedProfile("intel-xeon-e-2136"), "intel", &profile).ok());
  world.host = std::move(hosts::SimHost::Create(profile, "intel")).value();
  auto loaded = policy::ParsePolicy(policy::ShippedPolicy("default"), "default.textproto");
  world.store =
      std::move(policy::Store::FromPolicy(loaded.value().policy, loaded->source, v1::INTEL)).value();
  world.dispatcher =
      std::make_unique<dispatch::Dispatcher>(*world.store, *world.host, nullptr, options);
  return world;
}

class DefaultDispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DefaultWorld world = MakeDefaultWorld(Options());
    host_ = std::move(world.host);
    store_ = std::move(world.store);
    dispatcher_ = std::move(world.dispatcher);
  }
  // The dispatcher's options; the defaults unless a test says otherwise.
  virtual dispatch::DispatchOptions Options() const { return dispatch::DispatchOptions(); }

  std::unique_ptr<hosts::SimHost> host_;
  std::unique_ptr<policy::Store> store_;
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
};

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_DISPATCH_DISPATCHER_FIXTURE_H_
