// Log importers. Each family is parsed by hand-written tokenising keyed on the
// fixed words of the printk format that produced the line, searched anywhere
// in the line: whatever the log tool put in front (dmesg "[ 12.34]", journal
// "Sep 04 22:56:17 host kernel:", syslog "[ID 123 kern.notice]", "(XEN) [ts]")
// is then irrelevant, and a new prefix style needs no code.
//
// Sources of the formats (wording checked against the kernel and Xen trees):
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
// Xen, xen/arch/x86/pv/emul-priv-op.c, hvm/{hvm,vmx/vmx,svm/svm}.c, traps.c:
//   gdprintk(fmt) = "%s:%d:%pv " fmt (older "%s:%d:d%d " fmt);
//   gprintk(fmt) = "%pv " fmt; %pv prints "d0v6", or "d[IDLE]v0" for Xen.
//   "RDMSR 0x%08x unimplemented", "WRMSR 0x%08x val 0x%016lx unimplemented"
//     (#GP), "faking RDMSR 0x%08x" (read as 0),
//   "Domain attempted WRMSR %p from %08x:%08x to %08x:%08x." (3.x/4.0),
//   "Domain attempted WRMSR %08x from 0x%016lx to 0x%016lx" (4.x), with or
//     without "0x" and the final dot: the write was dropped (completed).
// ftrace (include/trace/events/kvm.h, arch/x86/kvm/trace.h):
//   kvm_msr:   "msr_%s %x = 0x%llx%s"  (read|write, " (#GP)" on a fault)
//   kvm_cpuid: "func %x idx %x rax %lx rbx %lx rcx %lx rdx %lx, cpuid entry
//              %s%s" (older: no idx; newer suffixes accepted)
//   kvm_pio:   "pio_%s at 0x%x size %d count %d val 0x%x %s" (IN/OUT with the
//              port in DX; count > 1 is a string instruction, not imported;
//              older kernels print no val)
//   kvm_exit:  "vcpu %u reason %s rip 0x%lx info1 ..." (older: no vcpu)
#include "traplog/import.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/textproto.h"

