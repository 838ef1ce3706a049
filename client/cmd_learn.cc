// The learning loop's commands: suggest from captures and from pvemud's
// learned list, replay --changes, policy apply --dry-run --against
// (client/learn.h; README, "From learning to enforcing").
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "client/cli.h"
#include "client/domain_policy_view.h"
#include "client/flags.h"
#include "client/learn.h"
#include "client/offline.h"
#include "dispatch/dispatch.h"
#include "dispatch/trap_counts.h"
#include "emulator/decoder.h"
#include "emulator/trap_convert.h"
#include "grpcpp/channel.h"
#include "policy/explain.h"
#include "policy/loader.h"
#include "policy/rule_target.h"
#include "policy/store.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "traplog/reader.h"
#include "x86/msr_catalog.h"

namespace pvemu::client {
namespace {

using Kind = policy::RelaxedAccess::Kind;

// The instruction a trap record holds, or false when it does not decode.
bool DecodeTrap(const emulator::Trap& trap, emulator::Instruction* insn) {
  uint8_t offset = 0;
  return emulator::DecodeInto(trap.insn, trap.insn_len, trap.mode, insn, &offset) ==
         emulator::DecodeError::kOk;
}

// The port an IN/OUT accesses: its imm8, else DX.
uint16_t PortOf(const emulator::Trap& trap, const emulator::Instruction& insn) {
  return insn.has_imm_port ? insn.port : static_cast<uint16_t>(trap.regs.gpr[emulator::kRdx]);
}

// The relaxed access a decoded record shows; false for other instructions.
bool ToRelaxed(const emulator::Trap& trap, const emulator::Instruction& insn,
               policy::RelaxedAccess* a) {
  a->domain = trap.domain;
  a->width = 1;
  switch (insn.kind) {
    case emulator::InsnKind::kRdmsr:
    case emulator::InsnKind::kWrmsr:
      a->kind = insn.kind == emulator::InsnKind::kRdmsr ? Kind::kMsrRead : Kind::kMsrWrite;
      a->index = static_cast<uint32_t>(trap.regs.gpr[emulator::kRcx]);
      return true;
    case emulator::InsnKind::kIn:
    case emulator::InsnKind::kOut:
      a->kind = insn.kind == emulator::InsnKind::kIn ? Kind::kPortIn : Kind::kPortOut;
      a->index = PortOf(trap, insn);
      a->width = static_cast<uint8_t>(insn.operand_size / 8);
      return true;
    default:
      return false;
  }
}

// --- Changes: recorded answers against a candidate's ------------------------

// One outcome as a word: "completed" (with the value read where `value`),
// "exception #GP", "device", "unhandled".
std::string Word(v1::Outcome::Kind kind, std::optional<v1::Vector> vector,
                 std::optional<uint64_t> value) {
  switch (kind) {
    case v1::Outcome::COMPLETED:
      return value.has_value() ? absl::StrFormat("completed 0x%x", *value) : "completed";
    case v1::Outcome::EXCEPTION:
      return vector.has_value() ? absl::StrCat("exception #", v1::Vector_Name(*vector))
                                : "exception";
    case v1::Outcome::DEVICE_IO:
      return "device";
    default:
      return "unhandled";
  }
}

struct Change {
  std::string recorded, candidate, rule;
  uint64_t count = 0;
  bool breaking = false;
};
// (domain, instruction, index, access).
using ChangeKey = std::tuple<uint32_t, int, uint32_t, bool>;

// The candidate's rule that decides `insn` in `domain`.
std::string RuleFor(const policy::Snapshot& snapshot, uint32_t domain,
                    const emulator::Instruction& insn, uint32_t index, uint8_t width) {
  policy::Explanation e;
  if (insn.kind == emulator::InsnKind::kRdmsr || insn.kind == emulator::InsnKind::kWrmsr) {
    e = policy::ExplainMsr(snapshot, domain, index,
                           insn.kind == emulator::InsnKind::kWrmsr ? std::optional<uint64_t>(0)
                                                                   : std::nullopt);
  } else if (insn.kind == emulator::InsnKind::kIn || insn.kind == emulator::InsnKind::kOut) {
    e = policy::ExplainPort(snapshot, domain, static_cast<uint16_t>(index), width);
  } else {
    return "";
  }
  return e.source.empty() ? e.layer : absl::StrCat(e.source, " (", e.layer, ")");
}

// Decides every recorded trap of `captures` under `candidate` and prints
// what would be answered differently; the exit code (0, 2, or 1 on error).
int ReportChanges(const policy::LoadedPolicy& candidate, v1::Vendor vendor,
                  const std::vector<std::string>& captures) {
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "pvemuctl: %s\n", std::string(status.message()).c_str());
    return kExitInvalid;
  };
  absl::StatusOr<std::unique_ptr<emulator::Host>> host = HostFromFlags();
  if (!host.ok()) return fail(host.status());
  absl::StatusOr<std::unique_ptr<policy::Store>> store =
      policy::Store::FromPolicy(candidate.policy, candidate.source, vendor);
  if (!store.ok()) return fail(store.status());
  dispatch::Dispatcher dispatcher(**store, **host, nullptr, dispatch::DispatchOptions());
  auto session = dispatcher.NewSession();
  const std::shared_ptr<const policy::Snapshot> snapshot = (*store)->Current();
  std::map<ChangeKey, Change> changes;
  uint64_t checked = 0;
  for (const std::string& path : captures) {
    absl::StatusOr<std::unique_ptr<traplog::TrapLogReader>> reader =
        traplog::TrapLogReader::Open(path);
    if (!reader.ok()) return fail(reader.status());
    v1::TrapRecord rec;
    for (int64_t index = 1;; ++index) {
      absl::StatusOr<bool> more = (*reader)->Next(&rec);
      if (!more.ok()) return fail(more.status());
      if (!*more) break;
      if (!rec.has_expect()) continue;
      absl::StatusOr<emulator::Trap> trap = emulator::TrapFromProto(rec.trap());
      if (!trap.ok()) {
        return fail(absl::InvalidArgumentError(
            absl::StrCat(path, " record ", index, ": ", trap.status().message())));
      }
      emulator::Instruction insn;
      emulator::DecodeError error;
      const emulator::Outcome out = session->Handle(*trap, &insn, &error);
      ++checked;
      if (error != emulator::DecodeError::kOk) continue;
      const v1::Expectation& expect = rec.expect();
      const std::optional<uint64_t> read_value =
          expect.has_value() && out.kind == emulator::OutcomeKind::kCompleted
              ? std::optional<uint64_t>((out.GprAfter(emulator::kRdx, trap->regs) << 32) |
                                        (out.GprAfter(emulator::kRax, trap->regs) & 0xffffffffu))
              : std::nullopt;
      const std::string recorded =
          Word(expect.kind(),
               expect.has_vector() ? std::optional<v1::Vector>(expect.vector()) : std::nullopt,
               expect.has_value() ? std::optional<uint64_t>(expect.value()) : std::nullopt);
      const std::string now = Word(static_cast<v1::Outcome::Kind>(out.kind),
                                   out.kind == emulator::OutcomeKind::kException
                                       ? std::optional<v1::Vector>(
                                             static_cast<v1::Vector>(out.vector))
                                       : std::nullopt,
                                   read_value);
      if (recorded == now) continue;
      policy::RelaxedAccess a;
      uint32_t what = 0;
      bool write = false;
      if (ToRelaxed(*trap, insn, &a)) {
        what = a.index;
        write = a.kind == Kind::kMsrWrite || a.kind == Kind::kPortOut;
      } else if (insn.kind == emulator::InsnKind::kCpuid) {
        what = static_cast<uint32_t>(trap->regs.gpr[emulator::kRax]);
      }
      Change& c = changes[{trap->domain, static_cast<int>(insn.kind), what, write}];
      if (c.count == 0) {
        c.recorded = recorded;
        c.candidate = now;
        c.rule = RuleFor(*snapshot, trap->domain, insn, what, a.width);
        // An access that completed (or reached its device) would now fault.
        c.breaking = expect.kind() != v1::Outcome::EXCEPTION &&
                     out.kind == emulator::OutcomeKind::kException;
      }
      ++c.count;
    }
  }
  uint64_t breaking = 0;
  for (const auto& [key, c] : changes) {
    const auto& [domain, insn, index, write] = key;
    const std::string instruction(dispatch::InstructionLabel(insn));
    const bool msr = insn == static_cast<int>(emulator::InsnKind::kRdmsr) ||
                     insn == static_cast<int>(emulator::InsnKind::kWrmsr);
    const absl::string_view name = msr ? x86::MsrName(index) : "";
    breaking += c.breaking;
    if (JsonOutput()) {
      JsonLine()
          .Num("domain", domain)
          .Str("instruction", instruction)
          .Hex("index", index)
          .Str("access", write ? "write" : "read")
          .Str("recorded", c.recorded)
          .Str("candidate", c.candidate)
          .Num("count", static_cast<double>(c.count))
          .Str("rule", c.rule)
          .Bool("breaking", c.breaking)
          .Print();
    } else {
      std::printf("domain %u %s %s%s%s%s %s: recorded %s, candidate %s, %llu trap%s, rule %s%s\n",
                  domain, instruction.c_str(), HexString(index).c_str(),
                  name.empty() ? "" : " (", std::string(name).c_str(), name.empty() ? "" : ")",
                  write ? "write" : "read", c.recorded.c_str(), c.candidate.c_str(),
                  static_cast<unsigned long long>(c.count), c.count == 1 ? "" : "s",
                  c.rule.empty() ? "-" : c.rule.c_str(), c.breaking ? " BREAKING" : "");
    }
  }
  if (!JsonOutput()) {
    std::printf("%llu recorded traps checked: %zu access%s answered differently (%llu breaking)\n",
                static_cast<unsigned long long>(checked), changes.size(),
                changes.size() == 1 ? "" : "es", static_cast<unsigned long long>(breaking));
  }
  return changes.empty() ? kExitOk : 2;
}

