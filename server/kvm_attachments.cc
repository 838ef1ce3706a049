#include "server/kvm_attachments.h"

#include <algorithm>
#include <optional>
#include <tuple>

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

void KvmAttachments::Report(uint32_t pid, const v1::KvmTrapBatch& batch) {
  absl::MutexLock lock(&mu_);
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
    return;
  }
  Reported r;
  r.counts = Counts{batch.traps(), batch.completed(), batch.exceptions(), batch.device_io()};
  const uint32_t domain = batch.domain();
  for (const v1::KvmKindCount& k : batch.kinds()) {
    const std::optional<int> insn = dispatch::InstructionFromLabel(k.instruction());
    const std::optional<emulator::OutcomeKind> outcome = dispatch::OutcomeFromLabel(k.outcome());
    if (!insn.has_value() || !outcome.has_value()) continue;  // a newer data plane's label
    r.kinds[{domain, *insn, *outcome}] += k.count();
  }
  for (const v1::KvmMsrCount& m : batch.msrs()) {
    const std::optional<dispatch::MsrAction> action = dispatch::MsrActionFromName(m.action());
    if (!action.has_value()) continue;
    r.msrs[{domain, m.msr_other() ? 0 : m.msr(), m.msr_other(), m.write(), *action}] += m.count();
  }
  for (const v1::LearnedAccess& l : batch.learned()) {
    const std::optional<int> insn = dispatch::InstructionFromLabel(l.instruction());
    if (!insn.has_value()) continue;
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
}

void KvmAttachments::Reported::Add(const Reported& other) {
  counts.traps += other.counts.traps;
  counts.completed += other.counts.completed;
  counts.exceptions += other.counts.exceptions;
  counts.device_io += other.counts.device_io;
  for (const auto& [k, n] : other.kinds) kinds[k] += n;
  for (const auto& [k, n] : other.msrs) msrs[k] += n;
  for (const auto& [k, a] : other.learned) {
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