namespace pvemu::traplog {

namespace {

namespace v1 = ::pvemu::v1;

// Notes keep at most this much of the line.
constexpr size_t kMaxNoteBytes = 2048;
// Per-task ftrace context is bounded: a hostile trace cannot grow it forever.
constexpr size_t kMaxFtraceTasks = 1 << 16;

constexpr uint32_t kMsrDebugCtl = 0x1d9;
constexpr uint32_t kMsrHwcr = 0xc0010015;
constexpr uint32_t kMsrMmioConfBase = 0xc0010058;

enum class Family { kKvm, kXen, kFtrace };

absl::string_view FamilyName(Family f) {
  switch (f) {
    case Family::kKvm:
      return kImportFormatKvm;
    case Family::kXen:
      return kImportFormatXen;
    case Family::kFtrace:
      return kImportFormatFtrace;
  }
  return "?";
}

// What one parser made of one line.
enum class Verdict { kSkip, kTrap, kMalformed };

// ---------------------------------------------------------------------------
// Tokenising helpers. All take the remaining text by pointer and advance it
// only on success.

bool IsHexDigit(char c) {
  return absl::ascii_isxdigit(static_cast<unsigned char>(c));
}
bool IsDigit(char c) {
  return absl::ascii_isdigit(static_cast<unsigned char>(c));
}
bool IsWordChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

void SkipSpaces(absl::string_view* s) {
  *s = absl::StripLeadingAsciiWhitespace(*s);
}

// A hex number with optional "0x"; at most 64 bits of significant digits and
// not glued to a following letter or digit ("0x64g" is not a number).
bool ConsumeHex(absl::string_view* s, uint64_t* value) {
  absl::string_view t = *s;
  if (t.size() >= 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X') &&
      t.size() > 2 && IsHexDigit(t[2])) {
    t.remove_prefix(2);
  }
  size_t n = 0;
  while (n < t.size() && IsHexDigit(t[n])) ++n;
  if (n == 0) return false;
  if (n < t.size() && IsWordChar(t[n])) return false;
  size_t first = 0;
  while (first + 1 < n && t[first] == '0') ++first;
  if (n - first > 16) return false;
  uint64_t v = 0;
  for (size_t i = first; i < n; ++i) {
    char c = absl::ascii_tolower(static_cast<unsigned char>(t[i]));
    v = (v << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  *value = v;
  s->remove_prefix(static_cast<size_t>(t.data() - s->data()) + n);
  return true;
}

bool ConsumeHex32(absl::string_view* s, uint32_t* value) {
  uint64_t v;
  absl::string_view t = *s;
  if (!ConsumeHex(&t, &v) || v > 0xffffffffu) return false;
  *value = static_cast<uint32_t>(v);
  *s = t;
  return true;
}

bool ConsumeDec(absl::string_view* s, uint64_t* value) {
  size_t n = 0;
  while (n < s->size() && IsDigit((*s)[n])) ++n;
  if (n == 0 || n > 18) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i)
    v = v * 10 + static_cast<uint64_t>((*s)[i] - '0');
  *value = v;
  s->remove_prefix(n);
  return true;
}

bool ConsumeDec32(absl::string_view* s, uint32_t* value) {
  uint64_t v;
  absl::string_view t = *s;
  if (!ConsumeDec(&t, &v) || v > 0xffffffffu) return false;
  *value = static_cast<uint32_t>(v);
  *s = t;
  return true;
}

// Finds `word` in `s` and returns the text after it (npos-safe).
bool After(absl::string_view s, absl::string_view word, absl::string_view* rest,
           size_t* at = nullptr) {
  size_t pos = s.find(word);
  if (pos == absl::string_view::npos) return false;
  *rest = s.substr(pos + word.size());
  if (at != nullptr) *at = pos;
  return true;
}

// Text for a proto3 string field, which must be valid UTF-8: valid sequences
// are kept, anything else (and control characters) becomes "\xNN".
std::string CleanText(absl::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(s.size() < max_bytes ? s.size() : max_bytes);
  size_t i = 0;
  while (i < s.size()) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\t') {
      out += ' ';
      ++i;
      continue;
    }
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    }
    bool valid = len > 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) valid = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (valid) {
      // No overlong forms, no surrogates, nothing past U+10FFFF.
      if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
          (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
        valid = false;
      }
    }
    if (valid) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      ++i;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Record builders.

struct Context {
  uint32_t domain = 0;
  uint32_t vcpu = 0;
  bool has_rip = false;
  uint64_t rip = 0;
};

void InitTrap(const Context& ctx, absl::string_view insn, v1::TrapRecord* rec) {
  v1::Trap* t = rec->mutable_trap();
  t->set_domain(ctx.domain);
  t->set_vcpu(ctx.vcpu);
  t->set_mode(v1::MODE_64);
  t->set_cpl(0);
  t->set_insn(std::string(insn));
  if (ctx.has_rip) t->mutable_regs()->set_rip(ctx.rip);
}

void MakeRdmsr(const Context& ctx, uint32_t msr, v1::TrapRecord* rec) {
  InitTrap(ctx, absl::string_view("\x0f\x32", 2), rec);
  rec->mutable_trap()->mutable_regs()->set_rcx(msr);
}

void MakeWrmsr(const Context& ctx, uint32_t msr, uint64_t value,
               v1::TrapRecord* rec) {
  InitTrap(ctx, absl::string_view("\x0f\x30", 2), rec);
  v1::Registers* r = rec->mutable_trap()->mutable_regs();
  r->set_rcx(msr);
  r->set_rax(value & 0xffffffffu);
  r->set_rdx(value >> 32);
}

void MakeCpuid(const Context& ctx, uint32_t leaf, uint32_t subleaf,
               v1::TrapRecord* rec) {
  InitTrap(ctx, absl::string_view("\x0f\xa2", 2), rec);
  v1::Registers* r = rec->mutable_trap()->mutable_regs();
  r->set_rax(leaf);
  r->set_rcx(subleaf);
}

void ExpectGp(v1::TrapRecord* rec) {
  rec->mutable_expect()->set_kind(v1::Outcome::EXCEPTION);
  rec->mutable_expect()->set_vector(v1::GP);
}

void ExpectCompleted(v1::TrapRecord* rec) {
  rec->mutable_expect()->set_kind(v1::Outcome::COMPLETED);
}

void ExpectRead(uint64_t value, v1::TrapRecord* rec) {
  rec->mutable_expect()->set_kind(v1::Outcome::COMPLETED);
  rec->mutable_expect()->set_value(value);
}

// ---------------------------------------------------------------------------
// KVM kernel messages.

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

Verdict ParseKvmLine(absl::string_view line, v1::TrapRecord* rec,
                     std::string* why) {
  if (absl::StrContains(line, "callbacks suppressed")) return Verdict::kSkip;

  const KvmMessage* msg = nullptr;
  size_t at = 0;
  absl::string_view rest;
  for (const KvmMessage& m : kKvmMessages) {
    if (After(line, m.anchor, &rest, &at)) {
      msg = &m;
      break;
    }
  }

  // DEBUGCTL writes the kernel dropped: "...DEBUGCTL[MSR] 0x%llx, nop".
  if (msg == nullptr) {
    size_t dbg = line.find("DEBUGCTL");
    if (dbg == absl::string_view::npos || !absl::StrContains(line, ", nop")) {
      return Verdict::kSkip;
    }
    rest = line.substr(dbg + strlen("DEBUGCTL"));
    absl::ConsumePrefix(&rest, "MSR");
    SkipSpaces(&rest);
    uint64_t value;
    if (!ConsumeHex(&rest, &value)) {
      *why = "DEBUGCTL write: missing the value before \", nop\"";
      return Verdict::kMalformed;
    }
    MakeWrmsr(KvmContext(line.substr(0, dbg)), kMsrDebugCtl, value, rec);
    ExpectCompleted(rec);
    return Verdict::kTrap;
  }

  // "ignored rdmsr", "Unhandled WRMSR": the anchor without its ':' or '('.
  const absl::string_view what = msg->anchor.substr(0, msg->anchor.size() - 1);
  Context ctx = KvmContext(line.substr(0, at));
  SkipSpaces(&rest);

  uint32_t msr = msg->fixed_msr;
  if (msr == 0 && !ConsumeHex32(&rest, &msr)) {
    *why = absl::StrCat(what, ": missing or invalid MSR index");
    return Verdict::kMalformed;
  }
  if (absl::EndsWith(msg->anchor, "(")) {
    if (!absl::ConsumePrefix(&rest, ")")) {
      *why = absl::StrCat(what, ": expected ')' after the MSR index");
      return Verdict::kMalformed;
    }
  }

  if (msg->access == Access::kRead) {
    MakeRdmsr(ctx, msr, rec);
    if (msg->result == Result::kGp) {
      ExpectGp(rec);
    } else {
      // 5.x+ print the value the guest got ("data 0x0"); older ones none: 0.
      uint64_t value = 0;
      absl::string_view data = rest;
      SkipSpaces(&data);
      if (absl::ConsumePrefix(&data, "data")) {
        SkipSpaces(&data);
        if (!ConsumeHex(&data, &value)) {
          *why = absl::StrCat(what, ": invalid data value");
          return Verdict::kMalformed;
        }
      }
      ExpectRead(value, rec);
    }
    return Verdict::kTrap;
  }

  // Writes: "data VAL" (old kernels, illumos: hex without 0x), "= 0xVAL"
  // (6.3+), or just the value for the messages with a fixed MSR.
  SkipSpaces(&rest);
  if (!absl::ConsumePrefix(&rest, "data") && !absl::ConsumePrefix(&rest, "=") &&
      msg->fixed_msr == 0) {
    *why = absl::StrCat(what, ": missing the data value");
    return Verdict::kMalformed;
  }
  SkipSpaces(&rest);
  uint64_t value;
  if (!ConsumeHex(&rest, &value)) {
    *why = absl::StrCat(what, ": missing or invalid data value");
    return Verdict::kMalformed;
  }
  MakeWrmsr(ctx, msr, value, rec);
  bool gp = msg->result == Result::kGp ||
            (msg->result == Result::kByMsr && UnhandledWrmsrFaults(msr));
  if (gp) {
    ExpectGp(rec);
  } else {
    ExpectCompleted(rec);
  }
  return Verdict::kTrap;
}

// Cheap test for auto-detection: could this be a KVM MSR message?
bool LooksLikeKvm(absl::string_view line) {
  return absl::StrContains(line, "rdmsr") || absl::StrContains(line, "wrmsr") ||
         absl::StrContains(line, "MSR(") || absl::StrContains(line, "DEBUGCTL");
}

// ---------------------------------------------------------------------------
// Xen console.

// Parses the "%pv" / "d%d" that gdprintk/gprintk put before the message:
// the last ':'-separated part of the token before it. Returns false for a
// non-numeric domain ("d[IDLE]v0"): not a guest we can name.
enum class DomainSpec { kNone, kOk, kNotNumeric };

DomainSpec XenDomain(absl::string_view before, Context* ctx) {
  before = absl::StripTrailingAsciiWhitespace(before);
  size_t sp = before.find_last_of(" \t");
  absl::string_view tok =
      sp == absl::string_view::npos ? before : before.substr(sp + 1);
  // "file.c:123:d0v1", "traps.c:2308:d0", "d0v1", "d0:v1" (old spelling).
  absl::string_view spec = tok;
  size_t colon = tok.rfind(':');
  if (colon != absl::string_view::npos) {
    spec = tok.substr(colon + 1);
    if (!spec.empty() && spec[0] == 'v' && colon > 0) {
      size_t prev = tok.rfind(':', colon - 1);
      absl::string_view d =
          tok.substr(prev == absl::string_view::npos ? 0 : prev + 1,
                     colon - (prev == absl::string_view::npos ? 0 : prev + 1));
      if (!d.empty() && d[0] == 'd') {
        uint32_t dom, vcpu;
        absl::string_view dd = d.substr(1), vv = spec.substr(1);
        if (ConsumeDec32(&dd, &dom) && dd.empty() && ConsumeDec32(&vv, &vcpu) &&
            vv.empty()) {
          ctx->domain = dom;
          ctx->vcpu = vcpu;
          return DomainSpec::kOk;
        }
      }
    }
  }
  if (spec.size() < 2 || spec[0] != 'd') return DomainSpec::kNone;
  if (spec[1] == '[') return DomainSpec::kNotNumeric;
  absl::string_view t = spec.substr(1);
  uint32_t dom;
  if (!ConsumeDec32(&t, &dom)) return DomainSpec::kNone;
  uint32_t vcpu = 0;
  if (absl::ConsumePrefix(&t, "v")) {
    if (!ConsumeDec32(&t, &vcpu)) return DomainSpec::kNone;
  }
  if (!t.empty()) return DomainSpec::kNone;
  ctx->domain = dom;
  ctx->vcpu = vcpu;
  return DomainSpec::kOk;
}

// "%08x:%08x" (high:low) or one 64-bit hex number.
bool ConsumeXenValue(absl::string_view* s, uint64_t* value) {
  absl::string_view t = *s;
  uint64_t hi, lo;
  if (!ConsumeHex(&t, &hi)) return false;
  if (absl::ConsumePrefix(&t, ":")) {
    if (hi > 0xffffffffu || !ConsumeHex(&t, &lo) || lo > 0xffffffffu)
      return false;
    *value = (hi << 32) | lo;
  } else {
    *value = hi;
  }
  *s = t;
  return true;
}

Verdict ParseXenLine(absl::string_view line, v1::TrapRecord* rec,
                     std::string* why) {
  absl::string_view body = line;
  absl::string_view rest;
  size_t at;

  // Older Xen: "Non-priv domain attempted WRMSR(%p,%08lx,%08lx)." — dropped.
  if (After(body, "domain attempted WRMSR(", &rest, &at) ||
      After(body, "domain attempted RDMSR(", &rest, &at)) {
    bool write = body[at + strlen("domain attempted ")] == 'W';
    uint32_t msr, eax, edx;
    if (!ConsumeHex32(&rest, &msr) || !absl::ConsumePrefix(&rest, ",") ||
        !ConsumeHex32(&rest, &eax) || !absl::ConsumePrefix(&rest, ",") ||
        !ConsumeHex32(&rest, &edx)) {
      *why = "Non-priv domain attempted MSR access: expected (MSR,EAX,EDX)";
      return Verdict::kMalformed;
    }
    Context ctx;
    absl::string_view d;
    uint32_t dom;
    if (After(body, "DOM", &d) && ConsumeDec32(&d, &dom)) ctx.domain = dom;
    if (write) {
      MakeWrmsr(ctx, msr, (uint64_t{edx} << 32) | eax, rec);
      ExpectCompleted(rec);
    } else {
      // What the guest read is not in the line.
      MakeRdmsr(ctx, msr, rec);
    }
    return Verdict::kTrap;
  }

  enum class Kind {
    kRdmsrUnimpl,
    kWrmsrUnimpl,
    kFaking,
    kAttemptedWrmsr,
    kAttemptedRdmsr
  };
  Kind kind;
  absl::string_view what;
  if (After(body, "faking RDMSR", &rest, &at)) {
    kind = Kind::kFaking;
    what = "faking RDMSR";
  } else if (After(body, "Domain attempted WRMSR", &rest, &at)) {
    kind = Kind::kAttemptedWrmsr;
    what = "Domain attempted WRMSR";
  } else if (After(body, "Domain attempted RDMSR", &rest, &at)) {
    kind = Kind::kAttemptedRdmsr;
    what = "Domain attempted RDMSR";
  } else if (After(body, "RDMSR ", &rest, &at) &&
             absl::StrContains(rest, "unimplemented")) {
    kind = Kind::kRdmsrUnimpl;
    what = "RDMSR unimplemented";
  } else if (After(body, "WRMSR ", &rest, &at) &&
             absl::StrContains(rest, "unimplemented")) {
    kind = Kind::kWrmsrUnimpl;
    what = "WRMSR unimplemented";
  } else {
    return Verdict::kSkip;
  }

  Context ctx;
  if (XenDomain(body.substr(0, at), &ctx) == DomainSpec::kNotNumeric) {
    return Verdict::kSkip;  // d[IDLE], d[COW], ...: Xen itself, not a guest
  }
  SkipSpaces(&rest);
  uint32_t msr;
  if (!ConsumeHex32(&rest, &msr)) {
    *why = absl::StrCat(what, ": missing or invalid MSR index");
    return Verdict::kMalformed;
  }
  SkipSpaces(&rest);
  switch (kind) {
    case Kind::kRdmsrUnimpl:
      MakeRdmsr(ctx, msr, rec);
      ExpectGp(rec);
      return Verdict::kTrap;
    case Kind::kFaking:
      MakeRdmsr(ctx, msr, rec);
      ExpectRead(0, rec);
      return Verdict::kTrap;
    case Kind::kAttemptedRdmsr:
      MakeRdmsr(ctx, msr, rec);
      return Verdict::kTrap;
    case Kind::kWrmsrUnimpl: {
      uint64_t value;
      if (!absl::ConsumePrefix(&rest, "val") ||
          (SkipSpaces(&rest), !ConsumeHex(&rest, &value))) {
        *why = "WRMSR unimplemented: missing \"val 0x...\"";
        return Verdict::kMalformed;
      }
      MakeWrmsr(ctx, msr, value, rec);
      ExpectGp(rec);
      return Verdict::kTrap;
    }
    case Kind::kAttemptedWrmsr: {
      uint64_t from, to;
      if (!absl::ConsumePrefix(&rest, "from") ||
          (SkipSpaces(&rest), !ConsumeXenValue(&rest, &from))) {
        *why = "Domain attempted WRMSR: missing \"from VALUE\"";
        return Verdict::kMalformed;
      }
      SkipSpaces(&rest);
      if (!absl::ConsumePrefix(&rest, "to") ||
          (SkipSpaces(&rest), !ConsumeXenValue(&rest, &to))) {
        *why = "Domain attempted WRMSR: missing \"to VALUE\"";
        return Verdict::kMalformed;
      }
      (void)from;
      MakeWrmsr(ctx, msr, to, rec);
      ExpectCompleted(rec);  // Xen dropped the write and went on
      return Verdict::kTrap;
    }
  }
  return Verdict::kSkip;
}

bool LooksLikeXen(absl::string_view line) {
  if (absl::StrContains(line, "(XEN)")) return true;
  return absl::StrContains(line, "domain attempted") ||
         absl::StrContains(line, "Domain attempted") ||
         absl::StrContains(line, "faking RDMSR") ||
         ((absl::StrContains(line, "RDMSR ") ||
           absl::StrContains(line, "WRMSR ")) &&
          absl::StrContains(line, "unimplemented"));
}

// ---------------------------------------------------------------------------
// ftrace / trace-cmd / perf script.

struct FtraceTask {
  bool has_vcpu = false;
  uint32_t vcpu = 0;
  // The last kvm_exit not yet followed by its kvm_entry.
  bool pending = false;
  bool pending_msr = false;    // exit reason names an MSR access
  bool pending_cpuid = false;  // exit reason is CPUID
  bool pending_io = false;     // exit reason is an I/O instruction
  bool pending_has_rip = false;
  uint64_t pending_rip = 0;
};

// The columns before the event name: "TASK-PID [CPU] FLAGS TIMESTAMP:", with
// an optional "(TGID)" after TASK-PID; perf script: "COMM PID[/TID] [CPU] TS:".
struct FtraceHeader {
  bool has_pid = false;
  uint32_t pid = 0;
  bool has_tgid = false;
  uint32_t tgid = 0;
  bool has_comm_vcpu = false;  // "CPU N/KVM" thread name
  uint32_t comm_vcpu = 0;
};

FtraceHeader ParseFtraceHeader(absl::string_view h) {
  FtraceHeader out;
  h = absl::StripAsciiWhitespace(h);
  // Drop the timestamp "1404.389509:" (the last token).
  size_t sp = h.find_last_of(" \t");
  absl::string_view task =
      sp == absl::string_view::npos ? absl::string_view() : h.substr(0, sp);
  // Cut at the "[CPU]" column when there is one.
  for (size_t lb = task.rfind('['); lb != absl::string_view::npos;
       lb = lb == 0 ? absl::string_view::npos : task.rfind('[', lb - 1)) {
    absl::string_view cpu = task.substr(lb + 1);
    uint32_t n;
    if (ConsumeDec32(&cpu, &n) && absl::ConsumePrefix(&cpu, "]")) {
      task = task.substr(0, lb);
      break;
    }
  }
  task = absl::StripTrailingAsciiWhitespace(task);
  // "(  TGID)" from options/record-tgid; "(-----)" when unknown.
  if (absl::EndsWith(task, ")")) {
    size_t lp = task.rfind('(');
    if (lp != absl::string_view::npos) {
      absl::string_view t =
          absl::StripAsciiWhitespace(task.substr(lp + 1, task.size() - lp - 2));
      uint32_t n;
      if (ConsumeDec32(&t, &n) && t.empty()) {
        out.has_tgid = true;
        out.tgid = n;
      }
      task = absl::StripTrailingAsciiWhitespace(task.substr(0, lp));
    }
  }
  // The pid: trailing digits after '-' (ftrace) or a last token "PID" or
  // "PID/TID" (perf).
  size_t end = task.size();
  size_t d = end;
  while (d > 0 && IsDigit(task[d - 1])) --d;
  if (d < end && d > 0) {
    absl::string_view digits = task.substr(d);
    uint32_t n;
    if (task[d - 1] == '-' || task[d - 1] == ' ' || task[d - 1] == '\t') {
      if (ConsumeDec32(&digits, &n)) {
        out.has_pid = true;
        out.pid = n;
      }
      task = task.substr(0, d - 1);
    } else if (task[d - 1] == '/') {
      // perf "PID/TID": the pid is the process, which is what we want.
      size_t p = d - 1;
      while (p > 0 && IsDigit(task[p - 1])) --p;
      absl::string_view pd = task.substr(p, d - 1 - p);
      if (ConsumeDec32(&pd, &n)) {
        out.has_pid = true;
        out.pid = n;
      }
      task = task.substr(0, p);
    }
  }
  // QEMU names its vCPU threads "CPU N/KVM".
  absl::string_view rest;
  uint32_t n;
  if (After(task, "CPU ", &rest) && ConsumeDec32(&rest, &n) &&
      absl::ConsumePrefix(&rest, "/KVM")) {
    out.has_comm_vcpu = true;
    out.comm_vcpu = n;
  }
  return out;
}

// Finds "WORD VALUE" in a kvm_exit/kvm_cpuid body: the first whole-word
// WORD followed by blanks and a value `consume` accepts.
template <typename T>
bool Field(absl::string_view body, absl::string_view word, T* v,
           bool (*consume)(absl::string_view*, T*)) {
  for (size_t pos = body.find(word); pos != absl::string_view::npos;
       pos = body.find(word, pos + 1)) {
    if (pos > 0 && IsWordChar(body[pos - 1])) continue;
    absl::string_view rest = body.substr(pos + word.size());
    if (rest.empty() || (rest[0] != ' ' && rest[0] != '\t')) continue;
    SkipSpaces(&rest);
    if (consume(&rest, v)) return true;
  }
  return false;
}

bool FieldHex(absl::string_view body, absl::string_view word, uint64_t* v) {
  return Field(body, word, v, &ConsumeHex);
}

bool FieldDec(absl::string_view body, absl::string_view word, uint32_t* v) {
  return Field(body, word, v, &ConsumeDec32);
}

class FtraceParser {
 public:
  Verdict Parse(absl::string_view line, v1::TrapRecord* rec, std::string* why);

