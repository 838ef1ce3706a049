// Every RPC of the real pvemud with empty, oversized, out-of-range and
// contradictory fields: each gets its specific status code and a
// message naming the field or value, and leaves the policy, its state file,
// the edit count and the emulated registers exactly as they were.
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "gtest/gtest.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kPat = 0x277;                      // IA32_PAT: SHADOW in the default
constexpr uint64_t kPowerOnPat = 0x0007040600070406;  // its initial value there
constexpr uint32_t kApicBase = 0x1b;                  // IA32_APIC_BASE: CONST there
constexpr uint64_t kApicBaseValue = 0xfee00900;
constexpr size_t kOverMaxMessage = 5 << 20;           // DaemonOptions default is 4 MiB

v1::Trap Rdmsr(uint32_t msr) {
  v1::Trap trap;
  trap.set_mode(v1::MODE_64);
  trap.set_insn(std::string("\x0f\x32", 2));
  trap.mutable_regs()->set_rcx(msr);
  trap.mutable_regs()->set_rip(0x1000);
  return trap;
}

// A WRMSR of IA32_PAT = 0 on dom0 vCPU 0: valid, and visible in the shadow
// register if a trap that should have been refused gets emulated anyway.
v1::Trap WritePat() {
  v1::Trap trap;
  trap.set_mode(v1::MODE_64);
  trap.set_insn(std::string("\x0f\x30", 2));
  trap.mutable_regs()->set_rcx(kPat);
  trap.mutable_regs()->set_rip(0x1000);
  return trap;
}

v1::MsrRule Rule(const std::string& msr) {
  v1::MsrRule rule;
  rule.set_msr(msr);
  return rule;
}

v1::LayerRef Domain(uint32_t domain) {
  v1::LayerRef ref;
  ref.set_domain(domain);
  return ref;
}

v1::LayerRef DefaultLayer() {
  v1::LayerRef ref;
  ref.set_default_(true);
  return ref;
}

v1::SetRuleRequest SetRule(v1::LayerRef layer, v1::MsrRule rule) {
  v1::SetRuleRequest request;
  *request.mutable_layer() = layer;
  *request.mutable_rule() = rule;
  return request;
}

v1::DeleteRuleRequest DeleteRule(v1::LayerRef layer, v1::MsrRule rule) {
  v1::DeleteRuleRequest request;
  *request.mutable_layer() = layer;
  *request.mutable_rule() = rule;
  return request;
}

v1::ApplyPolicyRequest ApplyText(const std::string& text) {
  v1::ApplyPolicyRequest request;
  request.set_source_name("bad.textproto");
  request.set_textproto(text);
  return request;
}

v1::ApplyPolicyRequest ApplyMessage(v1::Policy policy) {
  v1::ApplyPolicyRequest request;
  *request.mutable_policy() = std::move(policy);
  return request;
}

v1::ExplainRequest Explain(const std::string& msr) {
  v1::ExplainRequest request;
  request.set_msr(msr);
  return request;
}

// A message whose encoding exceeds the daemon's receive limit though every
// field it knows is empty: the bulk is an unknown field.
template <typename Message>
Message Oversized() {
  Message m;
  m.GetReflection()->MutableUnknownFields(&m)->AddLengthDelimited(
      1000, std::string(kOverMaxMessage, 'x'));
  return m;
}

enum class Rpc {
  kGetPolicy,
  kApplyPolicy,
  kSetRule,
  kDeleteRule,
  kDiffPolicy,
  kListDomains,
  kExplain,
  kEmulate,
  kEmulateStream,
  kGetStats,
  kWatch,
};

using Request =
    std::variant<v1::GetPolicyRequest, v1::ApplyPolicyRequest, v1::SetRuleRequest,
                 v1::DeleteRuleRequest, v1::DiffPolicyRequest, v1::ListDomainsRequest,
                 v1::ExplainRequest, v1::Trap, std::vector<v1::Trap>, v1::StatsRequest,
                 v1::WatchRequest>;

struct Case {
  std::string name;
  Rpc rpc;
  std::function<Request()> request;  // kEmulateStream: the traps, in order
  grpc::StatusCode code;
  // Each must appear in the error message; for an OK Emulate, in
  // "KIND: detail" of the outcome.
  std::vector<std::string> message;
};

