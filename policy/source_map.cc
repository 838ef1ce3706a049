#include "policy/source_map.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"

namespace pvemu::policy {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using google::protobuf::TextFormat;

SourceMap SourceMap::FromParseInfo(std::string source, const Message& root,
                                   const TextFormat::ParseInfoTree& tree) {
  SourceMap map(std::move(source));
  map.Record(root, tree, "");
  return map;
}

void SourceMap::Record(const Message& msg, const TextFormat::ParseInfoTree& tree,
                       const std::string& prefix) {
  const Reflection* refl = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(msg, &fields);
  for (const FieldDescriptor* f : fields) {
    int count = f->is_repeated() ? refl->FieldSize(msg, f) : 1;
    for (int i = 0; i < count; ++i) {
      int index = f->is_repeated() ? i : -1;
      std::string path = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
      if (f->is_repeated()) absl::StrAppend(&path, "[", i, "]");
      TextFormat::ParseLocation loc = tree.GetLocation(f, index);
      if (loc.line >= 0) pos_[path] = Pos{loc.line + 1, loc.column + 1};
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        const TextFormat::ParseInfoTree* sub = tree.GetTreeForNested(f, index);
        if (sub == nullptr) continue;
        const Message& child = f->is_repeated() ? refl->GetRepeatedMessage(msg, f, i)
                                                : refl->GetMessage(msg, f);
        Record(child, *sub, path);
      }
    }
  }
}

std::optional<SourceMap> SourceMap::FromPrinterOutput(std::string source, const Descriptor& root,
                                                     absl::string_view text) {
  SourceMap map(std::move(source));
  struct Frame {
    const Descriptor* type;
    std::string path;
    absl::flat_hash_map<const FieldDescriptor*, int> seen;  // repeated fields so far
  };
  std::vector<Frame> stack;
  stack.push_back(Frame{&root, "", {}});
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const absl::string_view t = absl::StripLeadingAsciiWhitespace(line);
    if (t.empty() || t[0] == '#') continue;
    if (t == "}") {
      if (stack.size() == 1) return std::nullopt;
      stack.pop_back();
      continue;
    }
    // The printer writes "name {", "name: value" or "name: [v, v]" (short
    // repeated primitives); string values are quoted and escaped on one
    // line, so only a message opening ends in " {".
    const size_t name_end = t.find_first_of(": ");
    if (name_end == absl::string_view::npos) return std::nullopt;
    Frame& top = stack.back();
    const FieldDescriptor* f = top.type->FindFieldByName(std::string(t.substr(0, name_end)));
    if (f == nullptr) return std::nullopt;
    const bool opens = absl::EndsWith(t, " {");
    if (opens != (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)) return std::nullopt;
    const Pos pos{line_number, static_cast<int>(line.size() - t.size()) + 1};
    std::string path = top.path.empty() ? f->name() : absl::StrCat(top.path, ".", f->name());
    if (f->is_repeated()) {
      int& next = top.seen[f];
      absl::string_view value = absl::StripLeadingAsciiWhitespace(t.substr(name_end + 1));
      if (!opens && absl::StartsWith(value, "[")) {
        // One line, every element: as many as commas plus one.
        const int count = 1 + static_cast<int>(std::count(value.begin(), value.end(), ','));
        for (int i = 0; i < count; ++i) map.pos_[absl::StrCat(path, "[", next++, "]")] = pos;
        continue;
      }
      absl::StrAppend(&path, "[", next++, "]");
    }
    map.pos_[path] = pos;
    if (opens) stack.push_back(Frame{f->message_type(), std::move(path), {}});
  }
  if (stack.size() != 1) return std::nullopt;
  return map;
}

namespace {

// Whether `path` is `root` or a field below it ("a.b" is below "a", and
// "a[1]" below "a[1]", but "a[10]" is not below "a[1]").
bool Below(absl::string_view path, absl::string_view root) {
  if (!absl::StartsWith(path, root)) return false;
  return path.size() == root.size() || path[root.size()] == '.' ||
         (path[root.size()] == '[' && root.back() != ']');
}

}  // namespace

void SourceMap::Graft(absl::string_view path, const SourceMap& from,
                      absl::string_view from_path) {
  if (&from == this) {  // the loops below would insert into the map they walk
    const SourceMap copy = from;
    Graft(path, copy, from_path);
    return;
  }
  Erase(path);
  for (auto it = from.pos_.lower_bound(from_path);
       it != from.pos_.end() && absl::StartsWith(it->first, from_path); ++it) {
    const auto& [p, pos] = *it;
    if (!Below(p, from_path)) continue;
    const std::string& name = from.SourceOf(pos);
    int index = -1;
    if (name != source_) {
      auto it = std::find(other_sources_.begin(), other_sources_.end(), name);
      index = static_cast<int>(it - other_sources_.begin());
      if (it == other_sources_.end()) other_sources_.push_back(name);
    }
    pos_[absl::StrCat(path, absl::string_view(p).substr(from_path.size()))] =
        Pos{pos.line, pos.col, index};
  }
}

void SourceMap::Erase(absl::string_view path) {
  // Every path below `path` starts with it, so they lie in the range from
  // lower_bound(path) while the prefix matches (with "a[10]" among "a[1]"'s,
  // which Below tells apart).
  for (auto it = pos_.lower_bound(path);
       it != pos_.end() && absl::StartsWith(it->first, path);) {
    it = Below(it->first, path) ? pos_.erase(it) : std::next(it);
  }
}

void SourceMap::Move(absl::string_view path, absl::string_view from_path) {
  if (path == from_path) return;
  std::vector<std::pair<std::string, Pos>> moved;
  for (auto it = pos_.lower_bound(from_path);
       it != pos_.end() && absl::StartsWith(it->first, from_path); ++it) {
    if (!Below(it->first, from_path)) continue;
    moved.emplace_back(absl::StrCat(path, absl::string_view(it->first).substr(from_path.size())),
                       it->second);
  }
  Erase(path);
  for (auto& [p, pos] : moved) pos_.insert_or_assign(std::move(p), pos);
}

const SourceMap::Pos* SourceMap::Find(absl::string_view path) const {
  while (!path.empty()) {
    auto it = pos_.find(path);
    if (it != pos_.end()) return &it->second;
    size_t dot = path.rfind('.');
    if (dot == absl::string_view::npos) break;
    path = path.substr(0, dot);
  }
  return nullptr;
}

int SourceMap::Line(absl::string_view path) const {
  const Pos* p = Find(path);
  return p == nullptr ? 0 : p->line;
}

std::string SourceMap::Where(absl::string_view path) const {
  const Pos* p = Find(path);
  if (p == nullptr) return absl::StrCat(source_, ":", path);
  return absl::StrCat(SourceOf(*p), ":", p->line, ":", p->col);
}

std::string SourceMap::WhereLine(absl::string_view path) const {
  const Pos* p = Find(path);
  if (p == nullptr) return absl::StrCat(source_, ":", path);
  return absl::StrCat(SourceOf(*p), ":", p->line);
}

}  // namespace pvemu::policy
