#include "policy/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "policy/loader.h"
#include "policy/rule_edit.h"
#include "policy/rules.h"
#include "policy/shipped.h"
#include "base/checksum.h"
#include "base/durable_file.h"
#include "base/status_macros.h"
#include "base/textproto.h"

namespace pvemu::policy {

using pvemu::v1::Layer;
using pvemu::v1::MsrRule;
using pvemu::v1::Policy;

namespace {

constexpr absl::string_view kStateFile = "policy.textproto";
constexpr absl::string_view kHeaderPrefix = "# pvemu state: ";

// The state file for a policy whose text format is `policy_text`.
std::string StateText(absl::string_view policy_text, uint64_t generation) {
  std::string body = absl::StrCat(
      "# Written by pvemud; edit with `pvemuctl policy ...`, not by hand.\n",
      policy_text);
  return absl::StrFormat("%sgeneration=%d length=%d fnv1a=%016x\n%s", kHeaderPrefix,
                         generation, body.size(), base::Fnv1a64(body), body);
}

struct StateFile {
  Policy policy;
  uint64_t generation = 0;
  std::string text;
};

// Reads and checks one state file. Errors say why it is unusable.
absl::StatusOr<StateFile> ReadStateFile(const std::string& path) {
  StateFile out;
  RETURN_IF_ERROR(ReadFileToString(path, &out.text));
  absl::string_view text = out.text;
  size_t nl = text.find('\n');
  if (!absl::StartsWith(text, kHeaderPrefix) || nl == absl::string_view::npos) {
    return absl::DataLossError(absl::StrCat(
        path, ": not a pvemu state file (no '", kHeaderPrefix, "' header line)"));
  }
  absl::string_view header = text.substr(kHeaderPrefix.size(), nl - kHeaderPrefix.size());
  absl::string_view body = text.substr(nl + 1);
  uint64_t length = 0, hash = 0;
  bool have_length = false, have_hash = false, have_gen = false;
  for (absl::string_view kv : absl::StrSplit(header, ' ', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv, '=');
    if (p.first == "generation") have_gen = absl::SimpleAtoi(p.second, &out.generation);
    if (p.first == "length") have_length = absl::SimpleAtoi(p.second, &length);
    if (p.first == "fnv1a") have_hash = absl::SimpleHexAtoi(p.second, &hash);
  }
  if (!have_gen || !have_length || !have_hash || out.generation == 0) {
    return absl::DataLossError(absl::StrCat(path, ": bad state header line"));
  }
  if (body.size() != length) {
    return absl::DataLossError(absl::StrFormat(
        "%s: truncated or extended: body is %d bytes, header says %d", path, body.size(),
        length));
  }
  if (base::Fnv1a64(body) != hash) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (corrupt)"));
  }
  RETURN_IF_ERROR(ParseTextProto(out.text, path, &out.policy));
  return out;
}

// An edit that could not be made durable: the serving policy and the state
// file are both unchanged.
absl::Status NotSaved(const absl::Status& why) {
  return absl::Status(why.code(), absl::StrCat("cannot save the policy: ", why.message(),
                                               "; the previous policy stays in force and on disk"));
}

Layer* FindLayer(Policy* policy, LayerRef ref, bool create) {
  if (ref.is_default) return policy->mutable_default_();
  for (Layer& l : *policy->mutable_domain()) {
    if (l.domain() == ref.domain) return &l;
  }
  if (!create) return nullptr;
  Layer* l = policy->add_domain();
  l->set_domain(ref.domain);
  return l;
}

absl::StatusOr<Policy> WithLayerReplaced(const Policy& base, LayerRef ref, const Policy& layer_policy) {
  Policy out = base;
  if (ref.is_default) {
    if (layer_policy.domain_size() != 0) {
      return absl::InvalidArgumentError(
          "a default-layer edit must hold only a `default { }` layer");
    }
    *out.mutable_default_() = layer_policy.default_();
    return out;
  }
  if (layer_policy.domain_size() != 1 || layer_policy.has_default_()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a domain-layer edit must hold exactly one `domain { domain: %d ... }` layer",
        ref.domain));
  }
  Layer layer = layer_policy.domain(0);
  if (layer.domain() != ref.domain) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the layer names domain %d but the edit is for domain %d", layer.domain(), ref.domain));
  }
  *FindLayer(&out, ref, /*create=*/true) = layer;
  return out;
}

}  // namespace

