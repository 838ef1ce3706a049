#include "traplog/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "emulator/trap_convert.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "traplog/text_format.h"
#include "traplog/traps_format.h"
#include "traplog/traps_layout.h"

namespace pvemu::traplog {

using emulator::Trap;
using emulator::TrapFromProto;
namespace v1 = ::pvemu::v1;
using ::google::protobuf::io::CodedInputStream;
using ::google::protobuf::io::CodedOutputStream;
// The PVTRAPS2 layout's names the framing below uses.
using traps_v2::kBodyBytes;
using traps_v2::kFixed;
using traps_v2::kMinBody;
using traps_v2::kPrefix;
using traps_v2::Load32;

// ---------------------------------------------------------------------------
// TrapLogReader

class TrapLogReader::Impl {
 public:
  virtual ~Impl() = default;
  // As TrapLogReader::Next; `n` is the 1-based number of the record to read.
  virtual absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) = 0;

  // As TrapLogReader::NextTrapIn (NextTrap is the whole log's share). `*n`
  // is the number of the next record to read; it is left at the number of
  // the record returned (or of the one that failed, or one past the last at
  // the end). This form reads each message with Next() and converts the
  // share's.
  virtual absl::StatusOr<bool> NextTrapIn(const VcpuShare& share, Trap* trap,
                                          ExpectedOutcome* expect, int64_t* n) {
    while (true) {
      ASSIGN_OR_RETURN(bool more, Next(&scratch_, *n));
      if (!more) return false;
      if (share.Owns(scratch_.trap().vcpu())) break;
      ++*n;
    }
    absl::StatusOr<Trap> converted = TrapFromProto(scratch_.trap());
    if (!converted.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(*n), converted.status().message()));
    }
    *trap = *converted;
    if (expect != nullptr)
      *expect = ExpectedOutcomeFromProto(scratch_.expect());
    return true;
  }

  // As TrapLogReader::LastSource.
  virtual std::string LastSource() const { return scratch_.source(); }

 protected:
  // "NAME: record N ...: " for record `n`, which Next() just read.
  virtual std::string Where(int64_t n) const = 0;

 private:
  v1::TrapRecord scratch_;  // NextTrapIn's, reused
};

namespace {

// PVTRAPS1. A fresh CodedInputStream per record keeps its 2 GiB total-bytes
// limit and position counter from ever mattering: offsets come from the
// underlying stream's 64-bit ByteCount.
class V1Impl final : public TrapLogReader::Impl {
 public:
  // `in` is just past the magic.
  V1Impl(std::unique_ptr<std::istream> owned, std::istream* in,
         std::string name)
      : owned_(std::move(owned)),
        in_(in),
        name_(std::move(name)),
        zin_(std::make_unique<google::protobuf::io::IstreamInputStream>(in)) {}

  absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) override {
    const int64_t start = Offset();
    start_ = start;
    auto where = [&] { return Where(n); };  // for this record
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

 protected:
  std::string Where(int64_t n) const override {
    return absl::StrCat(name_, ": record ", n, " at byte offset ", start_,
                        ": ");
  }

 private:
  int64_t Offset() const {
    return static_cast<int64_t>(kTrapsMagicV1.size()) + zin_->ByteCount();
  }

  std::unique_ptr<std::istream> owned_;
  std::istream* in_;
  std::string name_;
  std::unique_ptr<google::protobuf::io::IstreamInputStream> zin_;
  std::string body_;   // reused: at most kMaxTrapRecordBytes
  int64_t start_ = 0;  // where the last record read starts
};

// PVTRAPS2. Records are decoded in place from a window of the file's bytes:
// data_[0, end_) holds the bytes from file offset base_, and the next record
// starts at data_[pos_]. The window comes from one of two places:
//   - a regular file is mapped (mmap), kWindowBytes at a time; moving on
//     maps the next window and unmaps the last, so memory stays that of one
//     window, and no byte is copied (read() spent about 20% of a replay in
//     the kernel's copy);
//   - a stream (a FIFO, a caller's istream) fills one buffer of about
//     1 MiB that can hold the largest record: when the next record is not
//     whole in it, what is left moves to the front and one istream::read
//     fills the rest.
class V2Impl final : public TrapLogReader::Impl {
 public:
  static constexpr size_t kBufferBytes = kPrefix + kMaxTrapRecordBytes;
  // A multiple of any page size, and larger than the largest record, so a
  // window always holds at least one whole record.
  static constexpr size_t kWindowBytes = size_t{4} << 20;
  static_assert(kWindowBytes >= 2 * kBufferBytes);

