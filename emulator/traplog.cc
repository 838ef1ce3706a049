#include "emulator/traplog.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/text_format.h"
#include "pvemu/status_macros.h"
#include "pvemu/textproto.h"

namespace pvemu::emulator {
namespace {

namespace v1 = ::pvemu::v1;
using ::google::protobuf::io::CodedInputStream;
using ::google::protobuf::io::CodedOutputStream;

// Buffered bytes are handed to write(2) in chunks of about this size.
constexpr size_t kWriteChunk = size_t{1} << 16;

// Comments that tell editors and people what schema a text log follows.
constexpr absl::string_view kTextHeader =
    "# proto-file: pvemu/v1/trap.proto\n"
    "# proto-message: pvemu.v1.TrapLog\n";

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// fsync of the directory makes a rename durable, not only the file's data.
absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat(dir, ": cannot open"));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory; the data itself is synced.
  if (rc != 0 && err != EINVAL && err != EBADF) {
    return ErrnoStatus(err, absl::StrCat(dir, ": fsync"));
  }
  return absl::OkStatus();
}

// proto3 string fields must hold UTF-8: the binary parser rejects a record
// whose source or note does not, while the text parser and the serializer let
// it through. Checked on both sides so that whatever a writer accepts, a
// reader returns. (A TrapRecord has no other string fields.)
absl::Status CheckStrings(const v1::TrapRecord& record,
                          absl::string_view where) {
  for (const auto& [field, text] :
       {std::pair<absl::string_view, const std::string*>{"source",
                                                         &record.source()},
        {"note", &record.note()}}) {
    if (!google::protobuf::internal::IsStructurallyValidUTF8(
            text->data(), static_cast<int>(text->size()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, field, " is not valid UTF-8 (a proto3 string must be)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrapLogEncoding> TrapLogEncodingForPath(absl::string_view path) {
  if (absl::EndsWith(path, ".textproto")) return TrapLogEncoding::kText;
  if (absl::EndsWith(path, ".traps")) return TrapLogEncoding::kBinary;
  return absl::InvalidArgumentError(
      absl::StrCat(path,
                   ": unknown trap-log extension; use .textproto (text) "
                   "or .traps (binary)"));
}

// ---------------------------------------------------------------------------
// TrapLogWriter

TrapLogWriter::TrapLogWriter(TrapLogEncoding encoding, std::string name)
    : encoding_(encoding), name_(std::move(name)) {}

TrapLogWriter::~TrapLogWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

absl::StatusOr<std::unique_ptr<TrapLogWriter>> TrapLogWriter::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(TrapLogEncoding encoding, TrapLogEncodingForPath(path));
  std::unique_ptr<TrapLogWriter> w(new TrapLogWriter(encoding, path));
  w->tmp_path_ = path + ".tmp";
  w->fd_ = ::open(w->tmp_path_.c_str(),
                  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) {
    return ErrnoStatus(errno, absl::StrCat(w->tmp_path_, ": cannot create"));
  }
  RETURN_IF_ERROR(w->Write(encoding == TrapLogEncoding::kBinary ? kTrapsMagic
                                                                : kTextHeader));
  return w;
}

std::unique_ptr<TrapLogWriter> TrapLogWriter::ForStream(
    std::ostream* out, TrapLogEncoding encoding, absl::string_view name) {
  std::unique_ptr<TrapLogWriter> w(
      new TrapLogWriter(encoding, std::string(name)));
  w->out_ = out;
  // A stream write error surfaces at the first Append or at Close.
  absl::string_view header =
      encoding == TrapLogEncoding::kBinary ? kTrapsMagic : kTextHeader;
  out->write(header.data(), static_cast<std::streamsize>(header.size()));
  return w;
}

absl::Status TrapLogWriter::Write(absl::string_view bytes) {
  if (out_ != nullptr) {
    out_->write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out_->good()) {
      return absl::DataLossError(absl::StrCat(name_, ": write failed"));
    }
    return absl::OkStatus();
  }
  buffer_.append(bytes.data(), bytes.size());
  if (buffer_.size() >= kWriteChunk) return FlushBuffer();
  return absl::OkStatus();
}

absl::Status TrapLogWriter::FlushBuffer() {
  size_t done = 0;
  while (done < buffer_.size()) {
    ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat(tmp_path_, ": write"));
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status TrapLogWriter::Append(const v1::TrapRecord& record) {
  if (closed_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": Append after Close"));
  }
  RETURN_IF_ERROR(CheckStrings(
      record, absl::StrCat(name_, ": record ", records_ + 1, ": ")));
  scratch_.clear();
  if (encoding_ == TrapLogEncoding::kBinary) {
    if (!record.AppendToString(&scratch_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": record ", records_ + 1, " cannot be serialized"));
    }
    if (scratch_.size() > kMaxTrapRecordBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": record ", records_ + 1, " is ", scratch_.size(),
          " bytes; the limit is ", kMaxTrapRecordBytes));
    }
    uint8_t prefix[5];  // the longest varint32
    uint8_t* end = CodedOutputStream::WriteVarint32ToArray(
        static_cast<uint32_t>(scratch_.size()), prefix);
    RETURN_IF_ERROR(Write(
        absl::string_view(reinterpret_cast<char*>(prefix), end - prefix)));
    RETURN_IF_ERROR(Write(scratch_));
  } else {
    // One "record { ... }" block per record: the file stays a valid TrapLog
    // after every Append, and nothing needs to be held until Close.
    google::protobuf::TextFormat::Printer printer;
    printer.SetInitialIndentLevel(1);
    printer.SetUseShortRepeatedPrimitives(true);
    // Fields from a newer schema would print as bare numbers, which the
    // reader rejects; the text form keeps only what this schema names.
    printer.SetHideUnknownFields(true);
    scratch_ = "record {\n";
    std::string body;
    printer.PrintToString(record, &body);
    scratch_ += body;
    scratch_ += "}\n";
    RETURN_IF_ERROR(Write(scratch_));
  }
  ++records_;
  return absl::OkStatus();
}