// gtest names a failing parameter by this.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  using grpc::StatusCode;
  std::vector<Case> c;

  // ---- GetPolicy
  c.push_back({"GetPolicy_LayerDefaultFalse", Rpc::kGetPolicy,
               [] {
                 v1::GetPolicyRequest r;
                 r.mutable_layer()->set_default_(false);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"layer.default must be true"}});
  c.push_back({"GetPolicy_DomainWithoutAnOverlay", Rpc::kGetPolicy,
               [] {
                 v1::GetPolicyRequest r;
                 *r.mutable_layer() = Domain(77);
                 return r;
               },
               StatusCode::NOT_FOUND, {"domain 77 has no overlay"}});
  c.push_back({"GetPolicy_Oversized", Rpc::kGetPolicy,
               [] { return Oversized<v1::GetPolicyRequest>(); },
               StatusCode::RESOURCE_EXHAUSTED, {"larger than max"}});

  // ---- ApplyPolicy
  c.push_back({"ApplyPolicy_Empty", Rpc::kApplyPolicy, [] { return v1::ApplyPolicyRequest(); },
               StatusCode::INVALID_ARGUMENT, {"carries no policy", "policy or textproto"}});
  c.push_back({"ApplyPolicy_TextprotoOverTheMaxMessageSize", Rpc::kApplyPolicy,
               [] { return ApplyText(std::string(kOverMaxMessage, '#')); },
               StatusCode::RESOURCE_EXHAUSTED, {"larger than max"}});
  c.push_back({"ApplyPolicy_BothPolicyAndTextproto", Rpc::kApplyPolicy,
               [] {
                 v1::ApplyPolicyRequest r = ApplyText("default { unknown_msr: UNKNOWN_RELAXED }");
                 r.mutable_policy()->mutable_default_()->set_unknown_msr(v1::UNKNOWN_RELAXED);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"either policy or textproto, not both"}});
  c.push_back({"ApplyPolicy_MsrBeyond32BitsInText", Rpc::kApplyPolicy,
               [] {
                 return ApplyText(
                     "default {\n  unknown_msr: UNKNOWN_GP\n"
                     "  msr { msr: \"0x1ffffffff\" read: ZERO }\n}\n");
               },
               StatusCode::INVALID_ARGUMENT,
               {"bad.textproto:3:", "'0x1ffffffff' does not fit in 32 bits"}});
  c.push_back({"ApplyPolicy_UnknownEnumNameInText", Rpc::kApplyPolicy,
               [] { return ApplyText("default { msr { msr: \"0x10\" read: SOMETIMES } }"); },
               StatusCode::INVALID_ARGUMENT, {"bad.textproto:1:", "SOMETIMES"}});
  c.push_back({"ApplyPolicy_ReadAction99", Rpc::kApplyPolicy,
               [] {
                 v1::Policy p;
                 v1::MsrRule* rule = p.mutable_default_()->add_msr();
                 rule->set_msr("0x10");
                 rule->set_read(static_cast<v1::ReadAction::Action>(99));
                 return ApplyMessage(p);
               },
               StatusCode::INVALID_ARGUMENT,
               {"default.msr[0].read", "99 is not a value of ReadAction.Action"}});
  c.push_back({"ApplyPolicy_ReadActionNumberInText", Rpc::kApplyPolicy,
               [] { return ApplyText("default { msr { msr: \"0x10\" read: 99 } }"); },
               StatusCode::INVALID_ARGUMENT,
               {"bad.textproto:1:", "99 is not a value of ReadAction.Action"}});
  c.push_back({"ApplyPolicy_UnknownMsrMode7", Rpc::kApplyPolicy,
               [] {
                 v1::Policy p;
                 p.mutable_default_()->set_unknown_msr(static_cast<v1::UnknownMsr>(7));
                 return ApplyMessage(p);
               },
               StatusCode::INVALID_ARGUMENT,
               {"default.unknown_msr", "7 is not a value of UnknownMsr"}});
  c.push_back({"ApplyPolicy_TscMode42", Rpc::kApplyPolicy,
               [] {
                 v1::Policy p;
                 p.mutable_default_()->mutable_tsc()->set_mode(
                     static_cast<v1::TscPolicy::Mode>(42));
                 return ApplyMessage(p);
               },
               StatusCode::INVALID_ARGUMENT,
               {"default.tsc.mode", "42 is not a value of TscPolicy.Mode"}});
  c.push_back({"ApplyPolicy_CpuidSource9", Rpc::kApplyPolicy,
               [] {
                 v1::Policy p;
                 v1::CpuidEntry* e = p.mutable_default_()->add_cpuid();
                 e->set_leaf(1);
                 e->set_source(static_cast<v1::CpuidEntry::Source>(9));
                 return ApplyMessage(p);
               },
               StatusCode::INVALID_ARGUMENT,
               {"default.cpuid[0].source", "9 is not a value of CpuidEntry.Source"}});
  c.push_back({"ApplyPolicy_GuestVendor12", Rpc::kApplyPolicy,
               [] {
                 v1::Policy p;
                 v1::Layer* d = p.add_domain();
                 d->set_domain(3);
                 d->set_guest_vendor(static_cast<v1::Vendor>(12));
                 return ApplyMessage(p);
               },
               StatusCode::INVALID_ARGUMENT,
               {"domain[0].guest_vendor", "12 is not a value of Vendor"}});
  c.push_back({"ApplyPolicy_IoPortBeyond0xffff", Rpc::kApplyPolicy,
               [] { return ApplyText("default { io_port { first: 0x80 last: 0x10000 } }"); },
               StatusCode::INVALID_ARGUMENT, {"bad.textproto:1:", "port 0x10000 is out of range"}});
  c.push_back({"ApplyPolicy_IoPortRangeFirstGtLast", Rpc::kApplyPolicy,
               [] { return ApplyText("default { io_port { first: 0x80 last: 0x70 } }"); },
               StatusCode::INVALID_ARGUMENT, {"first 0x80 is greater than last 0x70"}});
  c.push_back({"ApplyPolicy_TscEmulatedWithoutAFrequency", Rpc::kApplyPolicy,
               [] { return ApplyText("default { tsc { mode: EMULATED } }"); },
               StatusCode::INVALID_ARGUMENT, {"bad.textproto:1:", "needs frequency_khz"}});
  c.push_back({"ApplyPolicy_DefaultLayerNamingADomain", Rpc::kApplyPolicy,
               [] { return ApplyText("default { domain: 4 }"); },
               StatusCode::INVALID_ARGUMENT, {"default layer cannot name a domain (domain: 4)"}});
  c.push_back({"ApplyPolicy_OneDomainDefinedTwice", Rpc::kApplyPolicy,
               [] { return ApplyText("domain { domain: 3 }\ndomain { domain: 3 }\n"); },
               StatusCode::INVALID_ARGUMENT, {"bad.textproto:2:", "domain 3 is already defined"}});
  c.push_back({"ApplyPolicy_DomainLayerRefDefaultLayerInThePolicy", Rpc::kApplyPolicy,
               [] {
                 v1::ApplyPolicyRequest r = ApplyText("default { unknown_msr: UNKNOWN_RELAXED }");
                 *r.mutable_layer() = Domain(5);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"exactly one `domain { domain: 5"}});
  c.push_back({"ApplyPolicy_Domain5RefDomain6InThePolicy", Rpc::kApplyPolicy,
               [] {
                 v1::ApplyPolicyRequest r = ApplyText("domain { domain: 6 vpmu: true }");
                 *r.mutable_layer() = Domain(5);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"names domain 6 but the edit is for domain 5"}});
  c.push_back({"ApplyPolicy_DefaultRefDomainsInThePolicy", Rpc::kApplyPolicy,
               [] {
                 v1::ApplyPolicyRequest r =
                     ApplyText("default { unknown_msr: UNKNOWN_GP }\ndomain { domain: 2 }\n");
                 *r.mutable_layer() = DefaultLayer();
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"only a `default { }` layer"}});
  c.push_back({"ApplyPolicy_IfGenerationInTheFuture", Rpc::kApplyPolicy,
               [] {
                 v1::ApplyPolicyRequest r = ApplyText("default { unknown_msr: UNKNOWN_GP }");
                 r.set_if_generation(uint64_t{1} << 60);
                 return r;
               },
               StatusCode::ABORTED, {"at generation 1, not 1152921504606846976"}});
  c.push_back({"ApplyPolicy_ThousandsOfTiedDuplicateRules", Rpc::kApplyPolicy,
               [] {
                 v1::Policy p;
                 for (int i = 0; i < 20000; ++i) {
                   v1::MsrRule* rule = p.mutable_default_()->add_msr();
                   rule->set_msr("0x10");
                   rule->set_read(v1::ReadAction::ZERO);
                 }
                 return ApplyMessage(p);
               },
               StatusCode::INVALID_ARGUMENT,
               {"ties with the rule for IA32_TIME_STAMP_COUNTER (0x10)",
                "at most 8 errors are reported"}});

  // Rules that decide nothing are valid (and cannot tie), but must not make
  // checking the one bad rule after them quadratic.
  c.push_back({"ApplyPolicy_HugeRepeatedRulesThenABadOne", Rpc::kApplyPolicy,
               [] {
                 v1::Policy p;
                 for (int i = 0; i < 200000; ++i) p.mutable_default_()->add_msr()->set_msr("0x10");
                 p.mutable_default_()->add_msr()->set_msr("0x1ffffffff");
                 return ApplyMessage(p);
               },
               StatusCode::INVALID_ARGUMENT,
               {"default.msr[200000].msr", "'0x1ffffffff' does not fit in 32 bits"}});

  // ---- SetRule
  c.push_back({"SetRule_NoRule", Rpc::kSetRule, [] { return SetRule(Domain(5), v1::MsrRule()); },
               StatusCode::INVALID_ARGUMENT, {"rule has no target"}});
  c.push_back({"SetRule_RangeWithEmptyEnds", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule;
                 rule.mutable_range();
                 rule.set_read(v1::ReadAction::ZERO);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"empty MSR"}});
  c.push_back({"SetRule_LayerDefaultFalse", Rpc::kSetRule,
               [] {
                 v1::SetRuleRequest r = SetRule(Domain(5), Rule("0x10"));
                 r.mutable_layer()->set_default_(false);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"layer.default must be true"}});
  c.push_back({"SetRule_MsrBeyond32Bits", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x1ffffffff");
                 rule.set_read(v1::ReadAction::ZERO);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"'0x1ffffffff' does not fit in 32 bits"}});
  c.push_back({"SetRule_MsrMinus1", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("-1");
                 rule.set_read(v1::ReadAction::ZERO);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"MSR '-1'"}});
  c.push_back({"SetRule_Msr0xZZ", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0xZZ");
                 rule.set_read(v1::ReadAction::ZERO);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"bad MSR number '0xZZ'"}});
  c.push_back({"SetRule_UnknownMsrName", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("IA32_ENERGY_PERF_BAIS");
                 rule.set_read(v1::ReadAction::ZERO);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT,
               {"unknown MSR 'IA32_ENERGY_PERF_BAIS'", "IA32_ENERGY_PERF_BIAS"}});
  c.push_back({"SetRule_MsrNameOf100Kb", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule(std::string(100 * 1024, 'Q'));
                 rule.set_read(v1::ReadAction::ZERO);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"unknown MSR 'QQQQQQQQ", "longer than any catalog name"}});
  c.push_back({"SetRule_RangeFirstGtLast", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule;
                 rule.mutable_range()->set_first("0x20");
                 rule.mutable_range()->set_last("0x10");
                 rule.set_read(v1::ReadAction::ZERO);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"range first 0x20 is greater than last 0x10"}});
  c.push_back({"SetRule_ReadAction99", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_read(static_cast<v1::ReadAction::Action>(99));
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT,
               {".msr[0].read", "99 is not a value of ReadAction.Action"}});
  // 257 is PASSTHROUGH (1) once narrowed to a byte: it must never reach the
  // trap path as a host read.
  c.push_back({"SetRule_ReadAction257", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_read(static_cast<v1::ReadAction::Action>(257));
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT,
               {".msr[0].read", "257 is not a value of ReadAction.Action"}});
  c.push_back({"SetRule_WriteAction260", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_write(static_cast<v1::WriteAction::Action>(260));
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT,
               {".msr[0].write", "260 is not a value of WriteAction.Action"}});
  c.push_back({"SetRule_HostVendor99", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_read(v1::ReadAction::ZERO);
                 rule.set_host_vendor(static_cast<v1::Vendor>(99));
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT,
               {".msr[0].host_vendor", "99 is not a value of Vendor"}});
  c.push_back({"SetRule_OnReservedBits3", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_write(v1::WriteAction::SHADOW);
                 rule.set_on_reserved_bits(static_cast<v1::ReservedBits>(3));
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT,
               {".msr[0].on_reserved_bits", "3 is not a value of ReservedBits"}});
  c.push_back({"SetRule_ConstReadWithoutAValue", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_read(v1::ReadAction::CONST);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"read CONST needs a value"}});
  c.push_back({"SetRule_WritableMaskWithAGpWrite", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_write(v1::WriteAction::GP);
                 rule.set_writable_mask(0xff);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"writable_mask applies only", "write is GP"}});
  c.push_back({"SetRule_PassthroughWriteWithoutAllowHostWrite", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_write(v1::WriteAction::PASSTHROUGH);
                 return SetRule(Domain(5), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"write PASSTHROUGH needs `allow_host_write: true`"}});
  // The default layer's IA32_MISC_ENABLE rule has host_vendor: INTEL; one
  // with guest_vendor: AMD is as specific and can apply at the same time.
  c.push_back({"SetRule_RuleThatTiesWithAnExistingOne", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("IA32_MISC_ENABLE");
                 rule.set_guest_vendor(v1::AMD);
                 rule.set_read(v1::ReadAction::ZERO);
                 return SetRule(DefaultLayer(), rule);
               },
               StatusCode::INVALID_ARGUMENT, {"ties with the rule for IA32_MISC_ENABLE"}});
  c.push_back({"SetRule_IfGenerationInTheFuture", Rpc::kSetRule,
               [] {
                 v1::MsrRule rule = Rule("0x10");
                 rule.set_read(v1::ReadAction::ZERO);
                 v1::SetRuleRequest r = SetRule(Domain(5), rule);
                 r.set_if_generation(~uint64_t{0});
                 return r;
               },
               StatusCode::ABORTED, {"not 18446744073709551615"}});

  // ---- DeleteRule
  c.push_back({"DeleteRule_Empty", Rpc::kDeleteRule, [] { return v1::DeleteRuleRequest(); },
               StatusCode::INVALID_ARGUMENT, {"layer is required"}});
  c.push_back({"DeleteRule_NoRule", Rpc::kDeleteRule,
               [] { return DeleteRule(DefaultLayer(), v1::MsrRule()); },
               StatusCode::INVALID_ARGUMENT, {"rule has no target"}});
  c.push_back({"DeleteRule_MsrBeyond32Bits", Rpc::kDeleteRule,
               [] { return DeleteRule(DefaultLayer(), Rule("0x1ffffffff")); },
               StatusCode::INVALID_ARGUMENT, {"'0x1ffffffff' does not fit in 32 bits"}});
  c.push_back({"DeleteRule_ExistingMsrOtherConditions", Rpc::kDeleteRule,
               [] { return DeleteRule(DefaultLayer(), Rule("IA32_MISC_ENABLE")); },
               StatusCode::NOT_FOUND,
               {"no rule for IA32_MISC_ENABLE (0x1a0) with these conditions in the default "
                "layer"}});
  c.push_back({"DeleteRule_ExistingRuleStaleIfGeneration", Rpc::kDeleteRule,
               [] {
                 v1::DeleteRuleRequest r = DeleteRule(DefaultLayer(), Rule("IA32_PAT"));
                 r.set_if_generation(2);
                 return r;
               },
               StatusCode::ABORTED, {"at generation 1, not 2"}});

  // ---- DiffPolicy
  c.push_back({"DiffPolicy_Empty", Rpc::kDiffPolicy, [] { return v1::DiffPolicyRequest(); },
               StatusCode::INVALID_ARGUMENT, {"carries no policy"}});
  c.push_back({"DiffPolicy_BothPolicyAndTextproto", Rpc::kDiffPolicy,
               [] {
                 v1::DiffPolicyRequest r;
                 r.set_textproto("default { }");
                 r.mutable_policy()->mutable_default_();
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"not both"}});
  c.push_back({"DiffPolicy_Domain5RefDomain6InThePolicy", Rpc::kDiffPolicy,
               [] {
                 v1::DiffPolicyRequest r;
                 *r.mutable_layer() = Domain(5);
                 r.mutable_policy()->add_domain()->set_domain(6);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"names domain 6 but the edit is for domain 5"}});
  c.push_back({"DiffPolicy_WriteAction99", Rpc::kDiffPolicy,
               [] {
                 v1::DiffPolicyRequest r;
                 v1::MsrRule* rule = r.mutable_policy()->mutable_default_()->add_msr();
                 rule->set_msr("0x10");
                 rule->set_write(static_cast<v1::WriteAction::Action>(99));
                 return r;
               },
               StatusCode::INVALID_ARGUMENT,
               {"default.msr[0].write", "99 is not a value of WriteAction.Action"}});
  c.push_back({"DiffPolicy_TextprotoOverTheMaxMessageSize", Rpc::kDiffPolicy,
               [] {
                 v1::DiffPolicyRequest r;
                 r.set_textproto(std::string(kOverMaxMessage, '#'));
                 return r;
               },
               StatusCode::RESOURCE_EXHAUSTED, {"larger than max"}});

  // ---- ListDomains, GetStats, Watch: nothing in them can be out of range
  // or contradictory; only size.
  c.push_back({"ListDomains_Oversized", Rpc::kListDomains,
               [] { return Oversized<v1::ListDomainsRequest>(); }, StatusCode::RESOURCE_EXHAUSTED,
               {"larger than max"}});
  c.push_back({"GetStats_Oversized", Rpc::kGetStats, [] { return Oversized<v1::StatsRequest>(); },
               StatusCode::RESOURCE_EXHAUSTED, {"larger than max"}});
  c.push_back({"Watch_Oversized", Rpc::kWatch, [] { return Oversized<v1::WatchRequest>(); },
               StatusCode::RESOURCE_EXHAUSTED, {"larger than max"}});

  // ---- Explain
  c.push_back({"Explain_Empty", Rpc::kExplain, [] { return v1::ExplainRequest(); },
               StatusCode::INVALID_ARGUMENT, {"empty MSR"}});
  c.push_back({"Explain_MsrBeyond32Bits", Rpc::kExplain, [] { return Explain("0x1ffffffff"); },
               StatusCode::INVALID_ARGUMENT, {"'0x1ffffffff' does not fit in 32 bits"}});
  c.push_back({"Explain_Msr0xZZ", Rpc::kExplain, [] { return Explain("0xZZ"); },
               StatusCode::INVALID_ARGUMENT, {"bad MSR number '0xZZ'"}});
  c.push_back({"Explain_Msr1e3", Rpc::kExplain, [] { return Explain("1e3"); },
               StatusCode::INVALID_ARGUMENT, {"bad MSR number '1e3'"}});
  c.push_back({"Explain_UnknownMsrName", Rpc::kExplain,
               [] { return Explain("IA32_NOT_A_REGISTER"); }, StatusCode::INVALID_ARGUMENT,
               {"unknown MSR 'IA32_NOT_A_REGISTER'"}});
  c.push_back({"Explain_MsrNameOf100Kb", Rpc::kExplain,
               [] { return Explain(std::string(100 * 1024, 'Q')); }, StatusCode::INVALID_ARGUMENT,
               {"unknown MSR 'QQQQQQQQ", "longer than any catalog name"}});

  c.push_back({"Explain_PortBeyond16Bits", Rpc::kExplain,
               [] {
                 v1::ExplainRequest r;
                 r.set_port(0x10000);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"port 65536 width 1", "ports are 0..0xffff"}});
  c.push_back({"Explain_PortWidth3", Rpc::kExplain,
               [] {
                 v1::ExplainRequest r;
                 r.set_port(0x80);
                 r.set_port_width(3);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"width 3", "widths 1, 2 or 4"}});
  c.push_back({"Explain_PortAndMsr", Rpc::kExplain,
               [] {
                 v1::ExplainRequest r = Explain("0x10");
                 r.set_port(0x80);
                 return r;
               },
               StatusCode::INVALID_ARGUMENT, {"an msr or a port, not both"}});

  // ---- Emulate
  // No instruction bytes: the trap source fetched too little. The decoder
  // answers that as a truncated fetch, UNHANDLED with nothing changed (the
  // hypervisor handles it), not as a bad request.
  c.push_back({"Emulate_EmptyTrap", Rpc::kEmulate, [] { return v1::Trap(); }, StatusCode::OK,
               {"UNHANDLED: decode:", "truncated"}});
  c.push_back({"Emulate_Cpl4", Rpc::kEmulate,
               [] {
                 v1::Trap t = WritePat();
                 t.set_cpl(4);
                 return t;
               },
               StatusCode::INVALID_ARGUMENT, {"cpl 4", "0..3"}});
  c.push_back({"Emulate_Cpl0xffffffff", Rpc::kEmulate,
               [] {
                 v1::Trap t = WritePat();
                 t.set_cpl(0xffffffff);
                 return t;
               },
               StatusCode::INVALID_ARGUMENT, {"cpl 4294967295"}});
  c.push_back({"Emulate_Mode99", Rpc::kEmulate,
               [] {
                 v1::Trap t = WritePat();
                 t.set_mode(static_cast<v1::CpuMode>(99));
                 return t;
               },
               StatusCode::INVALID_ARGUMENT, {"mode 99"}});
  // 0xffffffff is the daemon's "no domain" marker (server/shadow_store.cc,
  // policy/compile.cc): a trap cannot come from it.
  c.push_back({"Emulate_Domain0xffffffff", Rpc::kEmulate,
               [] {
                 v1::Trap t = WritePat();
                 t.set_domain(0xffffffff);
                 t.set_vcpu(0xffffffff);
                 return t;
               },
               StatusCode::INVALID_ARGUMENT, {"domain 4294967295"}});
  c.push_back({"Emulate_OversizedInsn", Rpc::kEmulate,
               [] {
                 v1::Trap t = WritePat();
                 t.set_insn(std::string(kOverMaxMessage, '\x90'));
                 return t;
               },
               StatusCode::RESOURCE_EXHAUSTED, {"larger than max"}});

  // ---- EmulateStream: the good traps before a bad one are answered, the
  // bad one ends the stream naming its position.
  c.push_back({"EmulateStream_SixteenInsnBytesAt2", Rpc::kEmulateStream,
               [] {
                 v1::Trap bad = WritePat();
                 bad.set_insn(std::string(16, '\x66'));
                 return std::vector<v1::Trap>{Rdmsr(kApicBase), Rdmsr(kPat), bad, WritePat()};
               },
               StatusCode::INVALID_ARGUMENT, {"trap #2 of the stream", "16 instruction bytes"}});
  c.push_back({"EmulateStream_Cpl7At0", Rpc::kEmulateStream,
               [] {
                 v1::Trap bad = WritePat();
                 bad.set_cpl(7);
                 return std::vector<v1::Trap>{bad};
               },
               StatusCode::INVALID_ARGUMENT, {"trap #0 of the stream", "cpl 7"}});
  c.push_back({"EmulateStream_Mode5At1", Rpc::kEmulateStream,
               [] {
                 v1::Trap bad = WritePat();
                 bad.set_mode(static_cast<v1::CpuMode>(5));
                 return std::vector<v1::Trap>{Rdmsr(kApicBase), bad};
               },
               StatusCode::INVALID_ARGUMENT, {"trap #1 of the stream", "mode 5"}});
  c.push_back({"EmulateStream_OversizedTrapAt1", Rpc::kEmulateStream,
               [] {
                 v1::Trap bad = WritePat();
                 bad.set_insn(std::string(kOverMaxMessage, '\x90'));
                 return std::vector<v1::Trap>{Rdmsr(kApicBase), bad};
               },
               StatusCode::RESOURCE_EXHAUSTED, {"larger than max"}});
  return c;
}