 private:
  FtraceTask& Task(uint32_t pid) {
    if (tasks_.size() >= kMaxFtraceTasks && !tasks_.contains(pid))
      tasks_.clear();
    return tasks_[pid];
  }

  absl::flat_hash_map<uint32_t, FtraceTask> tasks_;
};

enum class Event { kNone, kMsr, kCpuid, kPio, kExit, kEntry };

// Locates the event name ("kvm_msr:", perf's "kvm:kvm_msr:") that follows the
// header columns.
Event FindEvent(absl::string_view line, size_t* start, size_t* body) {
  static constexpr struct {
    absl::string_view name;
    Event event;
  } kEvents[] = {{"kvm_msr:", Event::kMsr},
                 {"kvm_cpuid:", Event::kCpuid},
                 {"kvm_exit:", Event::kExit},
                 {"kvm_pio:", Event::kPio},
                 {"kvm_entry:", Event::kEntry}};
  Event best = Event::kNone;
  size_t best_pos = absl::string_view::npos;
  for (const auto& e : kEvents) {
    for (size_t pos = line.find(e.name); pos != absl::string_view::npos;
         pos = line.find(e.name, pos + 1)) {
      if (pos > 0 && line[pos - 1] != ' ' && line[pos - 1] != '\t' &&
          line[pos - 1] != ':') {
        continue;
      }
      if (pos < best_pos) {
        best_pos = pos;
        best = e.event;
        *body = pos + e.name.size();
      }
      break;
    }
  }
  if (best == Event::kNone) return best;
  *start = best_pos;
  // perf script: "kvm:kvm_msr:" — the header ends before "kvm:".
  absl::string_view head = line.substr(0, best_pos);
  if (absl::EndsWith(head, "kvm:")) *start = best_pos - 4;
  return best;
}

// kvm_pio: an IN or OUT with the port in DX ("in al, dx" = ec, "in ax, dx" =
// 66 ed, "in eax, dx" = ed; OUT: ee / 66 ef / ef). The trace does not say
// whether the guest used the imm8 form; the DX form carries the same access.
Verdict ParsePio(absl::string_view body, const Context& ctx,
                 v1::TrapRecord* rec, std::string* why) {
  absl::string_view rest = body;
  bool write;
  if (absl::ConsumePrefix(&rest, "pio_read")) {
    write = false;
  } else if (absl::ConsumePrefix(&rest, "pio_write")) {
    write = true;
  } else {
    *why = "kvm_pio: expected pio_read or pio_write";
    return Verdict::kMalformed;
  }
  uint64_t port, value = 0;
  uint32_t size, count;
  SkipSpaces(&rest);
  if (!absl::ConsumePrefix(&rest, "at") ||
      (SkipSpaces(&rest), !ConsumeHex(&rest, &port)) || port > 0xffff ||
      !FieldDec(rest, "size", &size) || !FieldDec(rest, "count", &count)) {
    *why = "kvm_pio: expected \"at 0xPORT size N count N\"";
    return Verdict::kMalformed;
  }
  if (size != 1 && size != 2 && size != 4) {
    *why = "kvm_pio: size must be 1, 2 or 4";
    return Verdict::kMalformed;
  }
  if (count != 1) return Verdict::kSkip;  // INS/OUTS: one event per string op
  const bool has_value = FieldHex(rest, "val", &value);
  std::string insn;
  if (size == 2) insn += '\x66';
  insn += static_cast<char>((write ? 0xee : 0xec) | (size == 1 ? 0 : 1));
  InitTrap(ctx, insn, rec);
  v1::Registers* r = rec->mutable_trap()->mutable_regs();
  r->set_rdx(port);
  rec->mutable_expect()->set_kind(v1::Outcome::COMPLETED);
  if (write) {
    r->set_rax(value);
  } else if (has_value) {
    rec->mutable_expect()->set_value(value);
  }
  return Verdict::kTrap;
}

Verdict FtraceParser::Parse(absl::string_view line, v1::TrapRecord* rec,
                            std::string* why) {
  size_t start = 0, body_at = 0;
  Event event = FindEvent(line, &start, &body_at);
  if (event == Event::kNone) return Verdict::kSkip;
  FtraceHeader hdr = ParseFtraceHeader(line.substr(0, start));
  absl::string_view body = absl::StripAsciiWhitespace(line.substr(body_at));
  const uint32_t pid = hdr.has_pid ? hdr.pid : 0;

  if (event == Event::kExit || event == Event::kEntry) {
    FtraceTask& task = Task(pid);
    uint32_t vcpu;
    if (FieldDec(body, "vcpu", &vcpu)) {
      task.has_vcpu = true;
      task.vcpu = vcpu;
    }
    task.pending = false;
    if (event == Event::kExit) {
      absl::string_view reason;
      if (After(body, "reason ", &reason)) {
        reason = reason.substr(0, reason.find_first_of(" \t"));
        std::string r = absl::AsciiStrToLower(reason);
        task.pending = true;
        task.pending_msr = absl::StrContains(r, "msr");
        task.pending_cpuid = absl::StrContains(r, "cpuid");
        // VMX "IO_INSTRUCTION", SVM "io" (not "exception_nmi").
        task.pending_io = absl::StartsWith(r, "io");
        uint64_t rip;
        task.pending_has_rip = FieldHex(body, "rip", &rip);
        task.pending_rip = task.pending_has_rip ? rip : 0;
      }
    }
    return Verdict::kSkip;
  }

  Context ctx;
  ctx.domain = hdr.has_tgid ? hdr.tgid : pid;
  if (hdr.has_comm_vcpu) ctx.vcpu = hdr.comm_vcpu;
  // The exit that caused this event: same task, reason of the same kind.
  auto attach = [&](Event kind) {
    auto it = tasks_.find(pid);
    if (it == tasks_.end()) return;
    FtraceTask& task = it->second;
    if (task.has_vcpu) ctx.vcpu = task.vcpu;
    bool matches = kind == Event::kCpuid ? task.pending_cpuid
                   : kind == Event::kPio ? task.pending_io
                                         : task.pending_msr;
    if (task.pending && matches && task.pending_has_rip) {
      ctx.has_rip = true;
      ctx.rip = task.pending_rip;
    }
    task.pending = false;  // one exit explains one trap
  };

  if (event == Event::kMsr) {
    absl::string_view rest = body;
    bool write;
    if (absl::ConsumePrefix(&rest, "msr_read")) {
      write = false;
    } else if (absl::ConsumePrefix(&rest, "msr_write")) {
      write = true;
    } else {
      *why = "kvm_msr: expected msr_read or msr_write";
      return Verdict::kMalformed;
    }
    SkipSpaces(&rest);
    uint32_t msr;
    uint64_t value;
    if (!ConsumeHex32(&rest, &msr)) {
      *why = "kvm_msr: missing or invalid MSR index";
      return Verdict::kMalformed;
    }
    SkipSpaces(&rest);
    if (!absl::ConsumePrefix(&rest, "=") ||
        (SkipSpaces(&rest), !ConsumeHex(&rest, &value))) {
      *why = "kvm_msr: missing \"= 0xVALUE\"";
      return Verdict::kMalformed;
    }
    bool gp = absl::StrContains(rest, "#GP");
    attach(Event::kMsr);
    if (write) {
      MakeWrmsr(ctx, msr, value, rec);
    } else {
      MakeRdmsr(ctx, msr, rec);
    }
    if (gp) {
      ExpectGp(rec);
    } else if (write) {
      ExpectCompleted(rec);
    } else {
      ExpectRead(value, rec);
    }
    return Verdict::kTrap;
  }

  if (event == Event::kPio) {
    attach(Event::kPio);
    return ParsePio(body, ctx, rec, why);
  }

  // kvm_cpuid
  uint64_t func, idx = 0, rax, rbx, rcx, rdx;
  if (!FieldHex(body, "func", &func) || func > 0xffffffffu) {
    *why = "kvm_cpuid: missing or invalid \"func\"";
    return Verdict::kMalformed;
  }
  FieldHex(body, "idx", &idx);  // absent before 4.x: subleaf unknown, 0
  if (!FieldHex(body, "rax", &rax) || !FieldHex(body, "rbx", &rbx) ||
      !FieldHex(body, "rcx", &rcx) || !FieldHex(body, "rdx", &rdx)) {
    *why = "kvm_cpuid: missing one of rax/rbx/rcx/rdx";
    return Verdict::kMalformed;
  }
  attach(Event::kCpuid);
  MakeCpuid(ctx, static_cast<uint32_t>(func), static_cast<uint32_t>(idx), rec);
  v1::Expectation* e = rec->mutable_expect();
  e->set_kind(v1::Outcome::COMPLETED);
  e->mutable_cpuid()->set_eax(static_cast<uint32_t>(rax));
  e->mutable_cpuid()->set_ebx(static_cast<uint32_t>(rbx));
  e->mutable_cpuid()->set_ecx(static_cast<uint32_t>(rcx));
  e->mutable_cpuid()->set_edx(static_cast<uint32_t>(rdx));
  return Verdict::kTrap;
}

bool LooksLikeFtrace(absl::string_view line) {
  return absl::StrContains(line, "kvm_msr:") ||
         absl::StrContains(line, "kvm_cpuid:") ||
         absl::StrContains(line, "kvm_exit:") ||
         absl::StrContains(line, "kvm_pio:") ||
         absl::StrContains(line, "kvm_entry:");
}

// ---------------------------------------------------------------------------
// The driver.

enum class Mode { kAuto, kKvm, kXen, kFtrace };

class Importer {
 public:
  Importer(Mode mode, absl::string_view source_name, const TrapSink& sink)
      : mode_(mode), source_(CleanText(source_name, 1024)), sink_(sink) {}

