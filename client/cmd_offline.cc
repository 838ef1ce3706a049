// Offline commands on the libraries: validate, explain, emulate.
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/hex.h"
#include "client/domain_policy_view.h"
#include "client/offline.h"
#include "emulator/decoder.h"
#include "emulator/trap_convert.h"
#include "enforce/kvm_msr_filter.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "x86/msr_catalog.h"
#include "policy/explain.h"
#include "policy/loader.h"
#include "base/status_macros.h"
#include "pvemu/v1/service.grpc.pb.h"

namespace pvemu::client {
namespace {

// explain --kvm: whether the MSR exits to pvemu on KVM (enforce::ExplainKvm).
struct KvmNote {
  bool exits = false;
  std::string sentence;
};

void PrintExplanation(const v1::ExplainResponse& e, const std::optional<KvmNote>& kvm) {
  if (JsonOutput()) {
    JsonLine rule;
    rule.Str("layer", e.layer()).Str("source", e.source());
    JsonLine line;
    line.Num("domain", e.domain());
    if (e.has_port()) {
      line.Hex("port", e.port());
    } else {
      line.Hex("msr", e.msr());
    }
    if (!e.name().empty()) line.Str("name", e.name());
    line.Str("access", e.access()).Str("action", e.action());
    if (e.has_value()) line.Hex("value", e.value());
    line.Obj("rule", rule);
    if (!e.detail().empty()) line.Str("detail", e.detail());
    if (!e.host_note().empty()) line.Str("host_note", e.host_note());
    if (kvm.has_value()) {
      JsonLine note;
      note.Bool("exits", kvm->exits).Str("detail", kvm->sentence);
      line.Obj("kvm", note);
    }
    line.Print();
    return;
  }
  const std::string target = e.has_port()
                                 ? absl::StrFormat("port 0x%x", e.port())
                                 : absl::StrFormat("msr 0x%x%s", e.msr(),
                                                   e.name().empty() ? "" : absl::StrCat(" (", e.name(), ")"));
  std::printf("domain %u %s %s: %s%s\n  decided by %s%s%s\n", e.domain(), e.access().c_str(),
              target.c_str(),
              e.action().c_str(),
              e.has_value() ? absl::StrCat(" value ", HexString(e.value())).c_str() : "",
              e.layer().c_str(), e.source().empty() ? "" : absl::StrCat(" rule at ", e.source()).c_str(),
              e.detail().empty() ? "" : absl::StrCat("\n  ", e.detail()).c_str());
  if (!e.host_note().empty()) std::printf("  on this host: %s\n", e.host_note().c_str());
  if (kvm.has_value()) std::printf("  kvm: %s\n", kvm->sentence.c_str());
}

absl::StatusOr<KvmNote> ExplainOnKvm(const policy::Snapshot& snapshot, uint32_t domain,
                                     uint32_t msr) {
  ASSIGN_OR_RETURN(enforce::MsrFilter filter, KvmFilterFor(snapshot, domain));
  return KvmNote{filter.Exits(msr), enforce::ExplainKvm(filter, snapshot.ForDomain(domain), msr)};
}

// The daemon's answer (the Explain RPC) with, for --kvm, the KVM note from
// the same generation of its policy (an edit between the two calls is
// retried, so the two halves never describe different policies).
absl::Status ExplainOnline(const v1::ExplainRequest& request, bool with_kvm) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, Connect());
  auto stub = v1::PolicyService::NewStub(channel);
  constexpr int kAttempts = 3;
  uint64_t explained = 0;
  uint64_t compiled = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    v1::ExplainResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    RETURN_IF_ERROR(FromGrpc(stub->Explain(&context, request, &response)));
    if (!with_kvm) {
      PrintExplanation(response, std::nullopt);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::shared_ptr<const policy::Snapshot> snapshot, DaemonSnapshot());
    explained = response.generation();
    compiled = snapshot->generation();
    if (explained != compiled) continue;
    ASSIGN_OR_RETURN(KvmNote note, ExplainOnKvm(*snapshot, request.domain(), response.msr()));
    PrintExplanation(response, note);
    return absl::OkStatus();
  }
  return absl::AbortedError(absl::StrCat(
      "explain --kvm: the daemon's policy kept changing while it was read (generation ",
      explained, " explained, ", compiled, " read for KVM, ", kAttempts,
      " times); run the command again"));
}