absl::Status TrapLogWriter::Close() {
  if (closed_) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": closed twice"));
  }
  closed_ = true;
  if (out_ != nullptr) {
    out_->flush();
    if (!out_->good()) {
      return absl::DataLossError(absl::StrCat(name_, ": write failed"));
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(FlushBuffer());
  if (::fsync(fd_) != 0) {
    return ErrnoStatus(errno, absl::StrCat(tmp_path_, ": fsync"));
  }
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return ErrnoStatus(err, absl::StrCat(tmp_path_, ": close"));
  }
  if (::rename(tmp_path_.c_str(), name_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return ErrnoStatus(err, absl::StrCat("rename ", tmp_path_, " to ", name_));
  }
  return SyncDir(DirName(name_));
}

// ---------------------------------------------------------------------------
// TrapLogReader

class TrapLogReader::Impl {
 public:
  virtual ~Impl() = default;
  // As TrapLogReader::Next; `n` is the 1-based number of the record to read.
  virtual absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) = 0;
};

namespace {

// The binary encoding. A fresh CodedInputStream per record keeps its 2 GiB
// total-bytes limit and position counter from ever mattering: offsets come
// from the underlying stream's 64-bit ByteCount.
class BinaryImpl final : public TrapLogReader::Impl {
 public:
  BinaryImpl(std::unique_ptr<std::istream> owned, std::istream* in,
             std::string name)
      : owned_(std::move(owned)), in_(in), name_(std::move(name)) {}