// What must not change when a request is refused.
struct State {
  uint64_t generation = 0;
  std::string textproto;
  std::string state_file;
  uint64_t edits = 0;
  uint64_t traps = 0;  // emulated, by GetStats
};

class BadInputTest : public DaemonTest, public ::testing::WithParamInterface<Case> {
 protected:
  // One gRPC library lifetime for all cases, as in the real daemon process:
  // otherwise every case's daemon shutdown is a full gRPC shutdown, and
  // those sometimes wait out a 10 s executor poll.
  static void SetUpTestSuite() { grpc_init(); }
  static void TearDownTestSuite() { grpc_shutdown(); }

  struct Result {
    grpc::Status status;
    std::string text;  // the error message, or "KIND: detail" of an OK outcome
    uint64_t answered = 0;  // traps that got an outcome
  };

  Result Call(Rpc rpc, const Request& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Result r;
    switch (rpc) {
      case Rpc::kGetPolicy: {
        v1::GetPolicyResponse response;
        r.status = policy_->GetPolicy(&context, std::get<v1::GetPolicyRequest>(request), &response);
        break;
      }
      case Rpc::kApplyPolicy: {
        v1::EditResponse response;
        r.status =
            policy_->ApplyPolicy(&context, std::get<v1::ApplyPolicyRequest>(request), &response);
        break;
      }
      case Rpc::kSetRule: {
        v1::EditResponse response;
        r.status = policy_->SetRule(&context, std::get<v1::SetRuleRequest>(request), &response);
        break;
      }
      case Rpc::kDeleteRule: {
        v1::EditResponse response;
        r.status =
            policy_->DeleteRule(&context, std::get<v1::DeleteRuleRequest>(request), &response);
        break;
      }
      case Rpc::kDiffPolicy: {
        v1::DiffPolicyResponse response;
        r.status =
            policy_->DiffPolicy(&context, std::get<v1::DiffPolicyRequest>(request), &response);
        break;
      }
      case Rpc::kListDomains: {
        v1::ListDomainsResponse response;
        r.status =
            policy_->ListDomains(&context, std::get<v1::ListDomainsRequest>(request), &response);
        break;
      }
      case Rpc::kExplain: {
        v1::ExplainResponse response;
        r.status = policy_->Explain(&context, std::get<v1::ExplainRequest>(request), &response);
        break;
      }
      case Rpc::kEmulate: {
        v1::Outcome outcome;
        r.status = emulator_->Emulate(&context, std::get<v1::Trap>(request), &outcome);
        if (r.status.ok()) {
          r.answered = 1;
          r.text = absl::StrCat(v1::Outcome::Kind_Name(outcome.kind()), ": ", outcome.detail());
        }
        break;
      }
      case Rpc::kEmulateStream: {
        const auto& traps = std::get<std::vector<v1::Trap>>(request);
        auto stream = emulator_->EmulateStream(&context);
        // One at a time, so the number of answers before the error is exact.
        for (const v1::Trap& trap : traps) {
          if (!stream->Write(trap)) break;
          v1::Outcome outcome;
          if (!stream->Read(&outcome)) break;
          ++r.answered;
        }
        stream->WritesDone();
        r.status = stream->Finish();
        if (!r.status.ok()) {
          // Every trap before the bad one got its answer.
          for (size_t i = 0; i < traps.size(); ++i) {
            const std::string at = absl::StrCat("trap #", i, " ");
            if (r.status.error_message().find(at) != std::string::npos) {
              EXPECT_EQ(r.answered, i);
            }
          }
        }
        break;
      }
      case Rpc::kGetStats: {
        v1::StatsResponse response;
        r.status = emulator_->GetStats(&context, std::get<v1::StatsRequest>(request), &response);
        break;
      }
      case Rpc::kWatch: {
        auto reader = audit_->Watch(&context, std::get<v1::WatchRequest>(request));
        v1::AuditEvent event;
        while (reader->Read(&event)) {
        }
        r.status = reader->Finish();
        break;
      }
    }
    if (!r.status.ok()) r.text = r.status.error_message();
    return r;
  }

