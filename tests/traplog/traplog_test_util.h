// Helpers the trap-log tests share: temporary files, records that use every
// field, and the files the writer (and the old PVTRAPS1 writer) make of them.
#ifndef PVEMU_TESTS_TRAPLOG_TRAPLOG_TEST_UTIL_H_
#define PVEMU_TESTS_TRAPLOG_TRAPLOG_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "emulator/trap.h"
#include "emulator/trap_convert.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "pvemu/v1/trap.pb.h"
#include "tests/status_matchers.h"
#include "traplog/encoding.h"
#include "traplog/expectations.h"
#include "traplog/reader.h"
#include "traplog/traps_format.h"
#include "traplog/writer.h"

namespace pvemu::traplog::test_util {

// The names the trap-log tests use, for `using namespace test_util`.
namespace v1 = ::pvemu::v1;
using ::pvemu::emulator::Trap;
using ::pvemu::emulator::TrapFromProto;
using ::pvemu::testing::IsOk;
using ::pvemu::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A temporary directory removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "traplog_test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char* dir = mkdtemp(buf.data());
    if (dir != nullptr) path_ = dir;
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  std::string File(absl::string_view name) const {
    return absl::StrCat(path_, "/", name);
  }

 private:
  std::string path_;
};

inline bool Exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteAll(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Records that use every kind of field, varied by `i`.
inline v1::TrapRecord MakeRecord(int i) {
  v1::TrapRecord r;
  v1::Trap* t = r.mutable_trap();
  t->set_domain(static_cast<uint32_t>(i % 7));
  t->set_vcpu(static_cast<uint32_t>(i % 3));
  t->set_mode(i % 2 ? v1::MODE_64 : v1::MODE_32);
  t->set_insn(i % 2 ? std::string("\x0f\x32", 2) : std::string("\x0f\x30", 2));
  t->mutable_regs()->set_rcx(0x1b0 + static_cast<uint64_t>(i));
  t->mutable_regs()->set_rip(0xffffffff81000000ull + static_cast<uint64_t>(i));
  t->set_host_tsc(1000000ull * static_cast<uint64_t>(i));
  if (i % 3 == 0) {
    r.mutable_expect()->set_kind(v1::Outcome::EXCEPTION);
    r.mutable_expect()->set_vector(v1::GP);
  } else if (i % 3 == 1) {
    r.mutable_expect()->set_kind(v1::Outcome::COMPLETED);
    r.mutable_expect()->set_value(static_cast<uint64_t>(i) << 33);
  }
  r.set_source(absl::StrCat("capture.log:", i + 1));
  r.set_note(absl::StrCat("line ", i, " \xc3\xa9 \"quoted\"\n"));
  return r;
}

inline void ExpectSame(const v1::TrapRecord& got, const v1::TrapRecord& want) {
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, want))
      << "got:\n"
      << got.DebugString() << "want:\n"
      << want.DebugString();
}

inline std::vector<v1::TrapRecord> ReadAllRecords(TrapLogReader* reader,
                                                  absl::Status* end) {
  std::vector<v1::TrapRecord> out;
  v1::TrapRecord rec;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&rec);
    if (!more.ok()) {
      *end = more.status();
      return out;
    }
    if (!*more) {
      *end = absl::OkStatus();
      return out;
    }
    out.push_back(rec);
  }
}

// Writes `n` records to `path` and returns them.
inline std::vector<v1::TrapRecord> WriteLog(const std::string& path, int n) {
  std::vector<v1::TrapRecord> recs;
  auto writer = TrapLogWriter::Open(path);
  EXPECT_THAT(writer, IsOk());
  if (!writer.ok()) return recs;
  for (int i = 0; i < n; ++i) {
    recs.push_back(MakeRecord(i));
    EXPECT_THAT((*writer)->Append(recs.back()), IsOk());
  }
  EXPECT_THAT((*writer)->Close(), IsOk());
  return recs;
}

// Writes `v` as `bytes` little-endian bytes at `offset`: the layout table's
// byte order, assembled independently of the codec under test.
inline void PutLe(std::string* out, size_t offset, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    (*out)[offset + static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  }
}

// A PVTRAPS1 file as the old writer made it: the magic, then per record a
// varint length and the serialized message.
inline std::string V1File(const std::vector<v1::TrapRecord>& records) {
  std::string out(kTrapsMagicV1);
  for (const v1::TrapRecord& r : records) {
    std::string body;
    EXPECT_TRUE(r.SerializeToString(&body));
    uint64_t n = body.size();
    while (n >= 0x80) {
      out.push_back(static_cast<char>(n | 0x80));
      n >>= 7;
    }
    out.push_back(static_cast<char>(n));
    out += body;
  }
  return out;
}