  absl::Status ReadMagic() {
    char magic[8] = {};
    in_->read(magic, sizeof(magic));
    std::streamsize got = in_->gcount();
    if (in_->bad()) {
      return absl::DataLossError(absl::StrCat(name_, ": read failed"));
    }
    if (got != static_cast<std::streamsize>(kTrapsMagic.size()) ||
        absl::string_view(magic, sizeof(magic)) != kTrapsMagic) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": not a .traps file: the first 8 bytes are not \"",
          kTrapsMagic, "\""));
    }
    zin_ = std::make_unique<google::protobuf::io::IstreamInputStream>(in_);
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) override {
    const int64_t start = Offset();
    auto where = [&] {
      return absl::StrCat(name_, ": record ", n, " at byte offset ", start,
                          ": ");
    };
    uint32_t size = 0;
    bool have_body = false;
    {
      CodedInputStream coded(zin_.get());
      const void* data;
      int avail;
      if (!coded.GetDirectBufferPointer(&data, &avail)) {
        if (in_->bad()) {
          return absl::DataLossError(absl::StrCat(where(), "read failed"));
        }
        return false;  // clean end: between records
      }
      if (!coded.ReadVarint32(&size)) {
        return absl::DataLossError(
            absl::StrCat(where(), "truncated or corrupt length prefix"));
      }
      if (size > kMaxTrapRecordBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "length ", size, " exceeds the limit of ",
                         kMaxTrapRecordBytes, " bytes (corrupt file?)"));
      }
      have_body = coded.ReadString(&body_, static_cast<int>(size));
    }
    if (!have_body) {
      int64_t left =
          Offset() - start -
          static_cast<int64_t>(CodedOutputStream::VarintSize32(size));
      return absl::DataLossError(
          absl::StrCat(where(), "truncated: the record is ", size,
                       " bytes but only ", left < 0 ? 0 : left, " remain"));
    }
    record->Clear();
    if (!record->ParseFromString(body_)) {
      return absl::DataLossError(absl::StrCat(
          where(), "not a valid pvemu.v1.TrapRecord (", size, " bytes)"));
    }
    return true;
  }

 private:
  int64_t Offset() const {
    return static_cast<int64_t>(kTrapsMagic.size()) + zin_->ByteCount();
  }

  std::unique_ptr<std::istream> owned_;
  std::istream* in_;
  std::string name_;
  std::unique_ptr<google::protobuf::io::IstreamInputStream> zin_;
  std::string body_;  // reused: at most kMaxTrapRecordBytes
};

class TextImpl final : public TrapLogReader::Impl {
 public:
  absl::Status Load(std::istream* in, absl::string_view name) {
    name_ = std::string(name);
    std::string text(std::istreambuf_iterator<char>(*in), {});
    if (in->bad()) {
      return absl::DataLossError(absl::StrCat(name, ": read failed"));
    }
    return ParseTextProto(text, name, &log_);
  }

  absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) override {
    if (n > log_.record_size()) return false;
    record->Clear();
    record->Swap(log_.mutable_record(static_cast<int>(n - 1)));
    RETURN_IF_ERROR(
        CheckStrings(*record, absl::StrCat(name_, ": record ", n, ": ")));
    return true;
  }

 private:
  std::string name_;
  v1::TrapLog log_;
};

}  // namespace

TrapLogReader::TrapLogReader(TrapLogEncoding encoding, std::string name)
    : encoding_(encoding), name_(std::move(name)) {}

TrapLogReader::~TrapLogReader() = default;

absl::StatusOr<std::unique_ptr<TrapLogReader>> TrapLogReader::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(TrapLogEncoding encoding, TrapLogEncodingForPath(path));
  auto file = std::make_unique<std::ifstream>();
  RETURN_IF_ERROR(OpenForReading(path, file.get()));
  std::unique_ptr<TrapLogReader> r(new TrapLogReader(encoding, path));
  if (encoding == TrapLogEncoding::kBinary) {
    std::istream* in = file.get();
    auto impl = std::make_unique<BinaryImpl>(std::move(file), in, path);
    RETURN_IF_ERROR(impl->ReadMagic());
    r->impl_ = std::move(impl);
  } else {
    auto impl = std::make_unique<TextImpl>();
    RETURN_IF_ERROR(impl->Load(file.get(), path));
    r->impl_ = std::move(impl);
  }
  return r;
}

absl::StatusOr<std::unique_ptr<TrapLogReader>> TrapLogReader::ForStream(
    std::istream* in, TrapLogEncoding encoding, absl::string_view name) {
  std::unique_ptr<TrapLogReader> r(
      new TrapLogReader(encoding, std::string(name)));
  if (encoding == TrapLogEncoding::kBinary) {
    auto impl = std::make_unique<BinaryImpl>(nullptr, in, std::string(name));
    RETURN_IF_ERROR(impl->ReadMagic());
    r->impl_ = std::move(impl);
  } else {
    auto impl = std::make_unique<TextImpl>();
    RETURN_IF_ERROR(impl->Load(in, name));
    r->impl_ = std::move(impl);
  }
  return r;
}

