#include "fleet/state_file.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/checksum.h"
#include "base/durable_file.h"
#include "base/textproto.h"

namespace pvemu::fleet {
namespace {

constexpr absl::string_view kHeader = "# pvemu fleet state: ";

absl::StatusOr<v1::FleetState> ReadOne(const std::string& path) {
  std::string text;
  absl::Status read = ReadFileToString(path, &text);
  if (!read.ok()) return read;
  const size_t nl = text.find('\n');
  if (!absl::StartsWith(text, kHeader) || nl == std::string::npos) {
    return absl::DataLossError(absl::StrCat(path, ": not a pvemu fleet state file"));
  }
  uint64_t length = 0, hash = 0;
  bool have_length = false, have_hash = false;
  for (absl::string_view kv :
       absl::StrSplit(absl::string_view(text).substr(kHeader.size(), nl - kHeader.size()), ' ',
                      absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv, '=');
    if (p.first == "length") have_length = absl::SimpleAtoi(p.second, &length);
    if (p.first == "fnv1a") have_hash = absl::SimpleHexAtoi(p.second, &hash);
  }
  const absl::string_view body = absl::string_view(text).substr(nl + 1);
  if (!have_length || !have_hash || body.size() != length || base::Fnv1a64(body) != hash) {
    return absl::DataLossError(absl::StrCat(path, ": truncated or corrupt (length or checksum)"));
  }
  v1::FleetState state;
  absl::Status parsed = ParseTextProto(body, path, &state);
  if (!parsed.ok()) return parsed;
  return state;
}

}  // namespace

std::string FleetStatePath(const std::string& state_dir) { return state_dir + "/fleet.state"; }

std::optional<v1::FleetState> ReadFleetState(const std::string& state_dir,
                                             std::vector<std::string>* warnings) {
  const std::string path = FleetStatePath(state_dir);
  for (const std::string& candidate : {path, path + ".prev"}) {
    absl::StatusOr<v1::FleetState> state = ReadOne(candidate);
    if (state.ok()) {
      if (candidate != path && warnings != nullptr) {
        warnings->push_back(absl::StrCat("fleet: using the previous fleet state ", candidate,
                                         " (revision ", state->revision(), ")"));
      }
      return *state;
    }
    if (!absl::IsNotFound(state.status()) && warnings != nullptr) {
      warnings->push_back(absl::StrCat("fleet: ignoring ", state.status().message()));
    }
  }
  return std::nullopt;
}

absl::Status WriteFleetState(const std::string& state_dir, const v1::FleetState& state) {
  const std::string body = absl::StrCat(
      "# Written by pvemud in fleet mode: the last fleet revision this host applied.\n",
      ToTextProto(state));
  const std::string text =
      absl::StrFormat("%slength=%d fnv1a=%016x\n%s", kHeader, body.size(), base::Fnv1a64(body), body);
  return base::WriteFileDurably(FleetStatePath(state_dir), text, 0640, /*keep_previous=*/true);
}

}  // namespace pvemu::fleet
