#include "traplog/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/durable_file.h"
#include "base/status_macros.h"
#include "traplog/text_format.h"
#include "traplog/traps_format.h"

namespace pvemu::traplog {
namespace {

namespace v1 = ::pvemu::v1;

// Buffered bytes are handed to write(2) in chunks of about this size.
constexpr size_t kWriteChunk = size_t{1} << 16;

// Makes the temporary file *fd (at `tmp_path`, all written) the file at
// `path`, durably and all or nothing (base/durable_file.h). Sets *fd to -1
// once it is closed; if fsync fails it stays open for the caller to close
// and remove.
absl::Status ReplaceFileDurably(int* fd_in_out, const std::string& tmp_path,
                                const std::string& path) {
  if (::fsync(*fd_in_out) != 0) return base::ErrnoToStatus(errno, absl::StrCat("fsync ", tmp_path));
  const int fd = *fd_in_out;
  *fd_in_out = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_path.c_str());
    return base::ErrnoToStatus(err, absl::StrCat("close ", tmp_path));
  }
  return base::RenameDurably(tmp_path, path, /*keep_previous=*/false);
}

}  // namespace

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
    return base::ErrnoToStatus(errno, absl::StrCat("create ", w->tmp_path_));
  }
  RETURN_IF_ERROR(w->Write(
      encoding == TrapLogEncoding::kBinary ? kTrapsMagic : kTextLogHeader));
  return w;
}

std::unique_ptr<TrapLogWriter> TrapLogWriter::ForStream(
    std::ostream* out, TrapLogEncoding encoding, absl::string_view name) {
  std::unique_ptr<TrapLogWriter> w(
      new TrapLogWriter(encoding, std::string(name)));
  w->out_ = out;
  // A stream write error surfaces at the first Append or at Close.
  absl::string_view header =
      encoding == TrapLogEncoding::kBinary ? kTrapsMagic : kTextLogHeader;
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
      return base::ErrnoToStatus(errno, absl::StrCat("write ", tmp_path_));
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
  const std::string where = absl::StrCat(name_, ": record ", records_ + 1);
  RETURN_IF_ERROR(CheckRecordStrings(record, absl::StrCat(where, ": ")));
  if (encoding_ == TrapLogEncoding::kBinary) {
    RETURN_IF_ERROR(EncodeTrapsRecord(record, where, &scratch_));
  } else {
    // One "record { ... }" block per record: the file stays a valid TrapLog
    // after every Append, and nothing needs to be held until Close.
    FormatTextRecord(record, &scratch_);
  }
  RETURN_IF_ERROR(Write(scratch_));
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
  return ReplaceFileDurably(&fd_, tmp_path_, name_);
}

}  // namespace pvemu::traplog
