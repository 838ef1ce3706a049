// pvemuctl msr search: find MSRs in the catalog by a fragment of any of their
// names or by index, with what the shipped default policy does with them.
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "client/commands.h"
#include "policy/explain.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "policy/store.h"
#include "policy/vendor_proto.h"
#include "x86/msr_catalog.h"
#include "x86/vendor.h"

namespace pvemu::client {
namespace {

// The domain the default policy is asked about: an ordinary guest (domain 0
// is the hardware domain, which some default rules single out).
constexpr uint32_t kGuestDomain = 1;

// The hosts whose default decisions the search shows, in output order.
constexpr x86::Vendor kHosts[] = {x86::Vendor::kIntel, x86::Vendor::kAmd};

// Vendors in the order of the kVendor* bits.
constexpr x86::Vendor kVendors[] = {x86::Vendor::kIntel, x86::Vendor::kAmd,
                                    x86::Vendor::kHygon, x86::Vendor::kCentaur,
                                    x86::Vendor::kZhaoxin};

struct Decision {
  std::string read;
  std::string write;  // for a write of 0
};

struct Match {
  uint32_t index;
  std::string name;  // canonical
  std::vector<std::string> aliases;
  std::vector<std::string> vendors;  // "intel", "amd", ...
  std::vector<Decision> decisions;   // one per kHosts entry
};

// The shipped default policy compiled for each of kHosts.
absl::StatusOr<std::vector<std::unique_ptr<policy::Store>>> DefaultStores() {
  ASSIGN_OR_RETURN(policy::LoadedPolicy loaded,
                   policy::ParsePolicy(policy::ShippedPolicy("default"), "default.textproto"));
  std::vector<std::unique_ptr<policy::Store>> stores;
  for (x86::Vendor host : kHosts) {
    ASSIGN_OR_RETURN(auto store, policy::Store::FromPolicy(loaded.policy, loaded.source,
                                                           policy::ToProto(host)));
    stores.push_back(std::move(store));
  }
  return stores;
}

// The indices whose names contain `text` (any case), or equal to it as a
// number (decimal or 0x hex), in ascending order.
std::set<uint32_t> MatchingIndices(absl::string_view text) {
  std::set<uint32_t> indices;
  const std::string fragment = absl::AsciiStrToLower(text);
  for (const x86::MsrInfo& m : x86::MsrCatalog()) {
    if (absl::StrContains(absl::AsciiStrToLower(m.name), fragment)) indices.insert(m.index);
  }
  absl::StatusOr<uint32_t> number = ParseNumber32(text, "TEXT");
  if (number.ok() && x86::FindMsr(*number) != nullptr) indices.insert(*number);
  return indices;
}

Match Describe(uint32_t index,
               const std::vector<std::unique_ptr<policy::Store>>& stores) {
  Match match;
  match.index = index;
  for (const x86::MsrInfo* row : x86::MsrRows(index)) {
    if (match.name.empty()) {
      match.name = std::string(row->name);
      for (x86::Vendor v : kVendors) {
        if ((row->vendors & x86::VendorBit(v)) != 0) {
          match.vendors.emplace_back(x86::VendorWord(v));
        }
      }
    } else {
      match.aliases.emplace_back(row->name);
    }
  }
  for (const auto& store : stores) {
    std::shared_ptr<const policy::Snapshot> snapshot = store->Current();
    match.decisions.push_back(
        {policy::ExplainMsr(*snapshot, kGuestDomain, index).action,
         policy::ExplainMsr(*snapshot, kGuestDomain, index, uint64_t{0}).action});
  }
  return match;
}

// One JSON Lines object, keys in the documented order.
void PrintJson(const Match& m) {
  JsonLine defaults;
  for (size_t i = 0; i < m.decisions.size(); ++i) {
    defaults.Obj(x86::VendorWord(kHosts[i]),
                 JsonLine().Str("read", m.decisions[i].read).Str("write", m.decisions[i].write));
  }
  JsonLine()
      .Hex("index", m.index)
      .Str("name", m.name)
      .StrList("aliases", m.aliases)
      .StrList("vendors", m.vendors)
      .Obj("default", defaults)
      .Print();
}

void PrintText(const Match& m, bool first) {
  std::vector<std::string> hosts;
  for (size_t i = 0; i < m.decisions.size(); ++i) {
    hosts.push_back(absl::StrFormat("%s host: read %s, write %s", x86::VendorWord(kHosts[i]),
                                    m.decisions[i].read, m.decisions[i].write));
  }
  std::printf("%s%s %s\n  aliases: %s\n  vendors: %s\n  default policy, domain %u: %s\n",
              first ? "" : "\n", HexString(m.index).c_str(), m.name.c_str(),
              m.aliases.empty() ? "-" : absl::StrJoin(m.aliases, ", ").c_str(),
              m.vendors.empty() ? "-" : absl::StrJoin(m.vendors, ", ").c_str(), kGuestDomain,
              absl::StrJoin(hosts, "; ").c_str());
}

absl::Status Search(absl::string_view text) {
  std::set<uint32_t> indices = MatchingIndices(text);
  if (indices.empty()) {
    // The nearest name costs an edit distance per catalog row: only for words
    // the length of a name.
    constexpr size_t kMaxSuggestLength = 64;
    return absl::InvalidArgumentError(absl::StrCat(
        "no MSR matches '", text.substr(0, kMaxSuggestLength),
        text.size() > kMaxSuggestLength ? "...'" : "'",
        ": no catalog name contains it and it is no catalog index",
        text.size() > kMaxSuggestLength
            ? ""
            : absl::StrCat("; nearest name: ", x86::NearestMsrName(text))));
  }
  ASSIGN_OR_RETURN(auto stores, DefaultStores());
  bool first = true;
  for (uint32_t index : indices) {
    Match m = Describe(index, stores);
    if (JsonOutput()) {
      PrintJson(m);
    } else {
      PrintText(m, first);
    }
    first = false;
  }
  return absl::OkStatus();
}

}  // namespace

int RunMsr(const Args& args) {
  if (args.empty() || args[0] != "search") {
    return UsageError("msr needs a subcommand: msr search TEXT");
  }
  if (args.size() != 2 || absl::StripAsciiWhitespace(args[1]).empty()) {
    return UsageError("msr search needs one TEXT: a fragment of an MSR name or an index");
  }
  absl::Status status = Search(absl::StripAsciiWhitespace(args[1]));
  return status.ok() ? kExitOk : Fail(status);
}

}  // namespace pvemu::client