  // Reads from `in`, which is just past the magic.
  V2Impl(std::unique_ptr<std::istream> owned, std::istream* in,
         std::string name)
      : owned_(std::move(owned)),
        in_(in),
        name_(std::move(name)),
        buf_(new char[kBufferBytes]),  // not zeroed: untouched pages stay free
        data_(buf_.get()),
        base_(static_cast<int64_t>(kTrapsMagic.size())) {}

  // Maps the regular file open at `fd` (owned from here), whose magic was
  // read and names PVTRAPS2.
  V2Impl(int fd, std::string name)
      : name_(std::move(name)),
        fd_(fd),
        base_(static_cast<int64_t>(kTrapsMagic.size())) {}

  ~V2Impl() override {
    Unmap();
    if (fd_ >= 0) close(fd_);
  }

  absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) override {
    const char* r;
    absl::Status error;
    if (!Frame(n, &r, &error)) {
      if (!error.ok()) return error;
      return false;
    }
    record->Clear();
    DecodeTrapsRecord(r, record);
    return true;
  }

  // Another share's records are framed (so validated: damage anywhere stops
  // every share at the same record) but not decoded.
  absl::StatusOr<bool> NextTrapIn(const VcpuShare& share, Trap* trap,
                                  ExpectedOutcome* expect, int64_t* n) override {
    const char* r;
    absl::Status error;
    while (true) {
      if (!Frame(*n, &r, &error)) [[unlikely]] {
        if (!error.ok()) return error;
        return false;
      }
      if (share.Owns(Load32(r + traps_v2::kVcpu))) break;
      ++*n;
    }
    traps_v2::DecodeTrap(r, trap);
    if (traps_v2::TrapFromProtoMayRefuse(*trap)) [[unlikely]] {
      RETURN_IF_ERROR(ConvertsLikeTrapFromProto(r, *n));
    }
    if (expect != nullptr) traps_v2::DecodeExpect(r, expect);
    return true;
  }

  // The record Frame() gave last is still in the window: the window moves
  // only when the next one is framed.
  std::string LastSource() const override {
    if (last_ == nullptr) return "";
    return std::string(last_ + kFixed, Load32(last_ + traps_v2::kSourceLen));
  }

 protected:
  // For the record at pos_: Frame's errors come before it consumes one.
  std::string Where(int64_t n) const override {
    return WhereAt(n, base_ + static_cast<int64_t>(pos_));
  }

 private:
  std::string WhereAt(int64_t n, int64_t offset) const {
    return absl::StrCat(name_, ": record ", n, " at byte offset ", offset,
                        ": ");
  }