// The file TrapLogWriter makes of `records` in `encoding` (.traps: PVTRAPS2).
inline std::string WriterFile(
    const std::vector<v1::TrapRecord>& records,
    TrapLogEncoding encoding = TrapLogEncoding::kBinary) {
  std::stringstream buf;
  auto writer = TrapLogWriter::ForStream(&buf, encoding, "w");
  for (const v1::TrapRecord& r : records) {
    EXPECT_THAT(writer->Append(r), IsOk()) << r.DebugString();
  }
  EXPECT_THAT(writer->Close(), IsOk());
  return buf.str();
}

inline std::unique_ptr<TrapLogReader> ReaderOf(std::stringstream* in,
                                               TrapLogEncoding encoding,
                                               absl::string_view name) {
  auto reader = TrapLogReader::ForStream(in, encoding, name);
  EXPECT_THAT(reader, IsOk());
  return reader.ok() ? std::move(*reader) : nullptr;
}

inline std::vector<v1::TrapRecord> ReadBytes(const std::string& bytes,
                                             TrapLogEncoding encoding,
                                             absl::Status* end) {
  std::stringstream in(bytes);
  std::unique_ptr<TrapLogReader> reader = ReaderOf(&in, encoding, "mem");
  if (reader == nullptr) return {};
  return ReadAllRecords(reader.get(), end);
}

struct TrapAndExpect {
  Trap trap;
  ExpectedOutcome expect;
};

inline std::vector<TrapAndExpect> ReadAllTraps(TrapLogReader* reader,
                                               absl::Status* end) {
  std::vector<TrapAndExpect> out;
  while (true) {
    TrapAndExpect t;
    absl::StatusOr<bool> more = reader->NextTrap(&t.trap, &t.expect);
    if (!more.ok() || !*more) {
      *end = more.status();
      return out;
    }
    out.push_back(t);
  }
}

inline std::string Describe(const ExpectedOutcome& e) {
  return absl::StrCat("{kind ", e.has_kind, "/", e.kind, " vector ",
                      e.has_vector, "/", e.vector, " value ", e.has_value, "/",
                      e.value, " cpuid ", e.has_cpuid, "/", e.cpuid[0], ",",
                      e.cpuid[1], ",", e.cpuid[2], ",", e.cpuid[3], "}");
}

inline void ExpectSameTrap(const Trap& got, const Trap& want) {
  EXPECT_EQ(got.domain, want.domain);
  EXPECT_EQ(got.vcpu, want.vcpu);
  EXPECT_EQ(got.mode, want.mode);
  EXPECT_EQ(got.cpl, want.cpl);
  EXPECT_EQ(got.insn_len, want.insn_len);
  EXPECT_THAT(got.insn, ElementsAreArray(want.insn));
  EXPECT_THAT(got.regs.gpr, ElementsAreArray(want.regs.gpr));
  EXPECT_EQ(got.regs.rip, want.regs.rip);
  EXPECT_EQ(got.regs.rflags, want.regs.rflags);
  EXPECT_EQ(got.host_tsc, want.host_tsc);
}

// NextTrap's answer for `rec`, by definition: TrapFromProto and
// ExpectedOutcomeFromProto of the message Next() returns.
inline void ExpectNextTrapOf(const TrapAndExpect& got,
                             const v1::TrapRecord& rec) {
  absl::StatusOr<Trap> want = TrapFromProto(rec.trap());
  ASSERT_THAT(want, IsOk());
  ExpectSameTrap(got.trap, *want);
  const ExpectedOutcome want_expect = ExpectedOutcomeFromProto(rec.expect());
  EXPECT_TRUE(got.expect == want_expect)
      << Describe(got.expect) << " vs " << Describe(want_expect);
}

// Reads `reader` to its end (with Next; with NextTrap): a clean end, and
// exactly the records of `want`, in order.
inline void ExpectReadsBack(TrapLogReader* reader, const std::vector<v1::TrapRecord>& want) {
  absl::Status end;
  const std::vector<v1::TrapRecord> got = ReadAllRecords(reader, &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectSame(got[i], want[i]);
  }
}
inline void ExpectTrapsReadBack(TrapLogReader* reader, const std::vector<v1::TrapRecord>& want) {
  absl::Status end;
  const std::vector<TrapAndExpect> got = ReadAllTraps(reader, &end);
  EXPECT_THAT(end, IsOk());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectNextTrapOf(got[i], want[i]);
  }
}