std::string LayerRef::ToString() const {
  return is_default ? "default" : absl::StrCat("domain ", domain);
}

// Runs one job at a time on a thread kept across edits: starting a thread
// per edit cost tens of microseconds of every edit (clone, stack, exit).
// Edits hold Store::mu_, so at most one job is ever pending.
class Store::DurableWriter {
 public:
  // The writer, or null when no thread can be had (EAGAIN): the caller then
  // writes in line.
  static std::unique_ptr<DurableWriter> Start() {
    auto writer = std::unique_ptr<DurableWriter>(new DurableWriter);
    try {
      writer->thread_ = std::thread([w = writer.get()] { w->Loop(); });
    } catch (const std::system_error&) {
      return nullptr;
    }
    return writer;
  }
  ~DurableWriter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  // Runs `job` on the writer thread; Wait() returns once it has run.
  void Run(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = std::move(job);
      done_ = false;
    }
    wake_.notify_one();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    finished_.wait(lock, [this] { return done_; });
  }

 private:
  DurableWriter() = default;
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || job_ != nullptr; });
      if (job_ == nullptr) return;  // stopping, nothing pending
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();
      lock.lock();
      done_ = true;
      finished_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;      // a job, or stopping
  std::condition_variable finished_;  // done_
  std::function<void()> job_;
  bool done_ = true;
  bool stopping_ = false;
  std::thread thread_;
};

Store::Store(std::string state_dir, pvemu::v1::Vendor host_vendor)
    : state_dir_(std::move(state_dir)), host_vendor_(host_vendor) {}

Store::~Store() = default;

absl::StatusOr<std::unique_ptr<Store>> Store::FromPolicy(const Policy& policy,
                                                         const SourceMap& source,
                                                         pvemu::v1::Vendor host_vendor) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Snapshot> snap,
                   CompilePolicy(policy, source, host_vendor, 1));
  std::unique_ptr<Store> store(new Store("", host_vendor));
  {
    absl::MutexLock lock(&store->mu_);
    store->policy_ = policy;
    store->policy_text_.reset();
  }
  store->Publish(std::move(snap));
  return store;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& state_dir,
                                                   const std::string& initial_policy_path,
                                                   pvemu::v1::Vendor host_vendor,
                                                   std::vector<std::string>* warnings) {
  auto warn = [&](std::string w) {
    if (warnings != nullptr) warnings->push_back(std::move(w));
  };
  std::unique_ptr<Store> store(new Store(state_dir, host_vendor));
  if (!state_dir.empty()) {
    // Best effort: a failure shows up, with the path, at the first edit.
    ::mkdir(state_dir.c_str(), 0750);
    std::string path = absl::StrCat(state_dir, "/", kStateFile);
    for (const std::string& candidate : {path, path + ".prev"}) {
      absl::StatusOr<StateFile> state = ReadStateFile(candidate);
      if (absl::IsNotFound(state.status())) continue;
      absl::StatusOr<std::shared_ptr<const Snapshot>> snap;
      if (state.ok()) {
        google::protobuf::TextFormat::ParseInfoTree tree;
        Policy parsed;
        absl::Status s = ParseTextProto(state->text, candidate, &parsed, &tree);
        snap = s.ok() ? CompilePolicy(parsed, SourceMap::FromParseInfo(candidate, parsed, tree),
                                      host_vendor, state->generation)
                      : absl::StatusOr<std::shared_ptr<const Snapshot>>(s);
      }
      absl::Status bad = state.ok() ? snap.status() : state.status();
      if (bad.ok()) {
        if (candidate != path) {
          warn(absl::StrCat("using the previous good state ", candidate, " (generation ",
                            state->generation, ")"));
        }
        {
          absl::MutexLock lock(&store->mu_);
          store->policy_ = state->policy;
          store->policy_text_.reset();
        }
        store->Publish(*std::move(snap));
        return store;
      }
      // Keep the bad file for inspection, out of the way of the next save
      // (which would otherwise rotate it over the good .prev).
      std::string aside = candidate + ".corrupt";
      bool moved = ::rename(candidate.c_str(), aside.c_str()) == 0;
      warn(absl::StrCat("ignoring state file ", candidate, ": ", bad.message(),
                        moved ? absl::StrCat(" (moved to ", aside, ")") : std::string()));
    }
  }
  Policy policy;
  SourceMap source("<none>");
  if (!initial_policy_path.empty()) {
    ASSIGN_OR_RETURN(LoadedPolicy loaded, LoadPolicyByNameOrFile(initial_policy_path));
    policy = std::move(loaded.policy);
    source = std::move(loaded.source);
  } else {
    ASSIGN_OR_RETURN(LoadedPolicy loaded, ParsePolicy(ShippedPolicy("default"), "default.textproto"));
    policy = std::move(loaded.policy);
    source = std::move(loaded.source);
  }
  if (!state_dir.empty() && warnings != nullptr && !warnings->empty()) {
    warn(absl::StrCat("falling back to ",
                      initial_policy_path.empty() ? "the shipped default policy"
                                                  : initial_policy_path));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const Snapshot> snap,
                   CompilePolicy(policy, source, host_vendor, 1));
  {
    absl::MutexLock lock(&store->mu_);
    store->policy_ = std::move(policy);
    store->policy_text_.reset();
  }
  store->Publish(std::move(snap));
  return store;
}

