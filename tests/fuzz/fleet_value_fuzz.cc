// Fuzzes fleet mode as a host applies one etcd revision (fleet/applier.h):
// etcdctl bypasses every check, so a layer set from etcd is any bytes. A real
// Applier over an in-memory Store serving a known-good revision must refuse a
// set that does not compose and compile whole, naming one of its keys, and
// change nothing; a set it accepts must be exactly Compose's policy, compile
// for both vendors and not depend on the order of the host's classes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fleet/applier.h"
#include "fleet/compose.h"
#include "fleet/keys.h"
#include "google/protobuf/util/message_differencer.h"
#include "policy/compile.h"
#include "policy/loader.h"
#include "policy/rule_target.h"
#include "policy/shipped.h"
#include "policy/store.h"
#include "tests/fuzz/fuzz_tally.h"

namespace {

namespace v1 = ::pvemu::v1;
using ::google::protobuf::util::MessageDifferencer;
using ::pvemu::fleet::Applier;
using ::pvemu::fleet::Compose;
using ::pvemu::fleet::FleetKeys;
using ::pvemu::fleet::HostView;
using ::pvemu::fleet::LevelName;
using ::pvemu::fleet::LevelSet;
using ::pvemu::fleet::ParseLevelName;
using ::pvemu::fleet::ParseLevelValue;
using ::pvemu::policy::CompilePolicy;
using ::pvemu::policy::DomainSnapshot;
using ::pvemu::policy::LoadedPolicy;
using ::pvemu::policy::MsrEntry;
using ::pvemu::policy::Snapshot;
using ::pvemu::policy::Store;

constexpr char kPrefix[] = "/pvemu";
constexpr char kHostId[] = "h1";
const char* const kClasses[] = {"web", "gpu", "db"};
constexpr size_t kMaxInput = 128 * 1024;
constexpr int kMaxRecords = 16;
constexpr int64_t kGoodRevision = 2;
constexpr int64_t kRevision = 3;

void Check(bool ok, const char* what, const std::string& detail = "") {
  if (ok) return;
  std::fprintf(stderr, "fleet_value_fuzz: %s%s%s\n", what, detail.empty() ? "" : ": ",
               detail.c_str());
  std::abort();
}

// The host's base policy, as pvemud loads it without --policy.
const LoadedPolicy& Base() {
  static const LoadedPolicy* base = [] {
    absl::StatusOr<LoadedPolicy> p = pvemu::policy::ParsePolicy(
        pvemu::policy::ShippedPolicy("default"), "default.textproto");
    Check(p.ok(), "the shipped default policy does not load", std::string(p.status().message()));
    return new LoadedPolicy(*std::move(p));
  }();
  return *base;
}

// The revision the host serves before the fuzzed one: every level kind, valid
// for both vendors and any of the host's classes.
LevelSet GoodSet() {
  const std::string p = absl::StrCat(kPrefix, "/policy/");
  return {
      {p + "default", "default {\n  msr { msr: \"0x1b0\" read: CONST value: 1 }\n}\n"},
      {p + "class/web", "default {\n  unknown_msr: UNKNOWN_RELAXED\n}\n"},
      {p + "class/gpu", "default {\n  io_port { first: 0x80 last: 0x80 }\n}\n"},
      {p + "host/h1", "default {\n  msr { msr: \"0x1b0\" write: IGNORE }\n}\n"},
      {p + "host/h1/domain/7", "domain {\n  domain: 7\n  vpmu: true\n}\n"},
  };
}

LevelSet OnlyThisHost(const FleetKeys& keys, const LevelSet& set) {
  LevelSet out;
  for (const auto& [key, value] : set) {
    if (keys.Classify(key).has_value()) out.emplace(key, value);
  }
  return out;
}

// Reads fields from the input; false once it runs out.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool Byte(uint8_t* b) {
    if (pos_ >= size_) return false;
    *b = data_[pos_++];
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    if (size_ - pos_ < n) return false;
    out->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }
  std::string Value(size_t max) {
    const size_t n = std::min(max, size_ - pos_);
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The input (integers little-endian):
//   byte 0   bit 0: host vendor (0 INTEL, 1 AMD); bits 1-2: how many of the
//            classes web, gpu, db the host has (0-3)
//   then up to 16 records until the input ends:
//     byte K           K % 8 picks the key (P = /pvemu/policy/, S = suffix):
//                      0 P+default  1 P+class/web  2 P+class/gpu  3 P+class/S
//                      4 P+host/h1  5 P+host/h1/domain/S  6 P+S  7 S (raw)
//     byte n, n bytes  S, for K % 8 in {3, 5, 6, 7}
//     2 bytes L        then min(L, rest) bytes: the value
// A key given twice keeps its last value (etcd holds one value per key).
LevelSet ReadPairs(Reader& in) {
  const std::string p = absl::StrCat(kPrefix, "/policy/");
  LevelSet out;
  for (int i = 0; i < kMaxRecords; ++i) {
    uint8_t kind = 0;
    if (!in.Byte(&kind)) break;
    kind %= 8;
    std::string suffix;
    if (kind == 3 || kind >= 5) {
      uint8_t n = 0;
      if (!in.Byte(&n) || !in.Bytes(n, &suffix)) break;
    }
    uint8_t lo = 0, hi = 0;
    if (!in.Byte(&lo) || !in.Byte(&hi)) break;
    std::string value = in.Value(size_t{lo} | size_t{hi} << 8);
    std::string key;
    switch (kind) {
      case 0: key = p + "default"; break;
      case 1: key = p + "class/web"; break;
      case 2: key = p + "class/gpu"; break;
      case 3: key = p + "class/" + suffix; break;
      case 4: key = absl::StrCat(p, "host/", kHostId); break;
      case 5: key = absl::StrCat(p, "host/", kHostId, "/domain/", suffix); break;
      case 6: key = p + suffix; break;
      default: key = suffix; break;
    }
    out.insert_or_assign(std::move(key), std::move(value));
  }
  return out;
}

// The keys a host reads name their level exactly: a key Classify keeps but
// Compose would look up under another spelling would be kept in the host's
// view and never composed.
void CheckKeyLayout(const FleetKeys& keys, const LevelSet& pairs) {
  for (const auto& [key, value] : pairs) {
    std::optional<LevelName> level = keys.Classify(key);
    if (!level.has_value()) continue;
    Check(keys.Level(*level) == key, "a key the host reads is not its level's own key", key);
    std::optional<LevelName> any = keys.LayerOfKey(key);
    Check(any.has_value() && *any == *level, "Classify and LayerOfKey disagree", key);
    absl::StatusOr<LevelName> named = ParseLevelName(level->ToString());
    Check(named.ok() && *named == *level, "a level's name does not parse back", level->ToString());
  }
}

// The first key whose value fails on its own, in the order Compose reads the
// levels (default, classes, host, domain keys), or "" if each is valid alone.
std::string FirstBadValue(const FleetKeys& keys, const LevelSet& layers) {
  std::vector<std::string> order = {keys.Default()};
  for (const std::string& c : keys.classes()) order.push_back(keys.Class(c));
  order.push_back(keys.Host(keys.host_id()));
  for (const auto& [key, value] : layers) {
    std::optional<LevelName> level = keys.Classify(key);
    if (level.has_value() && level->kind == LevelName::kHostDomain) order.push_back(key);
  }
  for (const std::string& key : order) {
    auto it = layers.find(key);
    if (it == layers.end()) continue;
    if (!ParseLevelValue(key, *keys.Classify(key), it->second).ok()) return key;
  }
  return "";
}

// Whether two of the host's classes give one CPUID leaf (and subleaf) of the
// same layer different entries. Compose makes that no tie (compose.h ties
// only rules and settings) and the later class in --host-class order wins,
// so the order check leaves CPUID out then. Drop this once such classes tie.
bool ClassesDisagreeOnCpuid(const FleetKeys& keys, const LevelSet& layers) {
  std::vector<v1::Policy> classes;
  for (const std::string& c : keys.classes()) {
    auto it = layers.find(keys.Class(c));
    if (it == layers.end()) continue;
    absl::StatusOr<LoadedPolicy> p =
        ParseLevelValue(it->first, LevelName{LevelName::kClass, c, 0}, it->second);
    if (p.ok()) classes.push_back(p->policy);
  }
  const auto clash = [](const v1::Layer& a, const v1::Layer& b) {
    for (const v1::CpuidEntry& x : a.cpuid()) {
      for (const v1::CpuidEntry& y : b.cpuid()) {
        if (x.leaf() == y.leaf() && x.has_subleaf() == y.has_subleaf() &&
            x.subleaf() == y.subleaf() && !MessageDifferencer::Equals(x, y)) {
          return true;
        }
      }
    }
    return false;
  };
  for (size_t i = 0; i < classes.size(); ++i) {
    for (size_t j = i + 1; j < classes.size(); ++j) {
      if (clash(classes[i].default_(), classes[j].default_())) return true;
      for (const v1::Layer& a : classes[i].domain()) {
        for (const v1::Layer& b : classes[j].domain()) {
          if (a.domain() == b.domain() && clash(a, b)) return true;
        }
      }
    }
  }
  return false;
}

// Where two compiled policies could differ: every rule's edges, CPUID key and
// port edge, in every domain either names.
struct Probes {
  std::vector<uint32_t> domains = {0, 1, 7, 0x7ff0};
  std::vector<uint32_t> msrs = {0, 0x10, 0x1b0, 0xc1, 0xc0010061, 0xffffffff};
  std::vector<std::pair<uint32_t, uint32_t>> cpuid;
  std::vector<uint32_t> ports = {0, 0x80, 0xffff};

  void Edges(std::vector<uint32_t>* v, uint32_t first, uint32_t last, uint32_t max) {
    v->push_back(first);
    v->push_back(last);
    if (first > 0) v->push_back(first - 1);
    if (last < max) v->push_back(last + 1);
  }
  void Add(const v1::Layer& layer) {
    for (const v1::MsrRule& r : layer.msr()) {
      absl::StatusOr<pvemu::policy::Target> t = pvemu::policy::ResolveTarget(r);
      if (t.ok() && msrs.size() < 4096) Edges(&msrs, t->first, t->last, 0xffffffff);
    }
    for (const v1::CpuidEntry& e : layer.cpuid()) {
      if (cpuid.size() < 1024) cpuid.push_back({e.leaf(), e.subleaf()});
      if (cpuid.size() < 1024) cpuid.push_back({e.leaf(), e.subleaf() + 1});
    }
    for (const v1::PortRange& p : layer.io_port()) {
      if (ports.size() < 1024) {
        Edges(&ports, std::min(p.first(), 0xffffu), std::min(p.last(), 0xffffu), 0xffff);
      }
    }
  }
  void Add(const v1::Policy& policy) {
    Add(policy.default_());
    for (const v1::Layer& d : policy.domain()) {
      if (domains.size() < 64) domains.push_back(d.domain());
      Add(d);
    }
  }
};

bool SameEntry(const MsrEntry& a, const MsrEntry& b) {
  return a.value == b.value && a.writable_mask == b.writable_mask && a.read == b.read &&
         a.write == b.write && a.has_value == b.has_value && a.drop_reserved == b.drop_reserved &&
         a.allow_host_write == b.allow_host_write && a.audit == b.audit &&
         a.unknown == b.unknown && a.relaxed == b.relaxed;
}

// Two compositions decide alike (where a decision came from may differ: two
// classes that agree on a rule keep the first one's copy).
void CheckSameDecisions(const v1::Policy& pa, const Snapshot& a, const v1::Policy& pb,
                        const Snapshot& b, bool with_cpuid) {
  Probes probes;
  probes.Add(pa);
  probes.Add(pb);
  for (uint32_t d : probes.domains) {
    const DomainSnapshot& x = a.ForDomain(d);
    const DomainSnapshot& y = b.ForDomain(d);
    const std::string where = absl::StrCat("domain ", d);
    Check(x.has_overlay() == y.has_overlay() && x.hardware_domain() == y.hardware_domain() &&
              x.guest_vendor() == y.guest_vendor() && x.vpmu() == y.vpmu() &&
              x.learning() == y.learning() && x.unknown_msr() == y.unknown_msr() &&
              x.tsc().mode == y.tsc().mode && x.tsc().offset == y.tsc().offset &&
              x.tsc().frequency_khz == y.tsc().frequency_khz &&
              SameEntry(x.fallback(), y.fallback()),
          "the order of the host's classes changes a setting", where);
    for (uint32_t msr : probes.msrs) {
      Check(SameEntry(x.Lookup(msr), y.Lookup(msr)) &&
                SameEntry(x.EnforcedLookup(msr), y.EnforcedLookup(msr)),
            "the order of the host's classes changes an MSR's decision",
            absl::StrCat(where, ", MSR 0x", absl::Hex(msr)));
    }
    for (uint32_t port : probes.ports) {
      Check(x.PortAllowed(port, 1) == y.PortAllowed(port, 1) &&
                x.EnforcedPortAllowed(port, 1) == y.EnforcedPortAllowed(port, 1),
            "the order of the host's classes changes a port's decision",
            absl::StrCat(where, ", port 0x", absl::Hex(port)));
    }
    if (!with_cpuid) continue;
    for (const auto& [leaf, subleaf] : probes.cpuid) {
      const pvemu::policy::CpuidDecision* cx = x.Cpuid(leaf, subleaf);
      const pvemu::policy::CpuidDecision* cy = y.Cpuid(leaf, subleaf);
      bool same = (cx == nullptr) == (cy == nullptr);
      if (same && cx != nullptr) {
        same = cx->source == cy->source && std::equal(cx->set, cx->set + 4, cy->set) &&
               std::equal(cx->clear, cx->clear + 4, cy->clear);
      }
      Check(same, "the order of the host's classes changes a CPUID leaf",
            absl::StrCat(where, ", leaf 0x", absl::Hex(leaf), " subleaf 0x", absl::Hex(subleaf)));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > kMaxInput) return 0;
  Reader in(data, size);
  uint8_t options = 0;
  in.Byte(&options);
  const v1::Vendor vendor = (options & 1) != 0 ? v1::AMD : v1::INTEL;
  std::vector<std::string> classes(kClasses, kClasses + ((options >> 1) & 3));
  const LevelSet pairs = ReadPairs(in);

  const FleetKeys keys(kPrefix, kHostId, classes);
  CheckKeyLayout(keys, pairs);

  // The host, serving its known-good revision.
  absl::StatusOr<std::unique_ptr<Store>> made =
      Store::FromPolicy(Base().policy, Base().source, vendor);
  Check(made.ok(), "the base policy does not compile", std::string(made.status().message()));
  Store& store = **made;
  Applier applier(store, Base(), keys, /*state_dir=*/"", "etcd://fuzz:2379/pvemu");
  absl::Status good = applier.Apply(kGoodRevision, GoodSet());
  Check(good.ok(), "the known-good revision is refused", std::string(good.message()));
  const LevelSet good_layers = OnlyThisHost(keys, GoodSet());
  const v1::Policy good_policy = store.policy();
  const std::shared_ptr<const Snapshot> good_snapshot = store.Current();

  // The fuzzed revision, and what the pure functions say of it.
  const absl::Status applied = applier.Apply(kRevision, pairs);
  const HostView view = applier.View();
  const LevelSet layers = OnlyThisHost(keys, pairs);
  absl::StatusOr<LoadedPolicy> composed = Compose(Base(), keys, layers, vendor);
  std::shared_ptr<const Snapshot> host_snapshot;
  if (composed.ok()) {
    absl::StatusOr<std::shared_ptr<const Snapshot>> compiled =
        CompilePolicy(composed->policy, composed->source, vendor, kRevision);
    Check(compiled.ok(), "a composed policy does not compile for the host",
          std::string(compiled.status().message()));
    host_snapshot = *std::move(compiled);
  }
  Check(applied.ok() == composed.ok(), "the applier and Compose disagree",
        std::string(applied.ok() ? composed.status().message() : applied.message()));
  if (pvemu::fuzz::TheTally().on()) {
    // How many layers of the set were this host's, and the verdict: applied,
    // or refused, and at which step.
    std::string verdict = "applied";
    if (!applied.ok()) {
      verdict = absl::StrCat("refused ", absl::StatusCodeToString(applied.code()),
                             composed.ok() ? " after composing" : " composing");
    }
    pvemu::fuzz::TheTally().Add(absl::StrCat(layers.size(), " layer(s) for this host -> ", verdict));
  }

  std::vector<std::string> reversed(classes.rbegin(), classes.rend());
  const FleetKeys keys_reversed(kPrefix, kHostId, reversed);
  absl::StatusOr<LoadedPolicy> recomposed = Compose(Base(), keys_reversed, layers, vendor);
  Check(recomposed.ok() == composed.ok(),
        "the order of the host's classes decides whether the set composes",
        std::string(composed.ok() ? recomposed.status().message() : composed.status().message()));

  if (!applied.ok()) {
    // Refused whole: nothing of it in force, in the store or in the view.
    Check(!applied.message().empty(), "a refusal without a message");
    Check(store.generation() == static_cast<uint64_t>(kGoodRevision) &&
              store.Current() == good_snapshot &&
              MessageDifferencer::Equals(store.policy(), good_policy),
          "a refused revision changed the policy in force");
    Check(view.applied_revision == kGoodRevision && view.seen_revision == kRevision &&
              view.layers == good_layers,
          "a refused revision changed the host's view");
    Check(view.last_error.has_value() && view.last_error->revision() == kRevision,
          "a refused revision is not the host's last error");
    // Named: the key at fault is one the host reads, and the message says it.
    bool any = false;
    for (const auto& [key, value] : layers) any = any || absl::StrContains(applied.message(), key);
    Check(any, "a refusal names none of the keys", std::string(applied.message()));
    const std::string& named = view.last_error->key();
    Check(layers.count(named) > 0 && absl::StrContains(applied.message(), named),
          "last_error names no key of the set (fleet status shows no key)",
          std::string(applied.message()));
    // A value that is bad on its own is the one named (the first such, in the
    // order Compose reads them).
    const std::string bad = FirstBadValue(keys, layers);
    Check(bad.empty() || named == bad, "the refusal names another key than the bad value",
          absl::StrCat(bad, " vs ", named, ": ", applied.message()));
    return 0;
  }

  // Accepted whole: exactly Compose's policy, at this revision.
  Check(store.generation() == static_cast<uint64_t>(kRevision) &&
            view.applied_revision == kRevision && view.seen_revision == kRevision &&
            !view.last_error.has_value() && view.layers == layers,
        "an accepted revision is not the host's applied one");
  Check(MessageDifferencer::Equals(store.policy(), composed->policy),
        "the applier serves another policy than Compose's");
  absl::Status valid = pvemu::policy::ValidatePolicy(composed->policy, composed->source);
  Check(valid.ok(), "an accepted composition does not validate", std::string(valid.message()));
  // Compiled for the host's vendor above; the other vendor too.
  const v1::Vendor other_vendor = vendor == v1::INTEL ? v1::AMD : v1::INTEL;
  absl::StatusOr<std::shared_ptr<const Snapshot>> for_other =
      CompilePolicy(composed->policy, composed->source, other_vendor, kRevision);
  Check(for_other.ok(), "an accepted composition does not compile for the other vendor",
        absl::StrCat(v1::Vendor_Name(other_vendor), ": ", for_other.status().message()));
  // The classes are peers: another order decides the same.
  if (classes.size() > 1) {
    absl::StatusOr<std::shared_ptr<const Snapshot>> other =
        CompilePolicy(recomposed->policy, recomposed->source, vendor, kRevision);
    Check(other.ok(), "the classes in another order do not compile",
          std::string(other.status().message()));
    CheckSameDecisions(composed->policy, *host_snapshot, recomposed->policy, **other,
                       !ClassesDisagreeOnCpuid(keys, layers));
  }
  return 0;
}