absl::Status Explain() {
  std::string domain_flag = absl::GetFlag(FLAGS_domain);
  std::string msr_flag = absl::GetFlag(FLAGS_msr);
  std::string port_flag = absl::GetFlag(FLAGS_port);
  ASSIGN_OR_RETURN(uint32_t domain, ParseNumber32(domain_flag, "--domain"));
  uint32_t msr = 0;
  std::optional<uint16_t> port;
  const uint32_t width = absl::GetFlag(FLAGS_width);
  if (!port_flag.empty()) {
    ASSIGN_OR_RETURN(uint32_t p, ParseNumber32(port_flag, "--port"));
    if (p > 0xffff) {
      return absl::InvalidArgumentError(
          absl::StrCat("--port: ", port_flag, " is not an I/O port; ports are 0..0xffff"));
    }
    if (width != 1 && width != 2 && width != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("--width: ", width, " is not an I/O access width; use 1, 2 or 4"));
    }
    port = static_cast<uint16_t>(p);
  } else {
    ASSIGN_OR_RETURN(msr, ParseMsrArg(msr_flag, "--msr"));
  }
  std::optional<uint64_t> write;
  if (std::string w = absl::GetFlag(FLAGS_write); !w.empty()) {
    ASSIGN_OR_RETURN(write, ParseNumber(w, "--write"));
  }
  const bool with_kvm = absl::GetFlag(FLAGS_kvm);
  if (!absl::GetFlag(FLAGS_server).empty()) {
    // The daemon's live policy.
    v1::ExplainRequest request;
    request.set_domain(domain);
    if (port.has_value()) {
      request.set_port(*port);
      request.set_port_width(width);
    } else {
      request.set_msr(msr_flag);
    }
    if (write.has_value()) request.set_write_value(*write);
    return ExplainOnline(request, with_kvm);
  }
  ASSIGN_OR_RETURN(v1::Vendor vendor, HostVendorFromFlags());
  ASSIGN_OR_RETURN(auto store, StoreFromFlags(vendor));
  std::shared_ptr<const policy::Snapshot> snapshot = store->Current();
  const policy::Explanation explanation =
      port.has_value()
          ? policy::ExplainPort(*snapshot, domain, *port, static_cast<uint8_t>(width), write)
          : policy::ExplainMsr(*snapshot, domain, msr, write);
  v1::ExplainResponse response;
  policy::ExplanationToProto(explanation, *snapshot, &response);
  std::optional<KvmNote> note;
  if (with_kvm) {
    ASSIGN_OR_RETURN(note, ExplainOnKvm(*snapshot, domain, msr));
  }
  PrintExplanation(response, note);
  return absl::OkStatus();
}

// The registers the trap starts with, from --rax ... --rflags: a table, so
// that each flag is parsed, and named in its error, the same way.
absl::Status FillRegsFromFlags(v1::Registers* regs) {
  struct RegFlag {
    const absl::Flag<std::string>* flag;
    void (v1::Registers::*set)(uint64_t);
    const char* name;
  };
  const RegFlag reg_flags[] = {
      {&FLAGS_rax, &v1::Registers::set_rax, "--rax"},
      {&FLAGS_rbx, &v1::Registers::set_rbx, "--rbx"},
      {&FLAGS_rcx, &v1::Registers::set_rcx, "--rcx"},
      {&FLAGS_rdx, &v1::Registers::set_rdx, "--rdx"},
      {&FLAGS_rsi, &v1::Registers::set_rsi, "--rsi"},
      {&FLAGS_rdi, &v1::Registers::set_rdi, "--rdi"},
      {&FLAGS_rip, &v1::Registers::set_rip, "--rip"},
      {&FLAGS_rflags, &v1::Registers::set_rflags, "--rflags"},
  };
  for (const RegFlag& r : reg_flags) {
    std::string text = absl::GetFlag(*r.flag);
    // --rcx also takes an MSR name, the common case for RDMSR/WRMSR.
    absl::StatusOr<uint64_t> v = ParseNumber(text, r.name);
    if (!v.ok() && r.flag == &FLAGS_rcx) {
      absl::StatusOr<uint32_t> msr = x86::ParseMsr(text);
      if (msr.ok()) v = *msr;
    }
    if (!v.ok()) return v.status();
    (regs->*r.set)(*v);
  }
  return absl::OkStatus();
}