  // TrapFromProto's verdict on the trap of the record at `r` (just framed),
  // as an error naming record `n` like the other encodings' NextTrap.
  ABSL_ATTRIBUTE_NOINLINE absl::Status ConvertsLikeTrapFromProto(const char* r,
                                                                 int64_t n) {
    v1::TrapRecord record;
    DecodeTrapsRecord(r, &record);
    absl::StatusOr<Trap> converted = TrapFromProto(record.trap());
    if (converted.ok()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        WhereAt(n, base_ + (r - data_)), converted.status().message()));
  }

  // Points *rec at the next record, whole in the window and valid, and
  // consumes it. Returns false at the end: *error stays OK at a clean end
  // and says what is wrong otherwise (record `n`).
  bool Frame(int64_t n, const char** rec, absl::Status* error) {
    const size_t have = end_ - pos_;
    if (have >= kFixed) [[likely]] {
      const char* r = data_ + pos_;
      const uint32_t body = Load32(r + kBodyBytes);
      if (have >= kPrefix + body && traps_v2::FastValid(r, body)) [[likely]] {
        *rec = last_ = r;
        pos_ += kPrefix + body;
        return true;
      }
    }
    return FrameSlow(n, rec, error);
  }

  // Frame's path for moving the window, the end, damage, and records of
  // other shapes than FastValid's.
  ABSL_ATTRIBUTE_NOINLINE bool FrameSlow(int64_t n, const char** rec,
                                         absl::Status* error) {
    last_ = nullptr;  // the window may move
    if (!Fill(kPrefix)) {
      const size_t have = end_ - pos_;
      if (read_failed_) {
        *error = absl::DataLossError(absl::StrCat(Where(n), ReadFailure()));
      } else if (have != 0) {
        *error = absl::DataLossError(absl::StrCat(Where(n), "truncated: only ",
                                                  have, " of the ", kPrefix,
                                                  " length bytes remain"));
      }
      return false;  // else a clean end: between records
    }
    const uint32_t body = Load32(data_ + pos_ + kBodyBytes);
    if (body > kMaxTrapRecordBytes) {
      *error = absl::InvalidArgumentError(
          absl::StrCat(Where(n), "length ", body, " exceeds the limit of ",
                       kMaxTrapRecordBytes, " bytes (corrupt file?)"));
      return false;
    }
    if (body < kMinBody) {
      *error = absl::DataLossError(
          absl::StrCat(Where(n), "length ", body, " is shorter than the ",
                       kMinBody, "-byte fixed part of a PVTRAPS2 record"));
      return false;
    }
    if (!Fill(kPrefix + body)) {
      *error = absl::DataLossError(
          read_failed_ ? absl::StrCat(Where(n), ReadFailure())
                       : absl::StrCat(Where(n), "truncated: the record is ",
                                      body, " bytes but only ",
                                      end_ - pos_ - kPrefix, " remain"));
      return false;
    }
    const char* r = data_ + pos_;
    const uint32_t damage = traps_v2::DamageOf(r, body);
    if (damage != 0) {
      *error = absl::DataLossError(
          absl::StrCat(Where(n), traps_v2::DescribeDamage(damage, r, body)));
      return false;
    }
    *rec = last_ = r;
    pos_ += kPrefix + body;
    return true;
  }

  std::string ReadFailure() const {
    if (fd_ < 0) {
      return "read failed: the stream reported an I/O error; check the device the log is "
             "on (or, for a FIFO, its writer) and replay again";
    }
    return absl::StrCat("cannot read the file through a mapping: ", std::strerror(read_errno_),
                        "; replay a copy on a local file system, or stream it "
                        "through a FIFO named *.traps");
  }

  // Makes `need` (<= kBufferBytes) bytes available from pos_. False if the
  // file or stream ends (or fails, read_failed_) first; what there is stays
  // in the window for the error to count.
  bool Fill(size_t need) {
    if (end_ - pos_ >= need) return true;
    return fd_ >= 0 ? MapFrom(base_ + static_cast<int64_t>(pos_), need)
                    : FillFromStream(need);
  }

  // Moves what is left to the front of the buffer and fills the rest.
  bool FillFromStream(size_t need) {
    if (pos_ != 0) {
      std::memmove(buf_.get(), buf_.get() + pos_, end_ - pos_);
      base_ += static_cast<int64_t>(pos_);
      end_ -= pos_;
      pos_ = 0;
    }
    while (end_ < need && !eof_) {
      const size_t want = kBufferBytes - end_;
      in_->read(buf_.get() + end_, static_cast<std::streamsize>(want));
      const size_t got = static_cast<size_t>(in_->gcount());
      end_ += got;
      if (got < want) {
        eof_ = true;
        read_failed_ = in_->bad();
      }
    }
    return end_ >= need;
  }

  // Maps the window that starts at file offset `start` (rounded down to a
  // page) and unmaps the last one. The file's size is looked up again when
  // the window would end at it, so a capture still being appended to
  // replays as far as it has been written, as a read() would.
  bool MapFrom(int64_t start, size_t need) {
    if (static_cast<uint64_t>(start) + need > file_size_) {
      struct stat st;
      if (fstat(fd_, &st) != 0) return Failed(errno);
      file_size_ = static_cast<uint64_t>(st.st_size);
    }
    Unmap();
    static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t from = static_cast<uint64_t>(start);
    const uint64_t aligned = from & ~(page - 1);
    const uint64_t skip = from - aligned;
    const uint64_t left = file_size_ > aligned ? file_size_ - aligned : 0;
    const size_t len = static_cast<size_t>(std::min<uint64_t>(left, kWindowBytes));
    base_ = start;
    pos_ = 0;
    end_ = 0;
    data_ = nullptr;
    if (len > skip) {
      // Not MAP_POPULATE: faulting pages in as records are read keeps
      // readahead ahead of the replay (populating measured 5-15% slower).
      void* map = mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd_,
                       static_cast<off_t>(aligned));
      if (map == MAP_FAILED) return Failed(errno);
      madvise(map, len, MADV_SEQUENTIAL);  // a hint: read ahead, drop behind
      map_ = static_cast<char*>(map);
      map_len_ = len;
      data_ = map_ + skip;
      end_ = len - skip;
    }
    return end_ >= need;
  }

  bool Failed(int err) {
    read_failed_ = true;
    read_errno_ = err;
    return false;
  }

  void Unmap() {
    if (map_ != nullptr) munmap(map_, map_len_);
    map_ = nullptr;
    map_len_ = 0;
  }

  // The stream form's.
  std::unique_ptr<std::istream> owned_;
  std::istream* in_ = nullptr;
  std::string name_;
  std::unique_ptr<char[]> buf_;
  bool eof_ = false;
  // The mapped form's.
  int fd_ = -1;
  uint64_t file_size_ = 0;  // as last looked up
  char* map_ = nullptr;
  size_t map_len_ = 0;
  // The window, either form.
  const char* data_ = nullptr;
  size_t pos_ = 0;  // the next record starts at data_[pos_]
  const char* last_ = nullptr;  // the record Frame() gave last, while in the window
  size_t end_ = 0;  // bytes in the window
  int64_t base_;    // the file offset of data_[0]
  bool read_failed_ = false;
  int read_errno_ = 0;
};

