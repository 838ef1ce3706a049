// Named data files (policies, sim host profiles): the ones pvemu ships are
// embedded (base/embedded_files.h) and also installed under
// DATADIR/pvemu/KIND/NAME.textproto, where an operator may add more. A name
// is looked up in the embedded table first, then in that directory.
//
// DATADIR is meson's prefix/datadir at build time (-DPVEMU_DATADIR); the
// environment variable PVEMU_DATADIR, when set and not empty, replaces it
// (an install under a DESTDIR, a test).
#ifndef PVEMU_BASE_DATA_FILES_H_
#define PVEMU_BASE_DATA_FILES_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/embedded_files.h"

namespace pvemu::base {

struct NamedFile {
  std::string text;
  std::string path;  // the installed file's path; "" when embedded
};

// DATADIR/pvemu/KIND, e.g. "/usr/local/share/pvemu/policies".
std::string InstalledDataDir(absl::string_view kind);

// `name` from `embedded`, else DATADIR/pvemu/KIND/NAME.textproto; nullopt
// if neither has it (or the file cannot be read).
std::optional<NamedFile> FindNamedFile(absl::Span<const EmbeddedFile> embedded,
                                       absl::string_view kind, absl::string_view name);

// For messages about an unknown name: the embedded names, then those
// installed in DATADIR/pvemu/KIND that are not embedded ("a, b; installed in
// DIR: c").
std::string KnownNames(absl::Span<const EmbeddedFile> embedded, absl::string_view kind);

}  // namespace pvemu::base

#endif  // PVEMU_BASE_DATA_FILES_H_
