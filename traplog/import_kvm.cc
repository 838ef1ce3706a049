// The kvm-dmesg family (import.h): Linux KVM kernel messages, from dmesg,
// journalctl or syslog.
//
// Sources of the formats (wording checked against the kernel tree):
//
// Linux KVM, arch/x86/kvm/x86.c, svm.c, vmx.c, hyperv.c, x86.h:
//   vcpu_unimpl(vcpu, fmt) = "kvm [%i]: vcpu%i, guest rIP: 0x%lx " fmt
//     (before ~3.10 "kvm [%i]: vcpu%i " fmt; ~2.6 pr_unimpl
//     "kvm: %i: cpu%i " fmt); kvm_pr_unimpl(fmt) = "kvm [%i]: " fmt.
//   "ignored rdmsr: 0x%x" / "unhandled rdmsr: 0x%x"  (5.x+ add " data 0x%llx")
//   "ignored wrmsr: 0x%x data %llx" / "unhandled wrmsr: 0x%x data %llx"
//     (data without 0x in older kernels and the illumos port, 0x%llx later)
//   "Hyper-V unhandled rdmsr: 0x%x" / "Hyper-V unhandled wrmsr: ..." (#GP)
//   "disabled perfctr wrmsr: 0x%x data 0x%llx", "unimplemented perfctr
//     wrmsr: ..." (the write is dropped), "unimplemented wrmsr: 0x%x data
//     0x%llx" (svm MSR_VM_IGNNE, dropped)
//   "unimplemented HWCR wrmsr: 0x%llx", "unimplemented MMIO_CONF_BASE
//     wrmsr: 0x%llx" (#GP: the handler returns 1)
//   "%s: MSR_IA32_DEBUGCTLMSR 0x%llx, nop" and its svm/vmx variants
//     ("MSR_IA32_DEBUGCTL", "BTF in ...", "BTF|LBR in IA32_DEBUGCTLMSR")
//   6.3+ (kvm_pr_unimpl_wrmsr/rdmsr): "Unhandled WRMSR(0x%x) = 0x%llx",
//     "Unhandled RDMSR(0x%x)". Despite the word, most WRMSR callers drop the
//     write and continue (perfctr/evntsel, VM_IGNNE, DEBUGCTL, legacy MSRs);
//     only the Hyper-V MSRs (0x4000xxxx), HWCR 0xc0010015 and
//     MMIO_CONF_BASE 0xc0010058 return 1 (#GP). The RDMSR form is printed
//     only by the Hyper-V code, which returns 1 (#GP).
//   "... N callbacks suppressed" (printk rate limiting) is not a trap.

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "traplog/import.h"
#include "traplog/import_line_parser.h"

