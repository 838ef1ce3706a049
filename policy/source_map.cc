#include "policy/source_map.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace pvemu::policy {

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
  return absl::StrCat(source_, ":", p->line, ":", p->col);
}

std::string SourceMap::WhereLine(absl::string_view path) const {
  const Pos* p = Find(path);
  if (p == nullptr) return absl::StrCat(source_, ":", path);
  return absl::StrCat(source_, ":", p->line);
}

}  // namespace pvemu::policy
