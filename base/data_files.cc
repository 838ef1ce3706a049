#include "base/data_files.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifndef PVEMU_DATADIR
#error "PVEMU_DATADIR (meson's prefix/datadir) must be defined by base/meson.build"
#endif

namespace pvemu::base {

std::string InstalledDataDir(absl::string_view kind) {
  const char* env = std::getenv("PVEMU_DATADIR");
  const std::string datadir = env != nullptr && env[0] != 0 ? env : PVEMU_DATADIR;
  return absl::StrCat(datadir, "/pvemu/", kind);
}

std::optional<NamedFile> FindNamedFile(absl::Span<const EmbeddedFile> embedded,
                                       absl::string_view kind, absl::string_view name) {
  if (absl::string_view text = FindEmbedded(embedded, name); !text.empty()) {
    return NamedFile{std::string(text), ""};
  }
  if (name.empty() || name.find('/') != absl::string_view::npos || name[0] == '.') {
    return std::nullopt;
  }
  std::string path = absl::StrCat(InstalledDataDir(kind), "/", name, ".textproto");
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return NamedFile{std::move(text).str(), std::move(path)};
}

std::string KnownNames(absl::Span<const EmbeddedFile> embedded, absl::string_view kind) {
  std::string names = absl::StrJoin(EmbeddedNames(embedded), ", ");
  const std::string dir = InstalledDataDir(kind);
  std::vector<std::string> installed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".textproto") continue;
    std::string name = entry.path().stem().string();
    if (FindEmbedded(embedded, name).empty()) installed.push_back(std::move(name));
  }
  if (installed.empty()) return names;
  std::sort(installed.begin(), installed.end());
  return absl::StrCat(names, "; installed in ", dir, ": ", absl::StrJoin(installed, ", "));
}

}  // namespace pvemu::base