// The trap emulate runs, from its flags: where it happened (--domain,
// --vcpu, --cpl, --mode), what trapped (--bytes), the registers and
// --host-tsc. Built as the v1 message and converted as the daemon converts
// an Emulate request, so that both check a trap the same way.
absl::StatusOr<emulator::Trap> TrapFromFlags() {
  std::string bytes_flag = absl::GetFlag(FLAGS_bytes);
  std::string domain_flag = absl::GetFlag(FLAGS_domain);
  if (bytes_flag.empty() || domain_flag.empty()) {
    return absl::InvalidArgumentError("emulate needs --domain=N and --bytes=HEX");
  }
  v1::Trap msg;
  ASSIGN_OR_RETURN(uint32_t domain, ParseNumber32(domain_flag, "--domain"));
  msg.set_domain(domain);
  ASSIGN_OR_RETURN(uint32_t vcpu, ParseNumber32(absl::GetFlag(FLAGS_vcpu), "--vcpu"));
  msg.set_vcpu(vcpu);
  ASSIGN_OR_RETURN(uint32_t cpl, ParseNumber32(absl::GetFlag(FLAGS_cpl), "--cpl"));
  msg.set_cpl(cpl);
  ASSIGN_OR_RETURN(emulator::Mode mode, ParseModeFlag());
  msg.set_mode(emulator::ModeToProto(mode));
  ASSIGN_OR_RETURN(std::string bytes, ParseHexBytes(bytes_flag));
  msg.set_insn(bytes);
  RETURN_IF_ERROR(FillRegsFromFlags(msg.mutable_regs()));
  ASSIGN_OR_RETURN(uint64_t tsc, ParseNumber(absl::GetFlag(FLAGS_host_tsc), "--host-tsc"));
  msg.set_host_tsc(tsc);
  return emulator::TrapFromProto(msg);
}

// Handles `trap` on the offline dispatcher (the policy and host the flags
// name) and fills the outcome as the daemon fills its Emulate answer, so
// that the two say the same of one trap.
absl::StatusOr<v1::Outcome> HandleOffline(const emulator::Trap& trap) {
  ASSIGN_OR_RETURN(Offline offline, OfflineFromFlags());
  auto session = offline.dispatcher->NewSession();
  emulator::Instruction insn;
  emulator::DecodeError error;
  emulator::Outcome outcome = session->Handle(trap, &insn, &error);
  v1::Outcome out;
  dispatch::FillOutcome(trap, outcome, insn, error, session->generation(), &out);
  return out;
}

// -o json: the outcome as one JSON line, every key present (null when it does
// not apply), for scripts.
void PrintOutcomeJson(const v1::Outcome& out) {
  JsonLine line;
  line.Str("outcome", v1::Outcome::Kind_Name(out.kind()));
  if (out.has_instruction()) {
    line.Str("mnemonic", out.instruction().mnemonic());
  } else {
    line.Null("mnemonic");
  }
  if (out.kind() == v1::Outcome::EXCEPTION) {
    JsonLine exc;
    exc.Str("vector", v1::Vector_Name(out.exception().vector()));
    if (out.exception().has_error_code()) {
      exc.Num("error_code", out.exception().error_code());
    } else {
      exc.Null("error_code");
    }
    line.Obj("exception", exc);
  } else {
    line.Null("exception");
  }
  JsonLine r;
  const v1::Registers& o = out.regs();
  r.Hex("rax", o.rax()).Hex("rbx", o.rbx()).Hex("rcx", o.rcx()).Hex("rdx", o.rdx());
  r.Hex("rsi", o.rsi()).Hex("rdi", o.rdi()).Hex("rip", o.rip()).Hex("rflags", o.rflags());
  line.Obj("regs", r);
  line.Bool("write_dropped", out.write_dropped());
  if (out.has_instruction() && (out.instruction().mnemonic() == "in" ||
                                out.instruction().mnemonic() == "out")) {
    // Which io_port case applied: outside the ranges (all ones / dropped),
    // or granted (a host device, or DEVICE_IO for the device model).
    line.Bool("port_denied", out.port_denied());
  }
  line.Str("detail", out.detail());
  line.Print();
}