// Records that together use every field and edge of the PVTRAPS2 layout.
inline std::vector<v1::TrapRecord> EveryFieldRecords() {
  std::vector<v1::TrapRecord> out;
  const std::string insn15(
      "\xf0\x66\x67\x2e\x48\x0f\x32\x90\x90\x90\x90\x90"
      "\x90\x90\xff",
      15);
  // Every mode, every cpl, every instruction length 0..15, registers and
  // ids with their top bits set.
  for (int mode = 0; mode <= 4; ++mode) {
    for (uint32_t cpl = 0; cpl <= 3; ++cpl) {
      v1::TrapRecord r;
      v1::Trap* t = r.mutable_trap();
      const uint64_t k = static_cast<uint64_t>(mode) * 4 + cpl;
      t->set_domain(0xffffff00u + static_cast<uint32_t>(k));
      t->set_vcpu(0x80000000u | static_cast<uint32_t>(k));
      t->set_mode(static_cast<v1::CpuMode>(mode));
      t->set_cpl(cpl);
      t->set_insn(insn15.substr(0, k % 16));
      v1::Registers* g = t->mutable_regs();
      const google::protobuf::Reflection* refl = g->GetReflection();
      const google::protobuf::Descriptor* desc = g->GetDescriptor();
      EXPECT_EQ(desc->field_count(), 18) << "a register the layout lacks";
      for (int f = 0; f < desc->field_count(); ++f) {
        refl->SetUInt64(
            g, desc->field(f),
            0x8070605040302010ull * (static_cast<uint64_t>(f) + 1) + k);
      }
      g->set_rflags(k & 1 ? 0x246 : 0);  // bit 1 as recorded, clear or set
      t->set_host_tsc(~uint64_t{0} - k);
      out.push_back(r);
    }
  }
  v1::TrapRecord base = out[7];
  // Expectations: empty, each field alone, all together, zeros that are set.
  {
    v1::TrapRecord r = base;
    r.mutable_expect();
    out.push_back(r);
  }
  for (int kind = 0; kind <= 3; ++kind) {
    v1::TrapRecord r = base;
    r.mutable_expect()->set_kind(static_cast<v1::Outcome::Kind>(kind));
    out.push_back(r);
  }
  for (int vector = 0; vector < 32; ++vector) {
    if (!v1::Vector_IsValid(vector)) continue;
    v1::TrapRecord r = base;
    r.mutable_expect()->set_vector(static_cast<v1::Vector>(vector));
    out.push_back(r);
  }
  for (uint64_t value : {uint64_t{0}, uint64_t{0x6}, ~uint64_t{0}}) {
    v1::TrapRecord r = base;
    r.mutable_expect()->set_value(value);
    out.push_back(r);
  }
  {
    v1::TrapRecord r = base;
    r.mutable_expect()->mutable_cpuid();  // set, all zero
    out.push_back(r);
    r.mutable_expect()->mutable_cpuid()->set_eax(0xffffffffu);
    r.mutable_expect()->mutable_cpuid()->set_edx(0x80000001u);
    out.push_back(r);
  }
  {
    v1::TrapRecord r = base;
    v1::Expectation* e = r.mutable_expect();
    e->set_kind(v1::Outcome::EXCEPTION);
    e->set_vector(v1::XM);
    e->set_value(0x123456789abcdef0ull);
    e->mutable_cpuid()->set_eax(1);
    e->mutable_cpuid()->set_ebx(2);
    e->mutable_cpuid()->set_ecx(3);
    e->mutable_cpuid()->set_edx(4);
    out.push_back(r);
  }
  // Strings: NUL bytes, empty ones, UTF-8.
  for (const auto& [source, note] :
       {std::pair<std::string, std::string>{std::string("a\0b:1", 5),
                                            std::string("\0", 1)},
        {"", std::string("x\0\0y", 4)},
        {"kern.log:12", ""},
        {"\xc3\xa9", "\xe2\x82\xac \xf0\x9f\x98\x80"}}) {
    v1::TrapRecord r = base;
    r.set_source(source);
    r.set_note(note);
    out.push_back(r);
  }
  // No trap; a trap without registers; registers set but all zero.
  {
    v1::TrapRecord r;
    r.mutable_expect()->set_kind(v1::Outcome::UNHANDLED);
    r.set_note("no trap");
    out.push_back(r);
    r.mutable_trap()->set_domain(3);
    out.push_back(r);
    r.mutable_trap()->mutable_regs();
    out.push_back(r);
    r.Clear();  // nothing at all
    out.push_back(r);
  }
  return out;
}

}  // namespace pvemu::traplog::test_util

#endif  // PVEMU_TESTS_TRAPLOG_TRAPLOG_TEST_UTIL_H_