// Reads the magic and picks the reader for the version it names. `mappable`
// is a descriptor of the same file when it is a regular one (else -1),
// owned from here: a PVTRAPS2 file is then mapped rather than read.
absl::StatusOr<std::unique_ptr<TrapLogReader::Impl>> OpenBinary(
    std::unique_ptr<std::istream> owned, std::istream* in,
    const std::string& name, int mappable = -1) {
  struct CloseUnlessTaken {
    int fd;
    ~CloseUnlessTaken() {
      if (fd >= 0) close(fd);
    }
  } fd{mappable};
  static_assert(kTrapsMagic.size() == kTrapsMagicV1.size());
  char magic[8] = {};
  static_assert(sizeof(magic) == kTrapsMagic.size());
  in->read(magic, sizeof(magic));
  const std::streamsize got = in->gcount();
  if (in->bad()) {
    return absl::DataLossError(absl::StrCat(name, ": read failed"));
  }
  const absl::string_view seen(magic, static_cast<size_t>(got));
  if (seen == kTrapsMagic) {
    if (fd.fd >= 0) return std::make_unique<V2Impl>(std::exchange(fd.fd, -1), name);
    return std::make_unique<V2Impl>(std::move(owned), in, name);
  }
  if (seen == kTrapsMagicV1) {
    return std::make_unique<V1Impl>(std::move(owned), in, name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": not a .traps file: the first 8 bytes are not \"",
                   kTrapsMagic, "\" (or the older \"", kTrapsMagicV1, "\")"));
}

// .textproto, a piece at a time (TextLogPieces): the records of one piece
// are handed out, then the next piece is parsed into the same message,
// reusing its records.
class TextImpl final : public TrapLogReader::Impl {
 public:
  TextImpl(std::unique_ptr<std::istream> owned, std::istream* in,
           absl::string_view name)
      : owned_(std::move(owned)), name_(name), pieces_(in, name) {}