// The outcome for a reader: its kind, the detail, and rax, rcx, rdx and rip
// after it.
void PrintOutcomeText(const v1::Outcome& out) {
  const v1::Registers& o = out.regs();
  std::printf("%s\n  %s\n  rax=%s rcx=%s rdx=%s rip=%s\n",
              v1::Outcome::Kind_Name(out.kind()).c_str(), out.detail().c_str(),
              HexString(o.rax()).c_str(), HexString(o.rcx()).c_str(),
              HexString(o.rdx()).c_str(), HexString(o.rip()).c_str());
}

// emulate: one trap from the flags, handled offline, its outcome printed.
absl::Status Emulate() {
  ASSIGN_OR_RETURN(emulator::Trap trap, TrapFromFlags());
  ASSIGN_OR_RETURN(v1::Outcome out, HandleOffline(trap));
  if (JsonOutput()) {
    PrintOutcomeJson(out);
  } else {
    PrintOutcomeText(out);
  }
  return absl::OkStatus();
}

}  // namespace

int RunValidate(const Args& args) {
  if (args.empty()) return UsageError("validate needs FILE...");
  bool all_valid = true;
  for (const std::string& file : args) {
    absl::StatusOr<policy::LoadedPolicy> loaded = policy::LoadPolicyFile(file);
    all_valid &= loaded.ok();
    if (JsonOutput()) {
      JsonLine line;
      line.Str("file", file).Bool("valid", loaded.ok());
      if (!loaded.ok()) line.Str("errors", loaded.status().message());
      line.Print();
    } else if (loaded.ok()) {
      std::printf("%s: ok\n", file.c_str());
    }
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    }
  }
  return all_valid ? kExitOk : kExitInvalid;
}

int RunExplain(const Args& args) {
  if (!args.empty()) return UsageError("explain takes flags only (--domain, --msr, ...)");
  if (absl::GetFlag(FLAGS_domain).empty() ||
      absl::GetFlag(FLAGS_msr).empty() == absl::GetFlag(FLAGS_port).empty()) {
    return UsageError("explain needs --domain=N and one of --msr=MSR or --port=P");
  }
  if (absl::GetFlag(FLAGS_kvm)) {
    if (!absl::GetFlag(FLAGS_port).empty()) {
      // KVM has no port filter: every IN and OUT a guest makes exits to the
      // VMM (KVM_EXIT_IO), so there is nothing KVM-specific to say.
      return UsageError(
          "explain --kvm is for MSRs: on KVM every port access exits to the VMM, which "
          "decides it as explain --port says; drop --kvm or use --msr");
    }
    if (std::string conflict = ServerFlagConflict("explain --kvm"); !conflict.empty()) {
      return UsageError(conflict);
    }
  }
  absl::Status status = Explain();
  return status.ok() ? kExitOk : Fail(status);
}

int RunEmulate(const Args& args) {
  if (!args.empty()) return UsageError("emulate takes flags only (--domain, --bytes, ...)");
  if (absl::GetFlag(FLAGS_domain).empty() || absl::GetFlag(FLAGS_bytes).empty()) {
    return UsageError("emulate needs --domain=N and --bytes=HEX");
  }
  absl::Status status = Emulate();
  return status.ok() ? kExitOk : Fail(status);
}

}  // namespace pvemu::client
