// The ftrace family (import.h): ftrace, trace-cmd report and perf script
// text of the KVM trace events.
//
// Sources of the formats (include/trace/events/kvm.h, arch/x86/kvm/trace.h):
//   kvm_msr:   "msr_%s %x = 0x%llx%s"  (read|write, " (#GP)" on a fault)
//   kvm_cpuid: "func %x idx %x rax %lx rbx %lx rcx %lx rdx %lx, cpuid entry
//              %s%s" (older: no idx; newer suffixes accepted)
//   kvm_pio:   "pio_%s at 0x%x size %d count %d val 0x%x %s" (IN/OUT with the
//              port in DX; count > 1 is a string instruction, not imported;
//              older kernels print no val)
//   kvm_exit:  "vcpu %u reason %s rip 0x%lx info1 ..." (older: no vcpu)

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "traplog/import.h"
#include "traplog/import_line_parser.h"

namespace pvemu::traplog::import_internal {
namespace {

namespace v1 = ::pvemu::v1;

// Per-task ftrace context is bounded: a hostile trace cannot grow it forever.
constexpr size_t kMaxFtraceTasks = 1 << 16;

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

// "msr_read"/"msr_write", "pio_read"/"pio_write": which way the access went.
// False (and *rest untouched) for neither.
bool ConsumeDirection(absl::string_view* rest, absl::string_view read,
                      absl::string_view write, bool* is_write) {
  if (absl::ConsumePrefix(rest, read)) {
    *is_write = false;
    return true;
  }
  if (absl::ConsumePrefix(rest, write)) {
    *is_write = true;
    return true;
  }
  return false;
}

enum class Event { kNone, kMsr, kCpuid, kPio, kExit, kEntry };

class FtraceParser final : public LineParser {
 public:
  FtraceParser() : LineParser(kImportFormatFtrace) {}
  bool Claims(absl::string_view line) const override;
  Verdict Parse(absl::string_view line, v1::TrapRecord* rec,
                std::string* why) override;

 private:
  FtraceTask& Task(uint32_t pid) {
    if (tasks_.size() >= kMaxFtraceTasks && !tasks_.contains(pid))
      tasks_.clear();
    return tasks_[pid];
  }

  // kvm_exit / kvm_entry: remember the task's vCPU and its open exit.
  void TrackExitOrEntry(Event event, uint32_t pid, absl::string_view body);
  // The exit that caused a trap event of `kind` on task `pid`, into *ctx.
  void AttachExit(uint32_t pid, Event kind, Context* ctx);

