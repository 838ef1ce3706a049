#include "tests/layering/layering_check.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pvemu::layering {
namespace fs = std::filesystem;

namespace {

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The listed folder that holds `path` (a path from the root): the longest
// listed prefix, so hosts/xen/x.h is in hosts/xen, not hosts. "" for none.
std::string FolderOf(const Table& table, absl::string_view path) {
  std::string best;
  for (const auto& [folder, unused] : table.allowed) {
    if (absl::StartsWith(path, folder + "/") && folder.size() > best.size()) best = folder;
  }
  return best;
}

// The folder an include names, or "" when it is not ours to check.
std::string FolderOfInclude(const Table& table, absl::string_view include, bool angle,
                            const fs::path& includer_dir, const std::string& root) {
  if (absl::EndsWith(include, ".grpc.pb.h") || absl::StartsWith(include, "grpcpp/") ||
      absl::StartsWith(include, "grpc/")) {
    return "grpc";
  }
  if (absl::StartsWith(include, "pvemu/v1/") || absl::StartsWith(include, "etcdserverpb/") ||
      absl::StartsWith(include, "mvccpb/")) {
    return "proto";
  }
  if (angle) {
    // Xen's own headers: <xen/vm_event.h>, <xenctrl.h>, <xenevtchn.h>, ...
    if (absl::StartsWith(include, "xen/") || absl::StartsWith(include, "xen")) return "xen";
    return "";  // the C and C++ libraries, the kernel's headers
  }
  // A quoted include beside its includer ("devices.h") is its own folder's.
  if (!absl::StrContains(include, '/') && fs::exists(includer_dir / std::string(include))) {
    return FolderOf(table, fs::relative(includer_dir / std::string(include), root).string());
  }
  std::string folder = FolderOf(table, include);
  if (!folder.empty()) return folder;
  // A bare name found through an include directory ("pvemu_kvm.h" from
  // kvm/vm): the listed folder that has it.
  if (!absl::StrContains(include, '/')) {
    for (const auto& [candidate, unused] : table.allowed) {
      if (fs::exists(fs::path(root) / candidate / std::string(include))) return candidate;
    }
  }
  return "";
}

bool Allowed(const Table& table, const std::string& from, const std::string& to) {
  if (to.empty() || to == from) return true;
  auto it = table.allowed.find(from);
  return it != table.allowed.end() && it->second.count(to) > 0;
}

std::string AllowsText(const Table& table, const std::string& from) {
  auto it = table.allowed.find(from);
  std::string list = it == table.allowed.end() || it->second.empty()
                         ? "nothing"
                         : absl::StrJoin(it->second, " ");
  return absl::StrCat("(layering.txt allows ", from, ": ", list, ")");
}

bool IsSource(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".h" || ext == ".cc" || ext == ".c";
}

// Every file under the listed folders of `root` that `keep` wants.
template <typename Keep>
std::vector<fs::path> FilesUnder(const Table& table, const std::string& root, Keep keep) {
  std::set<fs::path> files;
  for (const auto& [folder, unused] : table.allowed) {
    const fs::path dir = fs::path(root) / folder;
    if (!fs::is_directory(dir)) continue;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
      if (e.is_regular_file() && keep(e.path())) files.insert(e.path());
    }
  }
  return {files.begin(), files.end()};
}

}  // namespace

absl::StatusOr<Table> ParseTable(absl::string_view text, absl::string_view name) {
  Table table;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", line_no, ": ", why));
    };
    if (words[0] == "private" || words[0] == "dep") {
      if (words.size() != 3) return bad(absl::StrCat("`", words[0], "` takes two words"));
      if (words[0] == "private") {
        table.private_headers[words[1]] = words[2];
      } else {
        table.deps[words[1]] = words[2];
      }
      continue;
    }
    if (!absl::EndsWith(words[0], ":")) {
      return bad("expected `FOLDER: FOLDER...`, `private FILE FOLDER` or `dep NAME FOLDER`");
    }
    const std::string folder(absl::StripSuffix(words[0], ":"));
    if (table.allowed.count(folder) > 0) return bad(absl::StrCat(folder, " is listed twice"));
    std::set<std::string>& allowed = table.allowed[folder];
    for (size_t i = 1; i < words.size(); ++i) {
      // One way down: a folder may use only folders listed above it.
      if (table.allowed.count(words[i]) == 0 || words[i] == folder) {
        return bad(absl::StrCat(folder, " uses ", words[i],
                                ", which is not listed above it (dependencies run one way)"));
      }
      allowed.insert(words[i]);
    }
  }
  return table;
}

