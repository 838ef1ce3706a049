// Files compiled into a library at build time (base/embed_files.py), so the
// daemon and the CLI work without their data installed. Immutable; safe from
// any thread.
#ifndef PVEMU_BASE_EMBEDDED_FILES_H_
#define PVEMU_BASE_EMBEDDED_FILES_H_

#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pvemu::base {

struct EmbeddedFile {
  absl::string_view name;  // "default", "intel-xeon-e-2136"
  absl::string_view text;  // the file's contents
};

// The text of the file called `name` in `files`, or "" if there is none.
inline absl::string_view FindEmbedded(absl::Span<const EmbeddedFile> files,
                                      absl::string_view name) {
  for (const EmbeddedFile& f : files) {
    if (f.name == name) return f.text;
  }
  return absl::string_view();
}

// Every name in `files`, in table order.
inline std::vector<absl::string_view> EmbeddedNames(absl::Span<const EmbeddedFile> files) {
  std::vector<absl::string_view> names;
  for (const EmbeddedFile& f : files) names.push_back(f.name);
  return names;
}

}  // namespace pvemu::base

#endif  // PVEMU_BASE_EMBEDDED_FILES_H_