  State Now() {
    State s;
    {
      grpc::ClientContext context;
      v1::GetPolicyResponse response;
      grpc::Status status = policy_->GetPolicy(&context, v1::GetPolicyRequest(), &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      s.generation = response.generation();
      s.textproto = response.textproto();
    }
    {
      grpc::ClientContext context;
      v1::StatsResponse stats;
      grpc::Status status = emulator_->GetStats(&context, v1::StatsRequest(), &stats);
      EXPECT_TRUE(status.ok()) << status.error_message();
      s.edits = stats.edits();
      s.traps = stats.traps();
    }
    std::ifstream in(options_.state_dir + "/policy.textproto");
    std::stringstream text;
    text << in.rdbuf();
    s.state_file = text.str();
    return s;
  }

  // The daemon still answers normal traps, and no refused trap reached the
  // shadow registers of dom0 vCPU 0.
  void ExpectNormalTraps() {
    for (auto [msr, value] : {std::pair{kApicBase, kApicBaseValue}, std::pair{kPat, kPowerOnPat}}) {
      grpc::ClientContext context;
      v1::Outcome outcome;
      grpc::Status status = emulator_->Emulate(&context, Rdmsr(msr), &outcome);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(outcome.kind(), v1::Outcome::COMPLETED) << outcome.detail();
      EXPECT_EQ((outcome.regs().rdx() << 32) | outcome.regs().rax(), value)
          << std::hex << "msr 0x" << msr;
      EXPECT_EQ(outcome.regs().rip(), 0x1002u);
    }
  }
};

// A fresh daemon per case, so one case that does change state cannot hide
// or cause another's failure.
TEST_P(BadInputTest, IsRefusedSpecificallyAndChangesNothing) {
  const Case& c = GetParam();
  StartDaemon();
  ExpectNormalTraps();
  const State before = Now();
  ASSERT_EQ(before.generation, 1u);
  Result r = Call(c.rpc, c.request());
  EXPECT_EQ(r.status.error_code(), c.code) << r.text;
  for (const std::string& want : c.message) EXPECT_THAT(r.text, HasSubstr(want));
  // Messages name the problem; they do not echo megabytes back.
  EXPECT_LT(r.text.size(), 8192u);
  const State after = Now();
  EXPECT_EQ(after.generation, before.generation);
  // (Not EXPECT_EQ: a diff of the whole policy would bury the cause.)
  EXPECT_TRUE(after.textproto == before.textproto)
      << "the policy changed to:\n" << after.textproto.substr(0, 1000);
  EXPECT_TRUE(after.state_file == before.state_file)
      << "the state file changed to:\n" << after.state_file.substr(0, 1000);
  EXPECT_EQ(after.edits, before.edits);
  // A refused trap is not emulated, so not counted either.
  EXPECT_EQ(after.traps, before.traps + r.answered);
  ExpectNormalTraps();
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace pvemu::testing