  absl::flat_hash_map<uint32_t, FtraceTask> tasks_;
};

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
  bool write = false;
  if (!ConsumeDirection(&rest, "pio_read", "pio_write", &write)) {
    *why = "kvm_pio: expected pio_read or pio_write";
    return Verdict::kMalformed;
  }
  uint64_t port, value = 0;
  uint32_t size, count;
  SkipSpaces(&rest);
  if (!ConsumeLabeled(&rest, "at", &port) || port > 0xffff ||
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

// A kvm_msr body: "msr_read|msr_write INDEX = 0xVALUE", " (#GP)" on a fault.
struct MsrEvent {
  bool write = false;
  uint32_t msr = 0;
  uint64_t value = 0;
  bool gp = false;
};

// Parses a kvm_msr body; false with *why set when it is malformed.
bool ParseMsrBody(absl::string_view body, MsrEvent* m, std::string* why) {
  absl::string_view rest = body;
  if (!ConsumeDirection(&rest, "msr_read", "msr_write", &m->write)) {
    *why = "kvm_msr: expected msr_read or msr_write";
    return false;
  }
  SkipSpaces(&rest);
  if (!ConsumeHex32(&rest, &m->msr)) {
    *why = "kvm_msr: missing or invalid MSR index";
    return false;
  }
  SkipSpaces(&rest);
  if (!ConsumeLabeled(&rest, "=", &m->value)) {
    *why = "kvm_msr: missing \"= 0xVALUE\"";
    return false;
  }
  m->gp = absl::StrContains(rest, "#GP");
  return true;
}

// The RDMSR/WRMSR a kvm_msr event records, and what KVM did: #GP, or the
// write taken, or the value read.
void MakeMsrTrap(const Context& ctx, const MsrEvent& m, v1::TrapRecord* rec) {
  if (m.write) {
    MakeWrmsr(ctx, m.msr, m.value, rec);
  } else {
    MakeRdmsr(ctx, m.msr, rec);
  }
  if (m.gp) {
    ExpectGp(rec);
  } else if (m.write) {
    ExpectCompleted(rec);
  } else {
    ExpectRead(m.value, rec);
  }
}

// A kvm_cpuid body: the leaf, subleaf and the four registers KVM returned.
struct CpuidEvent {
  uint64_t func = 0, idx = 0, rax = 0, rbx = 0, rcx = 0, rdx = 0;
};

// Parses a kvm_cpuid body; false with *why set when it is malformed.
bool ParseCpuidBody(absl::string_view body, CpuidEvent* c, std::string* why) {
  if (!FieldHex(body, "func", &c->func) || c->func > 0xffffffffu) {
    *why = "kvm_cpuid: missing or invalid \"func\"";
    return false;
  }
  FieldHex(body, "idx", &c->idx);  // absent before 4.x: subleaf unknown, 0
  if (!FieldHex(body, "rax", &c->rax) || !FieldHex(body, "rbx", &c->rbx) ||
      !FieldHex(body, "rcx", &c->rcx) || !FieldHex(body, "rdx", &c->rdx)) {
    *why = "kvm_cpuid: missing one of rax/rbx/rcx/rdx";
    return false;
  }
  return true;
}

// The CPUID a kvm_cpuid event records, completed with the registers KVM
// returned.
void MakeCpuidTrap(const Context& ctx, const CpuidEvent& c,
                   v1::TrapRecord* rec) {
  MakeCpuid(ctx, static_cast<uint32_t>(c.func), static_cast<uint32_t>(c.idx),
            rec);
  v1::Expectation* e = rec->mutable_expect();
  e->set_kind(v1::Outcome::COMPLETED);
  e->mutable_cpuid()->set_eax(static_cast<uint32_t>(c.rax));
  e->mutable_cpuid()->set_ebx(static_cast<uint32_t>(c.rbx));
  e->mutable_cpuid()->set_ecx(static_cast<uint32_t>(c.rcx));
  e->mutable_cpuid()->set_edx(static_cast<uint32_t>(c.rdx));
}

void FtraceParser::TrackExitOrEntry(Event event, uint32_t pid,
                                    absl::string_view body) {
  FtraceTask& task = Task(pid);
  uint32_t vcpu;
  if (FieldDec(body, "vcpu", &vcpu)) {
    task.has_vcpu = true;
    task.vcpu = vcpu;
  }
  task.pending = false;
  absl::string_view reason;
  // An entry only closes the exit; an exit opens one when it names a reason.
  if (event != Event::kExit || !After(body, "reason ", &reason)) return;
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

// The exit that caused this event: same task, reason of the same kind. It
// gives the vCPU and, when the reasons match, the guest's rIP.
void FtraceParser::AttachExit(uint32_t pid, Event kind, Context* ctx) {
  auto it = tasks_.find(pid);
  if (it == tasks_.end()) return;
  FtraceTask& task = it->second;
  if (task.has_vcpu) ctx->vcpu = task.vcpu;
  bool matches = kind == Event::kCpuid ? task.pending_cpuid
                 : kind == Event::kPio ? task.pending_io
                                       : task.pending_msr;
  if (task.pending && matches && task.pending_has_rip) {
    ctx->has_rip = true;
    ctx->rip = task.pending_rip;
  }
  task.pending = false;  // one exit explains one trap
}

// Finds the event, keeps the exit/entry context per task, and turns the
// kvm_msr/kvm_pio/kvm_cpuid events into traps. A malformed kvm_msr or
// kvm_cpuid leaves the task's open exit for a later event; kvm_pio takes it
// before its body is checked.
Verdict FtraceParser::Parse(absl::string_view line, v1::TrapRecord* rec,
                            std::string* why) {
  size_t start = 0, body_at = 0;
  Event event = FindEvent(line, &start, &body_at);
  if (event == Event::kNone) return Verdict::kSkip;
  FtraceHeader hdr = ParseFtraceHeader(line.substr(0, start));
  absl::string_view body = absl::StripAsciiWhitespace(line.substr(body_at));
  const uint32_t pid = hdr.has_pid ? hdr.pid : 0;
  if (event == Event::kExit || event == Event::kEntry) {
    TrackExitOrEntry(event, pid, body);
    return Verdict::kSkip;
  }

  Context ctx;
  ctx.domain = hdr.has_tgid ? hdr.tgid : pid;
  if (hdr.has_comm_vcpu) ctx.vcpu = hdr.comm_vcpu;
  if (event == Event::kMsr) {
    MsrEvent m;
    if (!ParseMsrBody(body, &m, why)) return Verdict::kMalformed;
    AttachExit(pid, Event::kMsr, &ctx);
    MakeMsrTrap(ctx, m, rec);
    return Verdict::kTrap;
  }
  if (event == Event::kPio) {
    AttachExit(pid, Event::kPio, &ctx);
    return ParsePio(body, ctx, rec, why);
  }
  // kvm_cpuid
  CpuidEvent c;
  if (!ParseCpuidBody(body, &c, why)) return Verdict::kMalformed;
  AttachExit(pid, Event::kCpuid, &ctx);
  MakeCpuidTrap(ctx, c, rec);
  return Verdict::kTrap;
}

bool FtraceParser::Claims(absl::string_view line) const {
  return absl::StrContains(line, "kvm_msr:") ||
         absl::StrContains(line, "kvm_cpuid:") ||
         absl::StrContains(line, "kvm_exit:") ||
         absl::StrContains(line, "kvm_pio:") ||
         absl::StrContains(line, "kvm_entry:");
}

}  // namespace

std::unique_ptr<LineParser> NewFtraceParser() {
  return std::make_unique<FtraceParser>();
}

}  // namespace pvemu::traplog::import_internal