void Store::Publish(std::shared_ptr<const Snapshot> snapshot) {
  uint64_t g = snapshot->generation();
  {
    absl::MutexLock lock(&snap_mu_);
    current_ = std::move(snapshot);
  }
  generation_.value.store(g, std::memory_order_release);
}

std::shared_ptr<const Snapshot> Store::Current() const {
  absl::MutexLock lock(&snap_mu_);
  return current_;
}

Policy Store::policy() const {
  absl::MutexLock lock(&mu_);
  return policy_;
}

std::string Store::state_path() const {
  return state_dir_.empty() ? std::string() : absl::StrCat(state_dir_, "/", kStateFile);
}

void Store::SetEditListener(EditListener listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

absl::Status Store::CheckGeneration(const EditOptions& options) const {
  uint64_t g = generation();
  if (options.if_generation != 0 && options.if_generation != g) {
    return absl::AbortedError(absl::StrFormat(
        "the policy is at generation %d, not %d; re-read it and retry", g,
        options.if_generation));
  }
  return absl::OkStatus();
}

absl::StatusOr<EditResult> Store::Commit(Policy candidate, const SourceMap& source,
                                         const EditOptions& options, const char* method,
                                         std::string layer, uint64_t next,
                                         UnstampedSnapshot* compiled) {
  if (compiled != nullptr && (compiled->empty() || !state_dir_.empty())) compiled = nullptr;
  // A compile the caller brings was validated by it.
  if (compiled == nullptr) RETURN_IF_ERROR(ValidatePolicy(candidate, source));
  if (next == 0) next = generation() + 1;
  std::string candidate_text = ToTextProto(candidate);
  const std::string text = state_dir_.empty() ? std::string() : StateText(candidate_text, next);

  // The candidate replaces the state file durably (two fsyncs: most of an
  // edit's latency) while this thread compiles it and renders the diff; the
  // old file and its .prev stay aside until the compile's verdict, so a
  // failure anywhere leaves them exactly as they were.
  const std::string staged = state_dir_.empty() ? std::string() : state_path() + ".tmp";
  absl::StatusOr<base::DurableReplacement> replaced = absl::UnknownError("not written");
  const auto write = [this, &staged, &text, &replaced] {
    absl::Status synced = base::WriteAndSync(staged, text, 0640);
    replaced = synced.ok() ? base::DurableReplacement::Start(staged, state_path(),
                                                             /*keep_previous=*/true)
                           : absl::StatusOr<base::DurableReplacement>(synced);
  };
  bool write_async = false;
  if (!state_dir_.empty()) {
    if (writer_ == nullptr) writer_ = DurableWriter::Start();
    if (writer_ != nullptr) {
      writer_->Run(write);
      write_async = true;
    }
  }
  // Positions for explain come from the text as stored (the state file), or
  // from the caller's source for an in-memory store.
  absl::StatusOr<std::shared_ptr<const Snapshot>> snap;
  {
    SourceMap stored = source;
    absl::Status reparsed_ok;
    if (!state_dir_.empty()) {
      const std::string path = state_path();
      // The text is the printer's own output, so its positions can be read
      // off the lines; a full re-parse (several times slower) is the
      // fallback should the printer ever write something else.
      if (std::optional<SourceMap> printed =
              SourceMap::FromPrinterOutput(path, *Policy::descriptor(), text)) {
        stored = *std::move(printed);
      } else {
        google::protobuf::TextFormat::ParseInfoTree tree;
        Policy reparsed;
        reparsed_ok = ParseTextProto(text, path, &reparsed, &tree);
        if (reparsed_ok.ok()) stored = SourceMap::FromParseInfo(path, reparsed, tree);
      }
    }
    if (compiled != nullptr) {
      snap = std::move(*compiled).Stamp(next);
    } else {
      snap = reparsed_ok.ok() ? CompilePolicy(candidate, stored, host_vendor_, next)
                              : absl::StatusOr<std::shared_ptr<const Snapshot>>(reparsed_ok);
    }
    if (fail_next_compile_.exchange(false)) snap = absl::InternalError("compile failure injected by a test");
  }
  if (!policy_text_.has_value()) policy_text_ = ToTextProto(policy_);
  EditResult result;
  result.generation = next;
  result.diff = DiffText(*policy_text_, candidate_text);
  if (write_async) {
    writer_->Wait();
  } else if (!state_dir_.empty()) {
    write();  // no thread to be had (EAGAIN): in line
  }
  if (!state_dir_.empty() && !replaced.ok()) return NotSaved(replaced.status());
  if (!snap.ok()) {
    // Validation passed, so this is not the policy's fault. The candidate
    // goes, and the state file and its .prev come back as they were.
    absl::Status undone = state_dir_.empty() ? absl::OkStatus() : replaced->Undo();
    return absl::InternalError(absl::StrCat(
        "the edit validated but did not compile (", snap.status().message(),
        "); nothing changed, on disk or in force",
        undone.ok() ? std::string()
                    : absl::StrCat(" (but syncing the restored state file failed: ",
                                   undone.message(), ")")));
  }
  if (candidate_check_) {
    absl::Status checked = candidate_check_(**snap);
    if (!checked.ok()) {
      if (!state_dir_.empty()) replaced->Undo().IgnoreError();  // the refusal says it all
      return checked;
    }
  }
  // The old state file stays as .prev, the fallback should this one ever be
  // unreadable.
  if (!state_dir_.empty()) replaced->Finish();
  policy_ = std::move(candidate);
  policy_text_ = std::move(candidate_text);
  Publish(*std::move(snap));
  if (listener_) {
    listener_(EditEvent{options.who, method, std::move(layer), next, result.diff});
  }
  return result;
}

void Store::SetCandidateCheck(CandidateCheck check) {
  absl::MutexLock lock(&mu_);
  candidate_check_ = std::move(check);
}

absl::StatusOr<EditResult> Store::ApplyPolicy(const Policy& policy, const SourceMap& source,
                                              const EditOptions& options) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckGeneration(options));
  return Commit(policy, source, options, "ApplyPolicy", "all");
}