Violations CheckIncludes(const Table& table, const std::string& root) {
  static const std::regex kInclude(R"re(^\s*#\s*include\s*([<"])([^>"]+)[>"])re");
  Violations out;
  for (const fs::path& file : FilesUnder(table, root, IsSource)) {
    const std::string rel = fs::relative(file, root).string();
    const std::string from = FolderOf(table, rel);
    std::istringstream text(ReadFile(file));
    std::string line;
    for (int line_no = 1; std::getline(text, line); ++line_no) {
      std::smatch m;
      if (!std::regex_search(line, m, kInclude)) continue;
      const std::string include = m[2];
      const bool angle = m[1] == "<";
      if (!angle) {
        auto priv = table.private_headers.find(include);
        if (priv != table.private_headers.end() && priv->second != from) {
          out.push_back(absl::StrCat(rel, ":", line_no, ": includes ", include,
                                     ", which is private to ", priv->second, "/"));
          continue;
        }
      }
      const std::string to = FolderOfInclude(table, include, angle, file.parent_path(), root);
      if (!Allowed(table, from, to)) {
        out.push_back(absl::StrCat(rel, ":", line_no, ": includes ", include, " (folder ", to,
                                   "), which ", from, " may not use ", AllowsText(table, from)));
      }
    }
  }
  return out;
}

Violations CheckMesonDeps(const Table& table, const std::string& root) {
  static const std::regex kDep(R"(\b([a-z0-9_]+_deps?)\b)");
  static const std::regex kDeclared(R"(^\s*([a-z0-9_]+_deps?)\s*(\+?=))");
  Violations out;
  auto is_meson = [](const fs::path& p) { return p.filename() == "meson.build"; };
  for (const fs::path& file : FilesUnder(table, root, is_meson)) {
    const std::string rel = fs::relative(file, root).string();
    const std::string from = FolderOf(table, rel);
    const std::string text = ReadFile(file);
    std::set<std::string> declared;
    {
      std::istringstream lines(text);
      std::string line;
      while (std::getline(lines, line)) {
        std::smatch m;
        if (std::regex_search(line, m, kDeclared)) declared.insert(m[1]);
      }
    }
    std::istringstream lines(text);
    std::string line;
    for (int line_no = 1; std::getline(lines, line); ++line_no) {
      line = line.substr(0, line.find('#'));
      for (auto it = std::sregex_iterator(line.begin(), line.end(), kDep);
           it != std::sregex_iterator(); ++it) {
        const std::string name = (*it)[1];
        if (declared.count(name) > 0) continue;
        auto dep = table.deps.find(name);
        if (dep == table.deps.end()) continue;  // a system library
        if (!Allowed(table, from, dep->second)) {
          out.push_back(absl::StrCat(rel, ":", line_no, ": uses ", name, " (folder ",
                                     dep->second, "), which ", from, " may not use ",
                                     AllowsText(table, from)));
        }
      }
    }
  }
  return out;
}

Violations CheckEveryFolderIsListed(const Table& table, const std::string& root) {
  static const std::set<std::string> kNotLayers = {"tests", "docs", "scripts", "dist"};
  Violations out;
  for (const fs::directory_entry& top : fs::directory_iterator(root)) {
    const std::string name = top.path().filename().string();
    if (!top.is_directory() || name.front() == '.' || kNotLayers.count(name) > 0 ||
        table.allowed.count(name) > 0 || fs::exists(top.path() / "build.ninja") ||
        fs::exists(top.path() / "meson-private")) {
      continue;
    }
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(top.path())) {
      if (e.is_regular_file() && IsSource(e.path())) {
        out.push_back(absl::StrCat(name, "/ holds sources (", fs::relative(e.path(), root).string(),
                                   ") but has no line in layering.txt: say what it may use"));
        break;
      }
    }
  }
  return out;
}

}  // namespace pvemu::layering
