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

class DefaultDispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::HostProfile profile;
    ASSERT_TRUE(ParseTextProto(hosts::ShippedProfile("intel-xeon-e-2136"), "intel", &profile).ok());
    host_ = std::move(hosts::SimHost::Create(profile, "intel")).value();
    auto loaded = policy::ParsePolicy(policy::ShippedPolicy("default"), "default.textproto");
    ASSERT_TRUE(loaded.ok());
    store_ = std::move(policy::Store::FromPolicy(loaded->policy, loaded->source, v1::INTEL)).value();
    dispatcher_ = std::make_unique<dispatch::Dispatcher>(*store_, *host_, nullptr, Options());
  }
  // The dispatcher's options; the defaults unless a test says otherwise.
  virtual dispatch::DispatchOptions Options() const { return dispatch::DispatchOptions(); }

  std::unique_ptr<hosts::SimHost> host_;
  std::unique_ptr<policy::Store> store_;
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
};

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_DISPATCH_DISPATCHER_FIXTURE_H_