  // Parses the first piece, so that a text that is no TrapLog, and any
  // error in a log of one piece, fails Open as before pieces.
  absl::Status Load() { return NextPiece().status(); }

  absl::StatusOr<bool> Next(v1::TrapRecord* record, int64_t n) override {
    while (next_ >= log_.record_size()) {
      ASSIGN_OR_RETURN(bool more, NextPiece());
      if (!more) return false;
    }
    record->Clear();
    record->Swap(log_.mutable_record(next_++));
    RETURN_IF_ERROR(CheckRecordStrings(*record, Where(n)));
    return true;
  }

 protected:
  std::string Where(int64_t n) const override {
    return absl::StrCat(name_, ": record ", n, ": ");
  }

 private:
  absl::StatusOr<bool> NextPiece() {
    if (ended_) return false;
    next_ = 0;
    absl::StatusOr<bool> more = pieces_.Next(&log_);
    if (!more.ok()) {
      log_.Clear();
      return more;
    }
    ended_ = !*more;
    return more;
  }

  std::unique_ptr<std::istream> owned_;
  std::string name_;
  TextLogPieces pieces_;
  v1::TrapLog log_;  // the current piece's records; reused
  int next_ = 0;     // the next of them to hand out
  bool ended_ = false;
};

// A descriptor for mapping `path` if it is a regular file on a file system
// that maps, else -1: a FIFO, a device, or a file system without mmap
// streams through the buffer instead.
int MappableFd(const std::string& path) {
  // Never open a FIFO a second time: with its writer gone (a short log
  // written whole into the pipe), opening it to read waits for another
  // writer forever. O_NONBLOCK as well, for a FIFO put in the file's place.
  struct stat named;
  if (stat(path.c_str(), &named) != 0 || !S_ISREG(named.st_mode)) return -1;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  void* probe = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    probe = mmap(nullptr, 1, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  if (probe == MAP_FAILED) {
    close(fd);
    return -1;
  }
  munmap(probe, 1);
  return fd;
}

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
    ASSIGN_OR_RETURN(r->impl_, OpenBinary(std::move(file), in, path, MappableFd(path)));
  } else {
    std::istream* in = file.get();
    auto impl = std::make_unique<TextImpl>(std::move(file), in, path);
    RETURN_IF_ERROR(impl->Load());
    r->impl_ = std::move(impl);
  }
  return r;
}

absl::StatusOr<std::unique_ptr<TrapLogReader>> TrapLogReader::ForStream(
    std::istream* in, TrapLogEncoding encoding, absl::string_view name) {
  std::unique_ptr<TrapLogReader> r(
      new TrapLogReader(encoding, std::string(name)));
  if (encoding == TrapLogEncoding::kBinary) {
    ASSIGN_OR_RETURN(r->impl_, OpenBinary(nullptr, in, std::string(name)));
  } else {
    auto impl = std::make_unique<TextImpl>(nullptr, in, name);
    RETURN_IF_ERROR(impl->Load());
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

absl::StatusOr<bool> TrapLogReader::NextTrapIn(const VcpuShare& share, Trap* trap,
                                               ExpectedOutcome* expect) {
  if (!sticky_error_.ok()) [[unlikely]]
    return sticky_error_;
  int64_t n = records_ + 1;
  absl::StatusOr<bool> got = impl_->NextTrapIn(share, trap, expect, &n);
  if (!got.ok()) [[unlikely]] {
    records_ = n - 1;
    sticky_error_ = got.status();
    return got;
  }
  records_ = *got ? n : n - 1;
  return got;
}

std::string TrapLogReader::LastSource() const { return impl_->LastSource(); }

absl::StatusOr<bool> TrapLogReader::NextTrap(Trap* trap,
                                             ExpectedOutcome* expect) {
  return NextTrapIn(VcpuShare{}, trap, expect);
}

}  // namespace pvemu::traplog
