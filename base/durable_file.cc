#include "base/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pvemu::base {
namespace {

std::atomic<int> sync_directory_failure{0};

}  // namespace

absl::Status ErrnoToStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(message);
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOENT:
    case ENOTDIR:
      return absl::FailedPreconditionError(message);
    default:
      return absl::UnavailableError(message);
  }
}

void SetSyncDirectoryFailureForTesting(int err) { sync_directory_failure.store(err); }

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status SyncDirectory(const std::string& dir) {
  if (int injected = sync_directory_failure.load(); injected != 0) {
    return ErrnoToStatus(injected, absl::StrCat("fsync of directory ", dir));
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open directory ", dir));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return ErrnoToStatus(err, absl::StrCat("fsync of directory ", dir));
  return absl::OkStatus();
}

absl::Status WriteAndSync(const std::string& path, absl::string_view data, unsigned mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("create ", path));
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return ErrnoToStatus(err, absl::StrCat(what, " ", path));
  };
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return ErrnoToStatus(err, absl::StrCat("close ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<DurableReplacement> DurableReplacement::Start(const std::string& from,
                                                              const std::string& to,
                                                              bool keep_previous) {
  // Nothing is replaced outright: each file that would be steps aside first
  // (the older .prev, then `to`), so a failure at any step, the directory
  // fsync included, can put everything back.
  DurableReplacement r;
  r.from_ = from;
  r.to_ = to;
  const std::string prev = to + (keep_previous ? ".prev" : ".replaced");
  const std::string older = prev + ".older";
  r.aside_ = {older, keep_previous ? std::string() : prev};
  auto step_aside = [&](const std::string& a, const std::string& b) -> absl::Status {
    if (::rename(a.c_str(), b.c_str()) == 0) {
      r.undo_.emplace_back(b, a);
      return absl::OkStatus();
    }
    if (errno == ENOENT) return absl::OkStatus();  // nothing there to keep
    return ErrnoToStatus(errno, absl::StrCat("rename ", a, " to ", b));
  };
  auto roll_back = [&](const absl::Status& why) {
    r.RollBack();
    return absl::Status(why.code(), absl::StrCat(why.message(), "; ", to, " is left as it was"));
  };
  // The older .prev goes only if `to` is there to take its place (a state
  // file moved aside as corrupt leaves the good .prev in place).
  if (keep_previous && ::access(to.c_str(), F_OK) == 0) {
    if (absl::Status s = step_aside(prev, older); !s.ok()) return roll_back(s);
  }
  if (absl::Status s = step_aside(to, prev); !s.ok()) return roll_back(s);
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return roll_back(ErrnoToStatus(errno, absl::StrCat("rename ", from, " to ", to)));
  }
  r.undo_.emplace_back(to, from);
  if (absl::Status synced = SyncDirectory(DirectoryOf(to)); !synced.ok()) return roll_back(synced);
  return r;
}

void DurableReplacement::RollBack() {
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
    ::rename(it->first.c_str(), it->second.c_str());
  }
  undo_.clear();
  ::unlink(from_.c_str());
}

absl::Status DurableReplacement::Undo() {
  RollBack();
  return SyncDirectory(DirectoryOf(to_));
}

void DurableReplacement::Finish() {
  // Durable already; what stepped aside and is not kept goes. (A crash
  // before these unlinks reach the disk leaves a stray file, never a wrong
  // one.)
  for (const std::string& path : aside_) {
    if (!path.empty()) ::unlink(path.c_str());
  }
  undo_.clear();
}

absl::Status RenameDurably(const std::string& from, const std::string& to, bool keep_previous) {
  absl::StatusOr<DurableReplacement> replaced = DurableReplacement::Start(from, to, keep_previous);
  if (!replaced.ok()) return replaced.status();
  replaced->Finish();
  return absl::OkStatus();
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view data, unsigned mode,
                              bool keep_previous) {
  const std::string tmp = path + ".tmp";
  absl::Status written = WriteAndSync(tmp, data, mode);
  if (!written.ok()) return written;
  return RenameDurably(tmp, path, keep_previous);
}

}  // namespace pvemu::base
