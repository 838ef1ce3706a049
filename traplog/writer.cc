#include "traplog/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "traplog/text_format.h"
#include "traplog/traps_format.h"

namespace pvemu::traplog {
namespace {

namespace v1 = ::pvemu::v1;

// Buffered bytes are handed to write(2) in chunks of about this size.
constexpr size_t kWriteChunk = size_t{1} << 16;

// ---------------------------------------------------------------------------
// Durable file replacement: the writer's own, until base/durable_file.h
// replaces it.

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

// Makes the temporary file *fd (at `tmp_path`, all written) the file at
// `path`, durably: fsync, close, rename over `path`, fsync the directory.
// Sets *fd to -1 once it is closed; if fsync fails it stays open for the
// caller to close and remove. (base/durable_file.h is to take this over.)
absl::Status ReplaceFileDurably(int* fd_in_out, const std::string& tmp_path,
                                const std::string& path) {
  if (::fsync(*fd_in_out) != 0) {
    return ErrnoStatus(errno, absl::StrCat(tmp_path, ": fsync"));
  }
  int fd = *fd_in_out;
  *fd_in_out = -1;
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_path.c_str());
    return ErrnoStatus(err, absl::StrCat(tmp_path, ": close"));
  }
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_path.c_str());
    return ErrnoStatus(err, absl::StrCat("rename ", tmp_path, " to ", path));
  }
  return SyncDir(DirName(path));
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
    return ErrnoStatus(errno, absl::StrCat(w->tmp_path_, ": cannot create"));
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