// --- Drafts ------------------------------------------------------------------

policy::RelaxedAccess FromLearned(const v1::LearnedAccess& l) {
  policy::RelaxedAccess a;
  a.domain = l.domain();
  a.index = l.index();
  a.width = static_cast<uint8_t>(l.width() == 0 ? 1 : l.width());
  a.count = l.count();
  const bool write = l.access() == "write";
  const bool port = l.instruction() == "in" || l.instruction() == "out";
  a.kind = port ? (write ? Kind::kPortOut : Kind::kPortIn)
                : (write ? Kind::kMsrWrite : Kind::kMsrRead);
  a.first = absl::StrFormat("rip 0x%x (pvemud), enforcing %s by %s", l.rip(), l.enforcing(),
                            l.rule());
  return a;
}

}  // namespace

bool IsTrapLog(const std::string& path) {
  if (absl::EndsWith(path, ".textproto")) return true;
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == sizeof magic && absl::StartsWith(absl::string_view(magic, 8), "PVTRAPS");
}

absl::Status ReadCapture(const std::string& path, std::optional<uint32_t> domain,
                         policy::LearnedDrafter* learned,
                         const std::function<void(v1::TrapRecord&&)>& other) {
  ASSIGN_OR_RETURN(std::unique_ptr<traplog::TrapLogReader> reader,
                   traplog::TrapLogReader::Open(path));
  v1::TrapRecord rec;
  for (int64_t index = 1;; ++index) {
    ASSIGN_OR_RETURN(bool more, reader->Next(&rec));
    if (!more) return absl::OkStatus();
    if (!rec.has_expect() || !rec.expect().relaxed()) {
      other(std::move(rec));
      rec.Clear();
      continue;
    }
    absl::StatusOr<emulator::Trap> trap = emulator::TrapFromProto(rec.trap());
    if (!trap.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " record ", index, ": ", trap.status().message()));
    }
    emulator::Instruction insn;
    policy::RelaxedAccess a;
    if (!DecodeTrap(*trap, &insn) || !ToRelaxed(*trap, insn, &a)) continue;
    if (domain.has_value()) a.domain = *domain;
    a.first = absl::StrFormat("%s record %d, rip 0x%x", path, index, trap->regs.rip);
    learned->Add(a);
  }
}