absl::StatusOr<EditResult> Store::ApplyPolicyAtGeneration(const Policy& policy,
                                                          const SourceMap& source,
                                                          uint64_t generation,
                                                          const EditOptions& options,
                                                          UnstampedSnapshot* compiled) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckGeneration(options));
  if (generation <= this->generation()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot publish generation %d: the policy is already at generation %d, and "
        "generations only move forward",
        generation, this->generation()));
  }
  return Commit(policy, source, options, "FleetApply", "all", generation, compiled);
}

absl::StatusOr<EditResult> Store::ApplyLayer(LayerRef layer, const Policy& layer_policy,
                                             const SourceMap& source,
                                             const EditOptions& options) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckGeneration(options));
  // Errors inside the layer point into the caller's text.
  RETURN_IF_ERROR(ValidatePolicy(layer_policy, source));
  ASSIGN_OR_RETURN(Policy candidate, WithLayerReplaced(policy_, layer, layer_policy));
  return Commit(std::move(candidate), SourceMap(source.source()), options, "ApplyLayer",
                layer.ToString());
}

absl::StatusOr<EditResult> Store::SetMode(LayerRef layer, pvemu::v1::PolicyMode mode,
                                          const EditOptions& options) {
  if (!pvemu::v1::PolicyMode_IsValid(mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mode ", static_cast<int>(mode), " is not a PolicyMode; use ENFORCE or LEARN"));
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckGeneration(options));
  Policy candidate = policy_;
  FindLayer(&candidate, layer, /*create=*/true)->set_mode(mode);
  return Commit(std::move(candidate), SourceMap("SetMode"), options, "SetMode", layer.ToString());
}

absl::StatusOr<EditResult> Store::EditRule(LayerRef layer, const MsrRule& rule,
                                           const EditOptions& options, RuleEditKind kind) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckGeneration(options));
  Policy candidate = policy_;
  Layer* l = FindLayer(&candidate, layer, /*create=*/kind == RuleEditKind::kSet);
  RETURN_IF_ERROR(
      EditRuleInLayer(l, rule, kind, absl::StrCat("the ", layer.ToString(), " layer")));
  const char* method = kind == RuleEditKind::kSet ? "SetRule" : "DeleteRule";
  return Commit(std::move(candidate), SourceMap(method), options, method, layer.ToString());
}

