// What the per-family line parsers share (import_line_parser.h).
#include "traplog/import_line_parser.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"

namespace pvemu::traplog::import_internal {
namespace {

namespace v1 = ::pvemu::v1;

bool IsHexDigit(char c) {
  return absl::ascii_isxdigit(static_cast<unsigned char>(c));
}

}  // namespace

bool IsDigit(char c) {
  return absl::ascii_isdigit(static_cast<unsigned char>(c));
}
bool IsWordChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

void SkipSpaces(absl::string_view* s) {
  *s = absl::StripLeadingAsciiWhitespace(*s);
}

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

bool ConsumeLabeled(absl::string_view* s, absl::string_view label,
                    uint64_t* value,
                    bool (*consume)(absl::string_view*, uint64_t*)) {
  absl::string_view t = *s;
  if (!absl::ConsumePrefix(&t, label)) return false;
  SkipSpaces(&t);
  if (!consume(&t, value)) return false;
  *s = t;
  return true;
}

bool After(absl::string_view s, absl::string_view word, absl::string_view* rest,
           size_t* at) {
  size_t pos = s.find(word);
  if (pos == absl::string_view::npos) return false;
  *rest = s.substr(pos + word.size());
  if (at != nullptr) *at = pos;
  return true;
}

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

}  // namespace pvemu::traplog::import_internal
