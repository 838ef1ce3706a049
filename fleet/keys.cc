#include "fleet/keys.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pvemu::fleet {

std::string FleetUrl::EndpointList() const { return absl::StrJoin(endpoints, ","); }

std::string FleetUrl::ToString() const {
  return absl::StrCat("etcd://", EndpointList(), prefix);
}

absl::Status CheckName(absl::string_view name, absl::string_view what) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " '", name, "' has the character '", std::string(1, c),
          "'; use letters, digits, '.', '_' and '-' (it becomes one segment of an etcd key)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FleetUrl> ParseFleetUrl(absl::string_view url) {
  const auto bad = [url](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fleet=", url, ": ", why,
        "; write etcd://HOST:PORT[,HOST:PORT...][/PREFIX], e.g. "
        "etcd://10.0.0.1:2379,10.0.0.2:2379/pvemu"));
  };
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "etcd://")) return bad("not an etcd:// URL");
  FleetUrl out;
  const size_t slash = rest.find('/');
  if (slash != absl::string_view::npos) {
    absl::string_view prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (prefix.size() > 1 && prefix.back() == '/') prefix.remove_suffix(1);
    if (prefix == "/") return bad("the prefix is empty");
    out.prefix = std::string(prefix);
  }
  if (rest.empty()) return bad("no endpoint");
  for (absl::string_view ep : absl::StrSplit(rest, ',')) {
    const size_t colon = ep.rfind(':');
    uint32_t port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(ep.substr(colon + 1), &port) || port == 0 || port > 65535) {
      return bad(absl::StrCat("endpoint '", ep, "' is not HOST:PORT"));
    }
    out.endpoints.emplace_back(ep);
  }
  return out;
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  // The last byte below 0xff goes up by one; bytes of 0xff after it go.
  while (!end.empty()) {
    unsigned char c = static_cast<unsigned char>(end.back());
    if (c < 0xff) {
      end.back() = static_cast<char>(c + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::string LevelName::ToString() const {
  switch (kind) {
    case kDefault:
      return "default";
    case kClass:
      return absl::StrCat("class:", name);
    case kHost:
      return absl::StrCat("host:", name);
    case kHostDomain:
      return absl::StrCat("host:", name, "/domain:", domain);
  }
  return "";
}

absl::StatusOr<LevelName> ParseLevelName(absl::string_view text) {
  const auto bad = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--layer=", text, ": ", why,
        "; use --layer=default, --layer=class:NAME, --layer=host:ID or "
        "--layer=host:ID/domain:N"));
  };
  LevelName out;
  if (text == "default") return out;
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "class:")) {
    out.kind = LevelName::kClass;
    if (absl::Status s = CheckName(rest, "the class name"); !s.ok()) return bad(s.message());
    out.name = std::string(rest);
    return out;
  }
  if (absl::ConsumePrefix(&rest, "host:")) {
    out.kind = LevelName::kHost;
    const size_t slash = rest.find('/');
    if (slash != absl::string_view::npos) {
      absl::string_view domain = rest.substr(slash + 1);
      rest = rest.substr(0, slash);
      if (!absl::ConsumePrefix(&domain, "domain:") || !absl::SimpleAtoi(domain, &out.domain)) {
        return bad("after host:ID comes only /domain:N, with N a domain id");
      }
      out.kind = LevelName::kHostDomain;
    }
    if (absl::Status s = CheckName(rest, "the host id"); !s.ok()) return bad(s.message());
    out.name = std::string(rest);
    return out;
  }
  return bad("not a layer name");
}

std::string FleetKeys::Class(absl::string_view name) const {
  return absl::StrCat(prefix_, "/policy/class/", name);
}
std::string FleetKeys::Host(absl::string_view id) const {
  return absl::StrCat(prefix_, "/policy/host/", id);
}
std::string FleetKeys::HostDomainPrefix(absl::string_view id) const {
  return absl::StrCat(prefix_, "/policy/host/", id, "/domain/");
}
std::string FleetKeys::Registration(absl::string_view id) const {
  return absl::StrCat(prefix_, "/hosts/", id);
}
std::string FleetKeys::Status(absl::string_view id) const {
  return absl::StrCat(prefix_, "/status/", id);
}

std::string FleetKeys::Level(const LevelName& layer) const {
  switch (layer.kind) {
    case LevelName::kDefault:
      return Default();
    case LevelName::kClass:
      return Class(layer.name);
    case LevelName::kHost:
      return Host(layer.name);
    case LevelName::kHostDomain:
      return absl::StrCat(HostDomainPrefix(layer.name), layer.domain);
  }
  return "";
}

std::vector<FleetKeys::Watched> FleetKeys::HostKeys() const {
  std::vector<Watched> out;
  out.push_back({Default(), ""});
  for (const std::string& c : classes_) out.push_back({Class(c), ""});
  out.push_back({Host(host_id_), ""});
  const std::string domains = HostDomainPrefix(host_id_);
  out.push_back({domains, PrefixEnd(domains)});
  return out;
}

std::optional<LevelName> FleetKeys::LayerOfKey(absl::string_view key) const {
  absl::string_view rest = key;
  if (!absl::ConsumePrefix(&rest, prefix_) || !absl::ConsumePrefix(&rest, "/policy/")) {
    return std::nullopt;
  }
  LevelName out;
  if (rest == "default") return out;
  if (absl::ConsumePrefix(&rest, "class/")) {
    if (!CheckName(rest, "class").ok()) return std::nullopt;
    out.kind = LevelName::kClass;
    out.name = std::string(rest);
    return out;
  }
  if (!absl::ConsumePrefix(&rest, "host/")) return std::nullopt;
  const size_t slash = rest.find('/');
  out.kind = LevelName::kHost;
  if (slash != absl::string_view::npos) {
    absl::string_view domain = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!absl::ConsumePrefix(&domain, "domain/") || !absl::SimpleAtoi(domain, &out.domain) ||
        absl::StrCat(out.domain) != domain) {
      return std::nullopt;
    }
    out.kind = LevelName::kHostDomain;
  }
  if (!CheckName(rest, "host").ok()) return std::nullopt;
  out.name = std::string(rest);
  return out;
}

std::optional<LevelName> FleetKeys::Classify(absl::string_view key) const {
  std::optional<LevelName> layer = LayerOfKey(key);
  if (!layer.has_value()) return std::nullopt;
  switch (layer->kind) {
    case LevelName::kDefault:
      return layer;
    case LevelName::kClass:
      if (std::find(classes_.begin(), classes_.end(), layer->name) == classes_.end()) {
        return std::nullopt;
      }
      return layer;
    case LevelName::kHost:
    case LevelName::kHostDomain:
      if (layer->name != host_id_) return std::nullopt;
      return layer;
  }
  return std::nullopt;
}

}  // namespace pvemu::fleet