namespace pvemu::traplog::import_internal {
namespace {

namespace v1 = ::pvemu::v1;

constexpr uint32_t kMsrDebugCtl = 0x1d9;
constexpr uint32_t kMsrHwcr = 0xc0010015;
constexpr uint32_t kMsrMmioConfBase = 0xc0010058;

enum class Access { kRead, kWrite };
enum class Result { kCompleted, kGp, kByMsr };

struct KvmMessage {
  absl::string_view anchor;  // the fixed words just before the MSR
  Access access;
  Result result;
  uint32_t fixed_msr;  // nonzero: the message names no MSR number
};

// Longer anchors first where one contains another.
constexpr KvmMessage kKvmMessages[] = {
    {"ignored rdmsr:", Access::kRead, Result::kCompleted, 0},
    {"unhandled rdmsr:", Access::kRead, Result::kGp, 0},
    {"ignored wrmsr:", Access::kWrite, Result::kCompleted, 0},
    {"unhandled wrmsr:", Access::kWrite, Result::kGp, 0},
    {"disabled perfctr wrmsr:", Access::kWrite, Result::kCompleted, 0},
    {"unimplemented perfctr wrmsr:", Access::kWrite, Result::kCompleted, 0},
    {"unimplemented HWCR wrmsr:", Access::kWrite, Result::kGp, kMsrHwcr},
    {"unimplemented MMIO_CONF_BASE wrmsr:", Access::kWrite, Result::kGp,
     kMsrMmioConfBase},
    {"unimplemented wrmsr:", Access::kWrite, Result::kCompleted, 0},
    {"Unhandled RDMSR(", Access::kRead, Result::kGp, 0},
    {"Unhandled WRMSR(", Access::kWrite, Result::kByMsr, 0},
};

// What 6.3+ "Unhandled WRMSR(msr)" meant, from the callers of
// kvm_pr_unimpl_wrmsr(): only these return an error (#GP).
bool UnhandledWrmsrFaults(uint32_t msr) {
  return (msr >> 16) == 0x4000 || msr == kMsrHwcr || msr == kMsrMmioConfBase;
}

// The "kvm [PID]: vcpuN, guest rIP: 0xRIP" (or old "kvm: PID: cpuN") part.
Context KvmContext(absl::string_view prefix) {
  Context ctx;
  absl::string_view rest;
  uint32_t n;
  if (After(prefix, "kvm [", &rest) && ConsumeDec32(&rest, &n)) {
    ctx.domain = n;
  } else if (After(prefix, "kvm: ", &rest) && ConsumeDec32(&rest, &n) &&
             absl::ConsumePrefix(&rest, ": cpu")) {
    ctx.domain = n;
    if (ConsumeDec32(&rest, &n)) ctx.vcpu = n;
  }
  // The vCPU word follows "]: " (vcpu_unimpl); search after the pid so a
  // hostname like "vcpu7-host" in a journal prefix does not count.
  absl::string_view tail = prefix;
  After(prefix, "kvm [", &tail);
  if (After(tail, " vcpu", &rest) && ConsumeDec32(&rest, &n)) ctx.vcpu = n;
  uint64_t rip;
  if (After(tail, "guest rIP: ", &rest) && ConsumeHex(&rest, &rip)) {
    ctx.has_rip = true;
    ctx.rip = rip;
  }
  return ctx;
}

// Blanks, then a hex value; on failure *why is `what` + `problem`.
bool ConsumeValue(absl::string_view* rest, absl::string_view what,
                  absl::string_view problem, uint64_t* value,
                  std::string* why) {
  SkipSpaces(rest);
  if (ConsumeHex(rest, value)) return true;
  *why = absl::StrCat(what, problem);
  return false;
}

// The first of kKvmMessages in `line`, with the text after its anchor in
// *rest and the anchor's position in *at; nullptr when none is.
const KvmMessage* FindKvmMessage(absl::string_view line,
                                 absl::string_view* rest, size_t* at) {
  for (const KvmMessage& m : kKvmMessages) {
    if (After(line, m.anchor, rest, at)) return &m;
  }
  return nullptr;
}

// DEBUGCTL writes the kernel dropped: "...DEBUGCTL[MSR] 0x%llx, nop". For a
// line no kKvmMessages anchor matched.
Verdict ParseDebugCtlNop(absl::string_view line, v1::TrapRecord* rec,
                         std::string* why) {
  size_t dbg = line.find("DEBUGCTL");
  if (dbg == absl::string_view::npos || !absl::StrContains(line, ", nop")) {
    return Verdict::kSkip;
  }
  absl::string_view rest = line.substr(dbg + strlen("DEBUGCTL"));
  absl::ConsumePrefix(&rest, "MSR");
  uint64_t value;
  if (!ConsumeValue(&rest, "DEBUGCTL write",
                    ": missing the value before \", nop\"", &value, why)) {
    return Verdict::kMalformed;
  }
  MakeWrmsr(KvmContext(line.substr(0, dbg)), kMsrDebugCtl, value, rec);
  ExpectCompleted(rec);
  return Verdict::kTrap;
}

// The MSR index after the anchor (or the one the message is about), and the
// ')' that closes it in the 6.3+ "Unhandled RDMSR(0x%x)" forms.
bool ConsumeMsrIndex(const KvmMessage& msg, absl::string_view what,
                     absl::string_view* rest, uint32_t* msr, std::string* why) {
  *msr = msg.fixed_msr;
  if (*msr == 0 && !ConsumeHex32(rest, msr)) {
    *why = absl::StrCat(what, ": missing or invalid MSR index");
    return false;
  }
  if (absl::EndsWith(msg.anchor, "(")) {
    if (!absl::ConsumePrefix(rest, ")")) {
      *why = absl::StrCat(what, ": expected ')' after the MSR index");
      return false;
    }
  }
  return true;
}

// A read: #GP, or the value the guest got. `rest` follows the MSR index.
Verdict FinishKvmRdmsr(const KvmMessage& msg, absl::string_view what,
                       const Context& ctx, uint32_t msr, absl::string_view rest,
                       v1::TrapRecord* rec, std::string* why) {
  MakeRdmsr(ctx, msr, rec);
  if (msg.result == Result::kGp) {
    ExpectGp(rec);
    return Verdict::kTrap;
  }
  // 5.x+ print the value the guest got ("data 0x0"); older ones none: 0.
  uint64_t value = 0;
  SkipSpaces(&rest);
  if (absl::ConsumePrefix(&rest, "data") &&
      !ConsumeValue(&rest, what, ": invalid data value", &value, why)) {
    return Verdict::kMalformed;
  }
  ExpectRead(value, rec);
  return Verdict::kTrap;
}

// A write: "data VAL" (old kernels, illumos: hex without 0x), "= 0xVAL"
// (6.3+), or just the value for the messages with a fixed MSR; #GP or
// dropped as the message says. `rest` follows the MSR index.
Verdict FinishKvmWrmsr(const KvmMessage& msg, absl::string_view what,
                       const Context& ctx, uint32_t msr, absl::string_view rest,
                       v1::TrapRecord* rec, std::string* why) {
  SkipSpaces(&rest);
  if (!absl::ConsumePrefix(&rest, "data") && !absl::ConsumePrefix(&rest, "=") &&
      msg.fixed_msr == 0) {
    *why = absl::StrCat(what, ": missing the data value");
    return Verdict::kMalformed;
  }
  uint64_t value;
  if (!ConsumeValue(&rest, what, ": missing or invalid data value", &value,
                    why)) {
    return Verdict::kMalformed;
  }
  MakeWrmsr(ctx, msr, value, rec);
  bool gp = msg.result == Result::kGp ||
            (msg.result == Result::kByMsr && UnhandledWrmsrFaults(msr));
  if (gp) {
    ExpectGp(rec);
  } else {
    ExpectCompleted(rec);
  }
  return Verdict::kTrap;
}

// Finds the message and the MSR it names; FinishKvmRdmsr/FinishKvmWrmsr read
// the rest.
Verdict ParseKvmLine(absl::string_view line, v1::TrapRecord* rec,
                     std::string* why) {
  if (absl::StrContains(line, "callbacks suppressed")) return Verdict::kSkip;
  size_t at = 0;
  absl::string_view rest;
  const KvmMessage* msg = FindKvmMessage(line, &rest, &at);
  if (msg == nullptr) return ParseDebugCtlNop(line, rec, why);

  // "ignored rdmsr", "Unhandled WRMSR": the anchor without its ':' or '('.
  const absl::string_view what = msg->anchor.substr(0, msg->anchor.size() - 1);
  Context ctx = KvmContext(line.substr(0, at));
  SkipSpaces(&rest);
  uint32_t msr;
  if (!ConsumeMsrIndex(*msg, what, &rest, &msr, why)) {
    return Verdict::kMalformed;
  }
  if (msg->access == Access::kRead) {
    return FinishKvmRdmsr(*msg, what, ctx, msr, rest, rec, why);
  }
  return FinishKvmWrmsr(*msg, what, ctx, msr, rest, rec, why);
}

// Cheap test for auto-detection: could this be a KVM MSR message?
bool LooksLikeKvm(absl::string_view line) {
  return absl::StrContains(line, "rdmsr") || absl::StrContains(line, "wrmsr") ||
         absl::StrContains(line, "MSR(") || absl::StrContains(line, "DEBUGCTL");
}

}  // namespace

std::unique_ptr<LineParser> NewKvmDmesgParser() {
  return std::make_unique<StatelessLineParser>(kImportFormatKvm, &LooksLikeKvm,
                                               &ParseKvmLine);
}

}  // namespace pvemu::traplog::import_internal