  absl::Status Line(absl::string_view raw, int64_t line_no,
                    ImportStats* stats) {
    ++stats->lines;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    // '#' starts ftrace/trace-cmd headers and comments in captured files;
    // no kernel or Xen message does.
    if (line.empty() || line[0] == '#') {
      ++stats->skipped;
      return absl::OkStatus();
    }
    v1::TrapRecord rec;
    std::string why;
    Family family = Family::kKvm;
    Verdict v = Verdict::kSkip;
    switch (mode_) {
      case Mode::kKvm:
        v = ParseKvmLine(line, &rec, &why);
        break;
      case Mode::kXen:
        family = Family::kXen;
        v = ParseXenLine(line, &rec, &why);
        break;
      case Mode::kFtrace:
        family = Family::kFtrace;
        v = ftrace_.Parse(line, &rec, &why);
        break;
      case Mode::kAuto:
        // Most specific first: "(XEN)" and ftrace event names are
        // unambiguous; the KVM words are searched anywhere.
        if (LooksLikeFtrace(line)) {
          family = Family::kFtrace;
          v = ftrace_.Parse(line, &rec, &why);
        } else if (LooksLikeXen(line)) {
          family = Family::kXen;
          v = ParseXenLine(line, &rec, &why);
        } else if (LooksLikeKvm(line)) {
          v = ParseKvmLine(line, &rec, &why);
        }
        break;
    }
    switch (v) {
      case Verdict::kSkip:
        ++stats->skipped;
        return absl::OkStatus();
      case Verdict::kMalformed:
        ++stats->malformed;
        if (stats->malformed_lines.size() < kMaxMalformedReported) {
          stats->malformed_lines.push_back(
              {line_no, absl::StrCat(FamilyName(family), ": ", why)});
        }
        return absl::OkStatus();
      case Verdict::kTrap:
        break;
    }
    ++stats->traps;
    ++stats->by_format[std::string(FamilyName(family))];
    rec.set_source(absl::StrCat(source_, ":", line_no));
    rec.set_note(CleanText(line, kMaxNoteBytes));
    return sink_(std::move(rec));
  }

