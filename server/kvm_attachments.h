// The registry of the KVM data planes (libpvemu-kvm) that follow pvemud's
// policy: which domain each serves in which process, and the traps they
// report. KvmService writes it; PolicyService and EmulatorService read it.
#ifndef PVEMU_SERVER_KVM_ATTACHMENTS_H_
#define PVEMU_SERVER_KVM_ATTACHMENTS_H_

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dispatch/dispatch.h"
#include "pvemu/v1/service.pb.h"

namespace pvemu::server {

// The KVM data planes (libpvemu-kvm) following this daemon: which domain
// each serves in which process, and the traps they report. Thread-safe; off
// every trap path (a data plane reports in batches).
class KvmAttachments {
 public:
  struct Attachment {
    uint32_t domain = 0;
    uint32_t pid = 0;
    uint32_t vcpus = 0;
    uint64_t generation = 0;  // the generation the data plane applies
  };
  struct Counts {
    uint64_t traps = 0, completed = 0, exceptions = 0, device_io = 0;
  };
  // A policy subscription began; returns its key for Detach.
  uint64_t Attach(uint32_t domain, uint32_t pid, uint32_t vcpus);
  void Detach(uint64_t key);
  // Series one table of reported counts keeps (per live data plane, and the
  // ended VMs' sums): an MSR past it counts under its domain's "other" MSR,
  // as a data plane's own overflow does; an instruction or learned access
  // past it is not kept. A data plane keeps at most 8192 named MSRs, so
  // only a reporter that lies reaches it.
  static constexpr size_t kMaxSeries = 1 << 16;
  // Data planes reporting at once, by (pid, domain).
  static constexpr size_t kMaxLive = 4096;

  // A batch from the data plane of `domain` in process `pid`. A cumulative
  // batch replaces what that data plane reported before; its last one
  // moves its counts to the ended VMs' sums. ResourceExhausted, changing
  // nothing, for a new (pid, domain) past kMaxLive.
  absl::Status Report(uint32_t pid, const v1::KvmTrapBatch& batch);
  std::vector<Attachment> List() const;  // by domain, then pid
  Counts counts() const;
  // Every KVM VM's traps by (domain, instruction, outcome) and MSR accesses
  // by (domain, MSR, access, action), live and ended, added to `counts`
  // (the daemon's own, for stats --msrs and /metrics).
  void AddCountsTo(dispatch::Dispatcher::Counts* counts) const;
  // Every KVM VM's learned accesses, added to `learned`.
  void AddLearnedTo(std::vector<dispatch::LearnedAccess>* learned) const;

  // The policy moved to `generation` (the daemon's edit listener calls this).
  void PolicyChanged(uint64_t generation);
  // Waits until a generation other than `sent` was announced, or `timeout`
  // passed; returns whether one was. Policy streams wait here instead of
  // polling the store.
  bool WaitForPolicy(uint64_t sent, absl::Duration timeout) const;

 private:
  mutable absl::Mutex mu_;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Attachment> by_key_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
  uint64_t announced_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // What cumulative data planes reported last, by (pid, domain), and the
  // sums of those that sent their last batch.
  struct Reported {
    Counts counts;
    std::map<std::tuple<uint32_t, int, emulator::OutcomeKind>, uint64_t> kinds;
    std::map<std::tuple<uint32_t, uint32_t, bool, bool, dispatch::MsrAction>, uint64_t> msrs;
    std::map<std::tuple<uint32_t, int, uint32_t, uint8_t>, dispatch::LearnedAccess> learned;
    void Add(const Reported& other);
    void AddMsr(const std::tuple<uint32_t, uint32_t, bool, bool, dispatch::MsrAction>& key,
                uint64_t n);
  };
  std::map<std::pair<uint32_t, uint32_t>, Reported> live_ ABSL_GUARDED_BY(mu_);
  Reported ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_KVM_ATTACHMENTS_H_
