// The xen-console family (import.h): Xen's console, from "xl dmesg" or a
// serial capture.
//
// Sources of the formats (wording checked against the Xen tree):
//
// Xen, xen/arch/x86/pv/emul-priv-op.c, hvm/{hvm,vmx/vmx,svm/svm}.c, traps.c:
//   gdprintk(fmt) = "%s:%d:%pv " fmt (older "%s:%d:d%d " fmt);
//   gprintk(fmt) = "%pv " fmt; %pv prints "d0v6", or "d[IDLE]v0" for Xen.
//   "RDMSR 0x%08x unimplemented", "WRMSR 0x%08x val 0x%016lx unimplemented"
//     (#GP), "faking RDMSR 0x%08x" (read as 0),
//   "Domain attempted WRMSR %p from %08x:%08x to %08x:%08x." (3.x/4.0),
//   "Domain attempted WRMSR %08x from 0x%016lx to 0x%016lx" (4.x), with or
//     without "0x" and the final dot: the write was dropped (completed).

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

// Older Xen: "Non-priv domain attempted WRMSR(%p,%08lx,%08lx)." — dropped.
// `rest` follows the '(' of the match at `at`.
Verdict ParseNonPrivMsr(absl::string_view body, size_t at,
                        absl::string_view rest, v1::TrapRecord* rec,
                        std::string* why) {
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

struct XenMessage {
  absl::string_view anchor;  // the words just before the MSR
  Kind kind;
  absl::string_view what;  // the message's name in errors
  bool unimplemented;      // counts only with "unimplemented" after it
};

// In the order they are tried: "RDMSR " and "WRMSR " also occur inside the
// longer anchors.
constexpr XenMessage kXenMessages[] = {
    {"faking RDMSR", Kind::kFaking, "faking RDMSR", false},
    {"Domain attempted WRMSR", Kind::kAttemptedWrmsr, "Domain attempted WRMSR",
     false},
    {"Domain attempted RDMSR", Kind::kAttemptedRdmsr, "Domain attempted RDMSR",
     false},
    {"RDMSR ", Kind::kRdmsrUnimpl, "RDMSR unimplemented", true},
    {"WRMSR ", Kind::kWrmsrUnimpl, "WRMSR unimplemented", true},
};

// The first of kXenMessages in `body`, with the text after its anchor in
// *rest and the anchor's position in *at; nullptr when none is.
const XenMessage* FindXenMessage(absl::string_view body,
                                 absl::string_view* rest, size_t* at) {
  for (const XenMessage& m : kXenMessages) {
    if (After(body, m.anchor, rest, at) &&
        (!m.unimplemented || absl::StrContains(*rest, "unimplemented"))) {
      return &m;
    }
  }
  return nullptr;
}

// 4.x "Domain attempted WRMSR MSR from VALUE to VALUE": Xen dropped the
// write and went on. `rest` follows the MSR index and its blanks.
Verdict ParseAttemptedWrmsr(const Context& ctx, uint32_t msr,
                            absl::string_view rest, v1::TrapRecord* rec,
                            std::string* why) {
  uint64_t from, to;
  if (!ConsumeLabeled(&rest, "from", &from, &ConsumeXenValue)) {
    *why = "Domain attempted WRMSR: missing \"from VALUE\"";
    return Verdict::kMalformed;
  }
  SkipSpaces(&rest);
  if (!ConsumeLabeled(&rest, "to", &to, &ConsumeXenValue)) {
    *why = "Domain attempted WRMSR: missing \"to VALUE\"";
    return Verdict::kMalformed;
  }
  (void)from;
  MakeWrmsr(ctx, msr, to, rec);
  ExpectCompleted(rec);  // Xen dropped the write and went on
  return Verdict::kTrap;
}

// The trap a message of `kind` about `msr` records, and what Xen did. `rest`
// follows the MSR index and its blanks.
Verdict FinishXenTrap(Kind kind, const Context& ctx, uint32_t msr,
                      absl::string_view rest, v1::TrapRecord* rec,
                      std::string* why) {
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
      if (!ConsumeLabeled(&rest, "val", &value)) {
        *why = "WRMSR unimplemented: missing \"val 0x...\"";
        return Verdict::kMalformed;
      }
      MakeWrmsr(ctx, msr, value, rec);
      ExpectGp(rec);
      return Verdict::kTrap;
    }
    case Kind::kAttemptedWrmsr:
      return ParseAttemptedWrmsr(ctx, msr, rest, rec, why);
  }
  return Verdict::kSkip;
}

// Finds the message, the guest it names (none for Xen itself) and the MSR
// index; FinishXenTrap reads the rest.
Verdict ParseXenLine(absl::string_view line, v1::TrapRecord* rec,
                     std::string* why) {
  absl::string_view body = line;
  absl::string_view rest;
  size_t at;
  if (After(body, "domain attempted WRMSR(", &rest, &at) ||
      After(body, "domain attempted RDMSR(", &rest, &at)) {
    return ParseNonPrivMsr(body, at, rest, rec, why);
  }
  const XenMessage* msg = FindXenMessage(body, &rest, &at);
  if (msg == nullptr) return Verdict::kSkip;

  Context ctx;
  if (XenDomain(body.substr(0, at), &ctx) == DomainSpec::kNotNumeric) {
    return Verdict::kSkip;  // d[IDLE], d[COW], ...: Xen itself, not a guest
  }
  SkipSpaces(&rest);
  uint32_t msr;
  if (!ConsumeHex32(&rest, &msr)) {
    *why = absl::StrCat(msg->what, ": missing or invalid MSR index");
    return Verdict::kMalformed;
  }
  SkipSpaces(&rest);
  return FinishXenTrap(msg->kind, ctx, msr, rest, rec, why);
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

}  // namespace

std::unique_ptr<LineParser> NewXenConsoleParser() {
  return std::make_unique<StatelessLineParser>(kImportFormatXen, &LooksLikeXen,
                                               &ParseXenLine);
}

}  // namespace pvemu::traplog::import_internal