absl::StatusOr<bool> TrapLogReader::Next(v1::TrapRecord* record) {
  if (!sticky_error_.ok()) return sticky_error_;
  absl::StatusOr<bool> got = impl_->Next(record, records_ + 1);
  if (!got.ok()) {
    sticky_error_ = got.status();
    return got;
  }
  if (*got) ++records_;
  return got;
}

// ---------------------------------------------------------------------------
// CheckExpectation

namespace {

// What the expected `value` is read from.
enum class ValueSource { kNone, kRdmsr, kCpuid, kIn8, kIn16, kIn32 };

// A deliberately tiny look at the bytes: skip legacy prefixes and REX, then
// recognise the few opcodes whose result a log can record. The decoder is
// the authority on instructions; this only needs to know where to look.
ValueSource SourceFromBytes(absl::string_view insn, v1::CpuMode mode) {
  const bool is64 = mode == v1::MODE_64 || mode == v1::CPU_MODE_UNSPECIFIED;
  const bool default16 = mode == v1::MODE_REAL || mode == v1::MODE_16;
  bool opsize = false;
  size_t i = 0;
  for (; i < insn.size(); ++i) {
    uint8_t b = static_cast<uint8_t>(insn[i]);
    if (b == 0x66) {
      opsize = true;
    } else if (b == 0x67 || b == 0xf0 || b == 0xf2 || b == 0xf3 || b == 0x2e ||
               b == 0x36 || b == 0x3e || b == 0x26 || b == 0x64 || b == 0x65) {
      // other legacy prefixes do not change what is read
    } else if (is64 && (b & 0xf0) == 0x40) {
      // REX: IN has no 64-bit form, RDMSR/CPUID ignore REX.W
    } else {
      break;
    }
  }
  if (i >= insn.size()) return ValueSource::kNone;
  uint8_t op = static_cast<uint8_t>(insn[i]);
  if (op == 0xe4 || op == 0xec) return ValueSource::kIn8;
  if (op == 0xe5 || op == 0xed) {
    return (default16 != opsize) ? ValueSource::kIn16 : ValueSource::kIn32;
  }
  if (op == 0x0f && i + 1 < insn.size()) {
    uint8_t op2 = static_cast<uint8_t>(insn[i + 1]);
    if (op2 == 0x32) return ValueSource::kRdmsr;
    if (op2 == 0xa2) return ValueSource::kCpuid;
  }
  return ValueSource::kNone;
}

ValueSource SourceFromInstruction(const v1::Instruction& insn) {
  if (insn.mnemonic() == "rdmsr") return ValueSource::kRdmsr;
  if (insn.mnemonic() == "cpuid") return ValueSource::kCpuid;
  if (insn.mnemonic() == "in") {
    switch (insn.operand_size()) {
      case 8:
        return ValueSource::kIn8;
      case 16:
        return ValueSource::kIn16;
      default:
        return ValueSource::kIn32;
    }
  }
  return ValueSource::kNone;
}

std::string Hex(uint64_t v) { return absl::StrCat("0x", absl::Hex(v)); }

uint64_t ValueOf(ValueSource src, const v1::Registers& r) {
  switch (src) {
    case ValueSource::kRdmsr:
      return (r.rdx() << 32) | (r.rax() & 0xffffffffu);
    case ValueSource::kIn8:
      return r.rax() & 0xffu;
    case ValueSource::kIn16:
      return r.rax() & 0xffffu;
    case ValueSource::kIn32:
      return r.rax() & 0xffffffffu;
    default:
      return r.rax();
  }
}

std::string DescribeExpected(const v1::Expectation& e) {
  std::vector<std::string> parts;
  if (e.kind() != v1::Outcome::KIND_UNSPECIFIED) {
    parts.push_back(v1::Outcome::Kind_Name(e.kind()));
  } else if (e.has_vector()) {
    parts.push_back("EXCEPTION");
  }
  if (e.has_vector())
    parts.push_back(absl::StrCat("#", v1::Vector_Name(e.vector())));
  if (e.has_value()) parts.push_back(absl::StrCat("value=", Hex(e.value())));
  if (e.has_cpuid()) {
    parts.push_back(absl::StrCat(
        "eax=", Hex(e.cpuid().eax()), " ebx=", Hex(e.cpuid().ebx()),
        " ecx=", Hex(e.cpuid().ecx()), " edx=", Hex(e.cpuid().edx())));
  }
  if (parts.empty()) return "anything";
  return absl::StrJoin(parts, " ");
}

std::string DescribeGot(const v1::Outcome& o, ValueSource src) {
  std::string s = v1::Outcome::Kind_Name(o.kind());
  if (s.empty()) s = absl::StrCat("kind ", static_cast<int>(o.kind()));
  const v1::Registers& r = o.regs();
  if (o.kind() == v1::Outcome::EXCEPTION) {
    std::string name = v1::Vector_Name(o.exception().vector());
    if (name.empty())
      name = absl::StrCat(static_cast<int>(o.exception().vector()));
    absl::StrAppend(&s, " #", name);
  } else if (o.kind() == v1::Outcome::COMPLETED) {
    switch (src) {
      case ValueSource::kIn8:
      case ValueSource::kIn16:
      case ValueSource::kIn32:
        absl::StrAppend(&s, " rax=", Hex(r.rax()));
        break;
      case ValueSource::kCpuid:
        absl::StrAppend(&s, " rax=", Hex(r.rax()), " rbx=", Hex(r.rbx()),
                        " rcx=", Hex(r.rcx()), " rdx=", Hex(r.rdx()));
        break;
      default:
        absl::StrAppend(&s, " rax=", Hex(r.rax()), " rdx=", Hex(r.rdx()));
        break;
    }
  }
  return s;
}

absl::Status Check(const v1::Expectation& e, const v1::Outcome& o,
                   ValueSource src, absl::string_view insn_desc,
                   std::string* diff) {
  diff->clear();
  bool ok = true;
  if (e.kind() != v1::Outcome::KIND_UNSPECIFIED && e.kind() != o.kind()) {
    ok = false;
  }
  if (e.has_vector() && (o.kind() != v1::Outcome::EXCEPTION ||
                         o.exception().vector() != e.vector())) {
    ok = false;
  }
  if (e.has_value()) {
    if (src == ValueSource::kNone || src == ValueSource::kCpuid) {
      return absl::InvalidArgumentError(
          absl::StrCat("the expectation has a value, but ", insn_desc,
                       " is not RDMSR or IN, so there is no value to compare"));
    }
    if (o.kind() != v1::Outcome::COMPLETED ||
        ValueOf(src, o.regs()) != e.value()) {
      ok = false;
    }
  }
  if (e.has_cpuid()) {
    const v1::Registers& r = o.regs();
    const auto& c = e.cpuid();
    if (o.kind() != v1::Outcome::COMPLETED ||
        static_cast<uint32_t>(r.rax()) != c.eax() ||
        static_cast<uint32_t>(r.rbx()) != c.ebx() ||
        static_cast<uint32_t>(r.rcx()) != c.ecx() ||
        static_cast<uint32_t>(r.rdx()) != c.edx()) {
      ok = false;
    }
  }
  if (ok) return absl::OkStatus();
  *diff = absl::StrCat("expected ", DescribeExpected(e), ", got ",
                       DescribeGot(o, src));
  return absl::FailedPreconditionError(*diff);
}

std::string BytesHex(absl::string_view bytes) {
  std::string s;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i > 0) s += ' ';
    absl::StrAppend(&s,
                    absl::Hex(static_cast<uint8_t>(bytes[i]), absl::kZeroPad2));
  }
  return s;
}

}  // namespace

absl::Status CheckExpectation(const v1::TrapRecord& record,
                              const v1::Outcome& outcome, std::string* diff) {
  ValueSource src = SourceFromBytes(record.trap().insn(), record.trap().mode());
  if (src == ValueSource::kNone)
    src = SourceFromInstruction(outcome.instruction());
  return Check(record.expect(), outcome, src,
               absl::StrCat("the instruction (bytes ",
                            BytesHex(record.trap().insn()), ")"),
               diff);
}

absl::Status CheckExpectation(const v1::Expectation& expect,
                              const v1::Outcome& outcome, std::string* diff) {
  return Check(expect, outcome, SourceFromInstruction(outcome.instruction()),
               absl::StrCat("the instruction (\"",
                            outcome.instruction().mnemonic(), "\")"),
               diff);
}

}  // namespace pvemu::emulator
