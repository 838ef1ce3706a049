// Where each field of a parsed policy came from, so validators and `explain`
// can say "FILE:LINE:COL". Positions are keyed by field path
// ("domain[1].msr[0].writable_mask"); a policy that arrived as a message
// (gRPC) has a SourceMap with a name and no positions, and errors then name
// the field path instead of a line.
//
// Thread-safety: immutable after construction; safe to share.
#ifndef PVEMU_POLICY_SOURCE_MAP_H_
#define PVEMU_POLICY_SOURCE_MAP_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"

namespace pvemu::policy {

class SourceMap {
 public:
  // No positions; errors read "SOURCE:PATH: message".
  explicit SourceMap(std::string source = "<policy>") : source_(std::move(source)) {}

  // Every field position recorded in `tree` (from parsing `root`).
  static SourceMap FromParseInfo(std::string source,
                                 const google::protobuf::Message& root,
                                 const google::protobuf::TextFormat::ParseInfoTree& tree);

  // The positions of `text` as protobuf's text printer wrote it for a
  // message of type `root` (policy files the store writes), found by
  // reading the lines rather than parsing the values: an edit's state file
  // gets its positions without a second full parse. Columns are those of
  // each field's name. nullopt if `text` is not shaped like printer output
  // (the caller then parses it).
  static std::optional<SourceMap> FromPrinterOutput(std::string source,
                                                    const google::protobuf::Descriptor& root,
                                                    absl::string_view text);

  // Records the positions of `from_path` and every field below it in `from`
  // as positions of `path` (and below) here, with `from`'s source name:
  // a policy composed of several texts (fleet mode's layers, each an etcd
  // key) names each part's own text and line in errors. Positions this map
  // had under `path` are dropped first.
  void Graft(absl::string_view path, const SourceMap& from, absl::string_view from_path);
  // The positions of `from_path` and below, in this map, become those of
  // `path` (dropping what `path` had); those of `from_path` stay. Graft
  // within one map without copying it: composing moves a layer's rules
  // towards its front as rules below are shadowed.
  void Move(absl::string_view path, absl::string_view from_path);

  const std::string& source() const { return source_; }
  bool has_positions() const { return !pos_.empty(); }

  // 1-based line of a field path, or 0 if unknown.
  int Line(absl::string_view path) const;

  // "FILE:LINE:COL" for a known path, else "FILE:PATH". Falls back to the
  // nearest enclosing path that has a position (a rule's, a layer's).
  std::string Where(absl::string_view path) const;
  // "FILE:LINE" (for explain and tie messages), else "FILE:PATH".
  std::string WhereLine(absl::string_view path) const;

 private:
  struct Pos {
    int line;  // 1-based
    int col;   // 1-based
    int source = -1;  // index in other_sources_ (Graft), -1: source_
  };
  const std::string& SourceOf(const Pos& p) const {
    return p.source < 0 ? source_ : other_sources_[p.source];
  }
  const Pos* Find(absl::string_view path) const;
  // Drops the positions of `path` and every path below it.
  void Erase(absl::string_view path);
  void Record(const google::protobuf::Message& msg,
              const google::protobuf::TextFormat::ParseInfoTree& tree,
              const std::string& prefix);

  std::string source_;
  std::vector<std::string> other_sources_;
  // Ordered, so that the paths below one path are one range (Graft takes it
  // with lower_bound instead of scanning every position: composing a
  // fleet's layers grafts once per rule).
  absl::btree_map<std::string, Pos, std::less<>> pos_;
};

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_SOURCE_MAP_H_