void PrintLearnedDraft(const v1::Policy& draft, const std::string& header) {
  if (JsonOutput()) {
    for (const v1::Layer& layer : draft.domain()) {
      v1::Policy one;
      *one.add_domain() = layer;
      JsonLine()
          .Num("domain", layer.domain())
          .Num("msr_rules", layer.msr_size())
          .Num("io_ports", layer.io_port_size())
          .Str("layer", ToTextProto(one))
          .Print();
    }
    return;
  }
  std::fputs(header.c_str(), stdout);
  std::fputs(ToTextProto(draft).c_str(), stdout);
}

int RunSuggestFromServer() {
  v1::StatsRequest request;
  request.set_learned(true);
  if (std::string flag = absl::GetFlag(FLAGS_domain); !flag.empty()) {
    absl::StatusOr<uint32_t> id = ParseNumber32(flag, "--domain");
    if (!id.ok()) return UsageError(id.status().message());
    request.set_domain(*id);
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Connect();
  if (!channel.ok()) return Fail(channel.status());
  auto stub = v1::EmulatorService::NewStub(*channel);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::StatsResponse response;
  absl::Status status = FromGrpc(stub->GetStats(&context, request, &response));
  if (!status.ok()) return Fail(status);
  policy::LearnedDrafter drafter;
  for (const v1::LearnedAccess& l : response.learned()) drafter.Add(FromLearned(l));
  PrintLearnedDraft(
      drafter.Draft(),
      absl::StrCat("# Drafted by pvemuctl suggest from what pvemud's learning domains did that\n"
                   "# ENFORCE would fault (", response.learned_size(),
                   " distinct accesses, policy generation ", response.generation(), ").\n"
                   "# Each rule lets exactly those accesses complete as they did while learning;\n"
                   "# review, add it to the domain's layer, then `pvemuctl policy set-mode "
                   "--domain=N enforce`.\n"));
  return kExitOk;
}

int RunReplayChanges(const std::vector<std::string>& captures) {
  if (captures.empty()) {
    std::fprintf(stderr, "pvemuctl: replay --changes needs CAPTURE...\n");
    return kExitInvalid;
  }
  if (!absl::GetFlag(FLAGS_server).empty()) {
    if (!absl::GetFlag(FLAGS_policy).empty()) {
      std::fprintf(stderr, "pvemuctl: replay --changes takes the candidate from --policy=FILE or "
                           "the daemon's live policy with --server, not both\n");
      return kExitInvalid;
    }
    absl::StatusOr<DaemonPolicy> live = FetchDaemonPolicy();
    if (!live.ok()) {
      std::fprintf(stderr, "pvemuctl: %s\n", std::string(live.status().message()).c_str());
      return kExitInvalid;
    }
    return ReportChanges(live->loaded, live->vendor, captures);
  }
  const std::string candidate = absl::GetFlag(FLAGS_policy);
  if (candidate.empty()) {
    std::fprintf(stderr, "pvemuctl: replay --changes needs the candidate: --policy=FILE, or "
                         "--server=ADDR for the daemon's live policy\n");
    return kExitInvalid;
  }
  absl::StatusOr<policy::LoadedPolicy> loaded = policy::LoadPolicyFile(candidate);
  absl::StatusOr<v1::Vendor> vendor = HostVendorFromFlags();
  for (const absl::Status& s : {loaded.status(), vendor.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "pvemuctl: %s\n", std::string(s.message()).c_str());
      return kExitInvalid;
    }
  }
  return ReportChanges(*loaded, *vendor, captures);
}

