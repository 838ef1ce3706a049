#include "server/kvm_attachments.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "dispatch/trap_counts.h"

namespace pvemu::server {

uint64_t KvmAttachments::Attach(uint32_t domain, uint32_t pid, uint32_t vcpus) {
  absl::MutexLock lock(&mu_);
  const uint64_t key = next_key_++;
  by_key_[key] = Attachment{domain, pid, vcpus, 0};
  return key;
}

void KvmAttachments::Detach(uint64_t key) {
  absl::MutexLock lock(&mu_);
  by_key_.erase(key);
}

absl::Status KvmAttachments::Report(uint32_t pid, const v1::KvmTrapBatch& batch) {
  absl::MutexLock lock(&mu_);
  const auto needs_room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return batch.cumulative() && !batch.last() && live_.size() >= kMaxLive &&
           !live_.contains({pid, batch.domain()});
  };
  if (needs_room()) {
    // Full: a data plane whose process is gone (it died before its last
    // batch) has its final counts here; they move to the ended VMs' sums.
    for (auto it = live_.begin(); it != live_.end();) {
      if (kill(static_cast<pid_t>(it->first.first), 0) != 0 && errno == ESRCH) {
        ended_.Add(it->second);
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (needs_room()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "pid ", pid, " reports domain ", batch.domain(), " while ", live_.size(),
        " KVM data planes already report to pvemud, its limit (data planes whose process "
        "ended are dropped first); the batch is not counted. Close the data planes this VMM "
        "no longer runs (pvemu_kvm_close), or spread the VMs over more than one pvemud"));
  }
  // The batch comes on its own stream: find the subscription of the same
  // process and domain to show what it applies.
  for (auto& [key, a] : by_key_) {
    if (a.pid == pid && a.domain == batch.domain()) {
      a.vcpus = batch.vcpus();
      a.generation = batch.generation();
    }
  }
  if (!batch.cumulative()) {
    // A data plane that sends what happened since its previous batch.
    counts_.traps += batch.traps();
    counts_.completed += batch.completed();
    counts_.exceptions += batch.exceptions();
    counts_.device_io += batch.device_io();
    return absl::OkStatus();
  }
  Reported r;
  r.counts = Counts{batch.traps(), batch.completed(), batch.exceptions(), batch.device_io()};
  const uint32_t domain = batch.domain();
  for (const v1::KvmKindCount& k : batch.kinds()) {
    const std::optional<int> insn = dispatch::InstructionFromLabel(k.instruction());
    const std::optional<emulator::OutcomeKind> outcome = dispatch::OutcomeFromLabel(k.outcome());
    if (!insn.has_value() || !outcome.has_value()) continue;  // a newer data plane's label
    if (r.kinds.size() >= kMaxSeries) break;
    r.kinds[{domain, *insn, *outcome}] += k.count();
  }
  for (const v1::KvmMsrCount& m : batch.msrs()) {
    const std::optional<dispatch::MsrAction> action = dispatch::MsrActionFromName(m.action());
    if (!action.has_value()) continue;
    r.AddMsr({domain, m.msr_other() ? 0 : m.msr(), m.msr_other(), m.write(), *action}, m.count());
  }
  for (const v1::LearnedAccess& l : batch.learned()) {
    const std::optional<int> insn = dispatch::InstructionFromLabel(l.instruction());
    if (!insn.has_value()) continue;
    if (r.learned.size() >= kMaxSeries) break;
    dispatch::LearnedAccess a;
    a.domain = l.domain();
    a.insn = static_cast<emulator::InsnKind>(*insn);
    a.index = l.index();
    a.write = l.access() == "write";
    a.width = static_cast<uint8_t>(l.width());
    a.count = l.count();
    a.rule = l.rule();
    a.enforcing = l.enforcing();
    a.given = l.given();
    a.rip = l.rip();
    r.learned[{a.domain, *insn, a.index, a.width}] = a;
  }
  const std::pair<uint32_t, uint32_t> key{pid, domain};
  if (batch.last()) {
    live_.erase(key);
    ended_.Add(r);
  } else {
    live_[key] = std::move(r);
  }
  return absl::OkStatus();
}

void KvmAttachments::Reported::AddMsr(
    const std::tuple<uint32_t, uint32_t, bool, bool, dispatch::MsrAction>& key, uint64_t n) {
  auto it = msrs.find(key);
  if (it != msrs.end()) {
    it->second += n;
  } else if (msrs.size() < kMaxSeries) {
    msrs.emplace(key, n);
  } else {
    const auto& [domain, msr, other, write, action] = key;
    msrs[{domain, 0, true, write, action}] += n;
  }
}

void KvmAttachments::Reported::Add(const Reported& other) {
  counts.traps += other.counts.traps;
  counts.completed += other.counts.completed;
  counts.exceptions += other.counts.exceptions;
  counts.device_io += other.counts.device_io;
  for (const auto& [k, n] : other.kinds) {
    if (kinds.size() < kMaxSeries || kinds.contains(k)) kinds[k] += n;
  }
  for (const auto& [k, n] : other.msrs) AddMsr(k, n);
  for (const auto& [k, a] : other.learned) {
    if (learned.size() >= kMaxSeries && !learned.contains(k)) continue;
    auto [it, inserted] = learned.emplace(k, a);
    if (!inserted) it->second.count += a.count;
  }
}

void KvmAttachments::AddCountsTo(dispatch::Dispatcher::Counts* out) const {
  Reported all;
  {
    absl::MutexLock lock(&mu_);
    all = ended_;
    for (const auto& [key, r] : live_) all.Add(r);
  }
  // Merge with the daemon's own counts by key, so that a series appears once.
  std::map<std::tuple<uint64_t, int, emulator::OutcomeKind>, uint64_t> kinds;
  for (const dispatch::KindCount& k : out->kinds) {
    kinds[{k.domain.has_value() ? *k.domain : uint64_t{1} << 32, k.insn, k.outcome}] += k.count;
  }
  for (const auto& [k, n] : all.kinds) {
    kinds[{std::get<0>(k), std::get<1>(k), std::get<2>(k)}] += n;
  }
  out->kinds.clear();
  for (const auto& [k, n] : kinds) {
    const auto& [domain, insn, outcome] = k;
    out->kinds.push_back(dispatch::KindCount{
        domain >> 32 ? std::nullopt : std::optional<uint32_t>(static_cast<uint32_t>(domain)),
        insn, outcome, n});
  }
  std::map<std::tuple<uint64_t, uint64_t, bool, dispatch::MsrAction>, uint64_t> msrs;
  constexpr uint64_t kOther = uint64_t{1} << 32;
  for (const dispatch::MsrCount& m : out->msrs) {
    msrs[{m.domain.has_value() ? *m.domain : kOther, m.msr.has_value() ? *m.msr : kOther,
          m.write, m.action}] += m.count;
  }
  for (const auto& [k, n] : all.msrs) {
    const auto& [domain, msr, other, write, action] = k;
    msrs[{domain, other ? kOther : msr, write, action}] += n;
  }
  out->msrs.clear();
  for (const auto& [k, n] : msrs) {
    const auto& [domain, msr, write, action] = k;
    out->msrs.push_back(dispatch::MsrCount{
        domain == kOther ? std::nullopt : std::optional<uint32_t>(static_cast<uint32_t>(domain)),
        msr == kOther ? std::nullopt : std::optional<uint32_t>(static_cast<uint32_t>(msr)), write,
        action, n});
  }
}

void KvmAttachments::AddLearnedTo(std::vector<dispatch::LearnedAccess>* learned) const {
  Reported all;
  {
    absl::MutexLock lock(&mu_);
    all = ended_;
    for (const auto& [key, r] : live_) all.Add(r);
  }
  for (const auto& [k, a] : all.learned) learned->push_back(a);
  std::sort(learned->begin(), learned->end(),
            [](const dispatch::LearnedAccess& x, const dispatch::LearnedAccess& y) {
              return std::make_tuple(x.domain, x.insn, x.index, x.width) <
                     std::make_tuple(y.domain, y.insn, y.index, y.width);
            });
}

std::vector<KvmAttachments::Attachment> KvmAttachments::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<Attachment> out;
  for (const auto& [key, a] : by_key_) out.push_back(a);
  std::sort(out.begin(), out.end(), [](const Attachment& x, const Attachment& y) {
    return std::tie(x.domain, x.pid) < std::tie(y.domain, y.pid);
  });
  return out;
}

void KvmAttachments::PolicyChanged(uint64_t generation) {
  absl::MutexLock lock(&mu_);
  announced_generation_ = generation;
}

bool KvmAttachments::WaitForPolicy(uint64_t sent, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto moved = [this, sent]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return announced_generation_ != sent;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&moved), timeout);
}

KvmAttachments::Counts KvmAttachments::counts() const {
  absl::MutexLock lock(&mu_);
  Reported all = ended_;
  for (const auto& [key, r] : live_) all.Add(r);
  Counts c = counts_;
  c.traps += all.counts.traps;
  c.completed += all.counts.completed;
  c.exceptions += all.counts.exceptions;
  c.device_io += all.counts.device_io;
  return c;
}

}  // namespace pvemu::server