 private:
  Mode mode_;
  std::string source_;
  const TrapSink& sink_;
  FtraceParser ftrace_;
};

absl::StatusOr<Mode> ModeFromName(absl::string_view format) {
  if (format == kImportFormatAuto || format.empty()) return Mode::kAuto;
  if (format == kImportFormatKvm) return Mode::kKvm;
  if (format == kImportFormatXen) return Mode::kXen;
  if (format == kImportFormatFtrace) return Mode::kFtrace;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log format \"", format, "\"; use ", kImportFormatAuto, ", ",
      kImportFormatKvm, ", ", kImportFormatXen, " or ", kImportFormatFtrace));
}

}  // namespace

absl::StatusOr<ImportStats> ImportLog(absl::string_view format,
                                      std::istream& in,
                                      absl::string_view source_name,
                                      const TrapSink& sink) {
  ASSIGN_OR_RETURN(Mode mode, ModeFromName(format));
  Importer importer(mode, source_name, sink);
  ImportStats stats;
  // One fixed buffer: a line longer than it is skipped without being stored.
  std::string buf(kMaxImportLineBytes + 1, '\0');
  int64_t line_no = 0;
  while (true) {
    in.getline(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got == 0 && in.eof()) break;
    ++line_no;
    if (in.fail() && !in.eof() && !in.bad()) {
      // The buffer filled before the newline: drop the rest of the line.
      in.clear();
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      ++stats.lines;
      ++stats.skipped;
      ++stats.too_long;
      if (in.eof()) break;
      continue;
    }
    if (in.bad()) {
      return absl::DataLossError(
          absl::StrCat(source_name, ":", line_no, ": read failed"));
    }
    // gcount counts the newline when one was consumed.
    size_t len = static_cast<size_t>(got);
    if (!in.eof() && len > 0) --len;
    RETURN_IF_ERROR(
        importer.Line(absl::string_view(buf.data(), len), line_no, &stats));
    if (in.eof()) break;
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(source_name, ": read failed"));
  }
  return stats;
}

absl::StatusOr<ImportStats> ImportLogFile(absl::string_view format,
                                          const std::string& path,
                                          const TrapSink& sink) {
  std::ifstream in;
  RETURN_IF_ERROR(OpenForReading(path, &in));
  return ImportLog(format, in, path, sink);
}

void MergeImportStats(const ImportStats& from, ImportStats* into) {
  into->lines += from.lines;
  into->traps += from.traps;
  into->skipped += from.skipped;
  into->too_long += from.too_long;
  into->malformed += from.malformed;
  for (const auto& [name, n] : from.by_format) into->by_format[name] += n;
  for (const MalformedLine& m : from.malformed_lines) {
    if (into->malformed_lines.size() >= kMaxMalformedReported) break;
    into->malformed_lines.push_back(m);
  }
}

}  // namespace pvemu::traplog
