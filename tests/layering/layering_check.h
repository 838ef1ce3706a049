// The layering check behind tests/layering: reads the table (layering.txt
// at the repository root) and finds every include and meson dependency of a
// source tree that breaks it. A library of the test, so the test can run it
// on the real tree and on a planted bad one.
#ifndef PVEMU_TESTS_LAYERING_LAYERING_CHECK_H_
#define PVEMU_TESTS_LAYERING_LAYERING_CHECK_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pvemu::layering {

struct Table {
  // Folder -> the folders it may use (itself not listed).
  std::map<std::string, std::set<std::string>> allowed;
  // Header -> the one folder that may include it.
  std::map<std::string, std::string> private_headers;
  // Meson dependency name -> its folder.
  std::map<std::string, std::string> deps;
};

// Parses the table's text; InvalidArgument naming "NAME:LINE" for a line it
// cannot read, or a folder used before its own line.
absl::StatusOr<Table> ParseTable(absl::string_view text, absl::string_view name);

// One broken rule, for people: "kvm/data_plane.cc:20: includes
// server/hosts/open_host.h (folder server), which kvm may not use
// (layering.txt allows kvm: dispatch hosts ...)".
using Violations = std::vector<std::string>;

// Every .h/.cc/.c file under the table's folders in `root`: its quoted and
// angle includes, classified by folder (a path under a listed folder, a
// proto, grpc or xen header; anything else is a system or third-party
// header and not checked).
Violations CheckIncludes(const Table& table, const std::string& root);

// Every meson.build under the table's folders: the `*_dep` names it uses
// (those it declares itself aside).
Violations CheckMesonDeps(const Table& table, const std::string& root);

// Top-level folders of `root` with C/C++ sources that the table does not
// list (tests, docs, scripts, dist and build trees aside): a new folder must
// say where it sits.
Violations CheckEveryFolderIsListed(const Table& table, const std::string& root);

}  // namespace pvemu::layering

#endif  // PVEMU_TESTS_LAYERING_LAYERING_CHECK_H_