absl::StatusOr<EditResult> Store::SetRule(LayerRef layer, const MsrRule& rule,
                                          const EditOptions& options) {
  return EditRule(layer, rule, options, RuleEditKind::kSet);
}

absl::StatusOr<EditResult> Store::DeleteRule(LayerRef layer, const MsrRule& rule,
                                             const EditOptions& options) {
  return EditRule(layer, rule, options, RuleEditKind::kDelete);
}

absl::StatusOr<std::string> Store::Diff(const Policy& policy, const SourceMap& source) const {
  RETURN_IF_ERROR(ValidatePolicy(policy, source));
  absl::MutexLock lock(&mu_);
  return DiffText(ToTextProto(policy_), ToTextProto(policy));
}

absl::StatusOr<std::string> Store::DiffLayer(LayerRef layer, const Policy& layer_policy,
                                             const SourceMap& source) const {
  RETURN_IF_ERROR(ValidatePolicy(layer_policy, source));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Policy candidate, WithLayerReplaced(policy_, layer, layer_policy));
  RETURN_IF_ERROR(ValidatePolicy(candidate, SourceMap(source.source())));
  return DiffText(ToTextProto(policy_), ToTextProto(candidate));
}

Explanation Store::Explain(uint32_t domain, uint32_t msr,
                           std::optional<uint64_t> write_value) const {
  std::shared_ptr<const Snapshot> snap = Current();
  return ExplainMsr(*snap, domain, msr, write_value);
}

SnapshotReader::SnapshotReader(const Store& store) : store_(store) { Refresh(); }

void SnapshotReader::Refresh() {
  absl::MutexLock lock(&store_.snap_mu_);
  cached_ = store_.current_;
  cached_generation_ = cached_->generation();
}

std::string DiffText(const std::string& before, const std::string& after) {
  if (before == after) return "";
  std::vector<absl::string_view> a = absl::StrSplit(before, '\n');
  std::vector<absl::string_view> b = absl::StrSplit(after, '\n');
  size_t pre = 0;
  while (pre < a.size() && pre < b.size() && a[pre] == b[pre]) ++pre;
  size_t suf = 0;
  while (suf < a.size() - pre && suf < b.size() - pre &&
         a[a.size() - 1 - suf] == b[b.size() - 1 - suf]) {
    ++suf;
  }
  size_t n = a.size() - pre - suf, m = b.size() - pre - suf;
  std::string out = absl::StrFormat("@@ -%d,%d +%d,%d @@\n", pre + 1, n, pre + 1, m);
  // LCS over the changed middle when small; otherwise all-minus/all-plus.
  if (n * m <= 4'000'000) {
    std::vector<std::vector<uint32_t>> lcs(n + 1, std::vector<uint32_t>(m + 1, 0));
    for (size_t i = n; i-- > 0;) {
      for (size_t j = m; j-- > 0;) {
        lcs[i][j] = a[pre + i] == b[pre + j] ? lcs[i + 1][j + 1] + 1
                                             : std::max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[pre + i] == b[pre + j]) {
        absl::StrAppend(&out, " ", a[pre + i], "\n");
        ++i, ++j;
      } else if (j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) {
        absl::StrAppend(&out, "+", b[pre + j++], "\n");
      } else {
        absl::StrAppend(&out, "-", a[pre + i++], "\n");
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) absl::StrAppend(&out, "-", a[pre + i], "\n");
    for (size_t j = 0; j < m; ++j) absl::StrAppend(&out, "+", b[pre + j], "\n");
  }
  return out;
}

}  // namespace pvemu::policy
