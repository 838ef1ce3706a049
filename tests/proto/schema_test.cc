// The v1 schema: messages survive text and binary round trips, text files
// with mistakes are refused with positions, and the service stubs link.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/textproto.h"
#include "pvemu/v1/host.pb.h"
#include "pvemu/v1/policy.pb.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "pvemu/v1/trap.pb.h"
#include "tests/status_matchers.h"

namespace pvemu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::pvemu::testing::StatusIs;

constexpr char kPolicyText[] = R"pb(
  default {
    unknown_msr: UNKNOWN_GP
    msr {
      msr: "IA32_ENERGY_PERF_BIAS"
      host_vendor: INTEL
      read: PASSTHROUGH
      write: IGNORE
    }
    msr {
      range { first: "0xc0010000" last: "0xc0010007" }
      read: ZERO
      write: GP
      writable_mask: 0xffff
    }
    cpuid { leaf: 1 source: HOST clear { ecx: 0x20 } }
    tsc { mode: OFFSET offset: -1000 }
    io_port { first: 0x70 last: 0x71 }
    vpmu: false
  }
  domain { domain: 3 hardware_domain: false unknown_msr: UNKNOWN_RELAXED }
)pb";

TEST(SchemaTest, PolicyRoundTripsThroughTextAndBinary) {
  v1::Policy policy;
  ASSERT_TRUE(ParseTextProto(kPolicyText, "inline", &policy).ok());
  EXPECT_EQ(policy.default_().msr_size(), 2);
  EXPECT_EQ(policy.default_().msr(1).writable_mask(), 0xffffu);
  EXPECT_EQ(policy.default_().tsc().offset(), -1000);

  v1::Policy from_text;
  ASSERT_TRUE(ParseTextProto(ToTextProto(policy), "printed", &from_text).ok());
  EXPECT_EQ(from_text.SerializeAsString(), policy.SerializeAsString());

  v1::Policy from_binary;
  ASSERT_TRUE(from_binary.ParseFromString(policy.SerializeAsString()));
  EXPECT_EQ(ToTextProto(from_binary), ToTextProto(policy));
}

TEST(SchemaTest, TrapLogRoundTripsThroughTextAndBinary) {
  v1::TrapLog log;
  v1::TrapRecord* rec = log.add_record();
  rec->mutable_trap()->set_domain(1);
  rec->mutable_trap()->set_mode(v1::MODE_64);
  rec->mutable_trap()->set_insn(std::string("\x0f\x32", 2));
  rec->mutable_trap()->mutable_regs()->set_rcx(0x1b0);
  rec->mutable_expect()->set_kind(v1::Outcome::EXCEPTION);
  rec->mutable_expect()->set_vector(v1::GP);
  rec->set_source("dmesg.log:12");

  v1::TrapLog back;
  ASSERT_TRUE(ParseTextProto(ToTextProto(log), "printed", &back).ok());
  EXPECT_EQ(back.SerializeAsString(), log.SerializeAsString());
  ASSERT_TRUE(back.ParseFromString(log.SerializeAsString()));
  EXPECT_EQ(back.record(0).trap().insn(), std::string("\x0f\x32", 2));
}

TEST(SchemaTest, UnknownFieldIsRefusedWithLineAndColumn) {
  v1::Policy policy;
  EXPECT_THAT(ParseTextProto("default {\n  unknwon_msr: UNKNOWN_GP\n}\n",
                             "p.textproto", &policy),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("p.textproto:2:"),
                             HasSubstr("no field named \"unknwon_msr\""))));
}

TEST(SchemaTest, ValueWiderThan64BitsIsRefused) {
  v1::Policy policy;
  EXPECT_THAT(ParseTextProto("default { msr { msr: \"0x10\" value: "
                             "0x1ffffffffffffffff } }",
                             "wide.textproto", &policy),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("wide.textproto:1:")));
}

TEST(SchemaTest, MissingFileIsNotFoundAndNamesThePath) {
  v1::HostProfile profile;
  EXPECT_THAT(ParseTextProtoFile("/nonexistent/pvemu/profile.textproto", &profile),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/pvemu/profile.textproto")));
}

TEST(SchemaTest, ServiceStubsHaveEveryMethod) {
  const auto* file = v1::GetPolicyRequest::descriptor()->file();
  const auto* policy = file->FindServiceByName("PolicyService");
  ASSERT_NE(policy, nullptr);
  EXPECT_NE(policy->FindMethodByName("SetRule"), nullptr);
  const auto* emu = file->FindServiceByName("EmulatorService");
  ASSERT_NE(emu, nullptr);
  const auto* stream = emu->FindMethodByName("EmulateStream");
  ASSERT_NE(stream, nullptr);
  EXPECT_TRUE(stream->client_streaming());
  EXPECT_TRUE(stream->server_streaming());
  EXPECT_NE(file->FindServiceByName("AuditService"), nullptr);

  // Constructing the generated base services proves the gRPC code links.
  v1::PolicyService::Service policy_service;
  v1::EmulatorService::Service emulator_service;
  v1::AuditService::Service audit_service;
}

}  // namespace
}  // namespace pvemu
