// Files that must survive a crash: the policy state file, trap logs. One
// place writes them (temp file, fsync, rename, fsync the directory) and one
// mapping turns a failed file operation's errno into a Status, so every
// writer reports the same failure the same way.
#ifndef PVEMU_BASE_DURABLE_FILE_H_
#define PVEMU_BASE_DURABLE_FILE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pvemu::base {

// `what` (which says the operation and the path) plus strerror(err), with the
// code a writer's caller can act on: ResourceExhausted for a full disk or
// quota (ENOSPC, EDQUOT, EFBIG), FailedPrecondition for a place that cannot
// be written (EACCES, EPERM, EROFS, ENOENT, ENOTDIR), Unavailable otherwise
// (EIO and the rest: maybe transient).
absl::Status ErrnoToStatus(int err, absl::string_view what);

// fsync of a directory, which makes a rename in it durable. File systems that
// cannot sync a directory (EINVAL) count as synced.
absl::Status SyncDirectory(const std::string& dir);

// Creates (or truncates) `path` with `mode`, writes `data` and fsyncs it.
// On failure the file is removed.
absl::Status WriteAndSync(const std::string& path, absl::string_view data, unsigned mode);

// Moves the complete, synced file `from` to `to` and fsyncs the directory.
// With keep_previous, an existing `to` is kept as `to` + ".prev" (replacing
// the older one). Either everything happened or nothing: if any step fails,
// including the directory fsync, the renames are undone, `to` (and its
// .prev) are as they were, `from` is removed, and the error says so. `from`
// and `to` must be in the same directory.
absl::Status RenameDurably(const std::string& from, const std::string& to, bool keep_previous);

// RenameDurably in two steps, for a caller that may still have to take the
// replacement back after it is on disk (an edit whose compile fails): Start
// does everything RenameDurably does but keeps what stepped aside; Undo puts
// it all back (and fsyncs the directory), Finish drops it. Exactly one of
// them must follow a successful Start.
class DurableReplacement {
 public:
  static absl::StatusOr<DurableReplacement> Start(const std::string& from, const std::string& to,
                                                  bool keep_previous);
  absl::Status Undo();
  void Finish();

 private:
  DurableReplacement() = default;
  void RollBack();

  std::string from_, to_;
  std::vector<std::pair<std::string, std::string>> undo_;  // renames to reverse, in order
  std::vector<std::string> aside_;                         // to remove on Finish
};

// WriteAndSync to `path` + ".tmp", then RenameDurably onto `path`. All or
// nothing, as above.
absl::Status WriteFileDurably(const std::string& path, absl::string_view data, unsigned mode,
                              bool keep_previous);

// The directory part of `path` ("." for a bare name).
std::string DirectoryOf(const std::string& path);

// Test hook: while set, every SyncDirectory fails with this errno (0: off).
// For the tests that prove a failed directory fsync fails the write.
void SetSyncDirectoryFailureForTesting(int err);

}  // namespace pvemu::base

#endif  // PVEMU_BASE_DURABLE_FILE_H_