int RunApplyDryRun(const std::string& textproto, const std::string& source_name,
                   const v1::LayerRef* layer) {
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "pvemuctl: %s\n", std::string(status.message()).c_str());
    return kExitInvalid;
  };
  const std::vector<std::string> captures = absl::GetFlag(FLAGS_against);
  if (captures.empty()) return fail(absl::InvalidArgumentError(
      "policy apply --dry-run needs --against=CAPTURE[,CAPTURE...]: the recorded traffic to "
      "check the edit against"));
  absl::StatusOr<policy::LoadedPolicy> file = policy::ParsePolicy(textproto, source_name);
  if (!file.ok()) return fail(file.status());
  absl::StatusOr<DaemonPolicy> live = FetchDaemonPolicy();
  if (!live.ok()) return fail(live.status());
  if (layer == nullptr) return ReportChanges(*file, live->vendor, captures);
  // As ApplyLayer composes: the live policy with one layer replaced.
  policy::LoadedPolicy composed = live->loaded;
  v1::Policy& p = composed.policy;
  if (layer->has_default_()) {
    *p.mutable_default_() = file->policy.default_();
  } else {
    if (file->policy.domain_size() != 1 || file->policy.domain(0).domain() != layer->domain()) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          source_name, ": a --domain=", layer->domain(), " edit must hold exactly one `domain { "
          "domain: ", layer->domain(), " ... }` layer")));
    }
    bool replaced = false;
    for (v1::Layer& l : *p.mutable_domain()) {
      if (l.domain() == layer->domain()) {
        l = file->policy.domain(0);
        replaced = true;
      }
    }
    if (!replaced) *p.add_domain() = file->policy.domain(0);
  }
  composed.source = policy::SourceMap(absl::StrCat(source_name, " over the daemon's policy"));
  if (absl::Status valid = policy::ValidatePolicy(p, composed.source); !valid.ok()) {
    return fail(valid);
  }
  return ReportChanges(composed, live->vendor, captures);
}

}  // namespace pvemu::client
