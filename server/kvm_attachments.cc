#include "server/kvm_attachments.h"

#include <algorithm>
#include <tuple>

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
  counts_.traps += batch.traps();
  counts_.completed += batch.completed();
  counts_.exceptions += batch.exceptions();
  counts_.device_io += batch.device_io();
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
  return counts_;
}

}  // namespace pvemu::server
