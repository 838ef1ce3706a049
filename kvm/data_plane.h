// The KVM data plane of one domain, behind the C ABI (kvm/pvemu_kvm.h): the
// domain's policy in a policy::Store, the host backend, and the dispatch/
// trap path every other trap source uses. A KVM exit becomes a Trap (from
// kvm_run alone: no ioctl per exit), one Session::Handle decides it, and the
// Outcome is written back into kvm_run.
//
// Thread-safety: DataPlane is thread-safe. Each Vcpu is used by one thread
// at a time; HandleExit allocates nothing and takes no lock (a new policy
// generation is picked up by the session's SnapshotReader, one acquire load).
#ifndef PVEMU_KVM_DATA_PLANE_H_
#define PVEMU_KVM_DATA_PLANE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dispatch/dispatch.h"
#include "emulator/trap.h"
#include "dispatch/trap_capture.h"
#include "emulator/host.h"
#include "kvm/audit_ring.h"
#include "enforce/kvm_msr_filter.h"
#include "kvm/pvemu_kvm.h"
#include "policy/loader.h"
#include "policy/store.h"

struct kvm_run;

namespace pvemu::kvm {

class PolicySubscription;  // kvm/subscription.h

struct DataPlaneOptions {
  uint32_t domain = 0;
  std::string policy;  // a file or a policy's name (standalone)
  std::string server;  // pvemud's address (subscribed)
  absl::Duration connect_timeout = absl::Seconds(5);
  std::string host = "sim";  // "sim" or "linux"
  std::string host_profile;  // sim: a profile's name or file; "": the default
  std::string capture;       // a trap log of every exit decided ("": none)
  bool count_msrs = false;   // count per (MSR, access, action); subscribed: always
  bool time_exits = false;   // time each exit's decision (pvemu_kvm_stats.pvemu_ns)
};

class DataPlane;

class Vcpu {
 public:
  ~Vcpu();
  // One exit; a pvemu_kvm_exit_result, or -EINVAL for a malformed I/O exit.
  int HandleExit(struct kvm_run* run);
  pvemu_kvm_stats stats() const;

 private:
  friend class DataPlane;
  Vcpu(DataPlane* plane, uint32_t index, size_t run_size, int vcpu_fd);
  int Dispatch(struct kvm_run* run);
  int HandleMsr(struct kvm_run* run, bool write);
  int HandleIo(struct kvm_run* run);
  // The guest RIP at the exit being handled (KVM_GET_REGS: an exit's
  // kvm_run names the access, not where it was), for first-access records
  // only (Dispatcher::Session::SetRipSource); 0 when it cannot be read.
  static uint64_t GuestRip(void* vcpu);

  DataPlane* const plane_;
  const uint32_t index_;
  const size_t run_size_;  // the kvm_run mapping's size, bounding I/O data
  const int vcpu_fd_;      // -1 when the tests drive exits without KVM
  const bool time_exits_;  // DataPlaneOptions::time_exits
  std::unique_ptr<dispatch::Dispatcher::Session> session_;
  // The trap an exit becomes: domain, vCPU, mode and CPL set once; each exit
  // sets the instruction and the registers it reads (an exit builds nothing).
  emulator::Trap trap_;
  // Written by this vCPU's thread only; read by others (stats) relaxed.
  struct Counters {
    std::atomic<uint64_t> rdmsr{0}, wrmsr{0}, io{0}, completed{0}, exceptions{0}, device{0};
    std::atomic<uint64_t> ticks{0};  // TSC ticks spent deciding
  } counters_;
};

class DataPlane {
 public:
  // Loads (standalone) or receives (subscribed) the policy, checks that KVM
  // can express it for the domain, and opens the host backend.
  static absl::StatusOr<std::unique_ptr<DataPlane>> Open(const DataPlaneOptions& options);
  ~DataPlane();

  // Enables user-space MSR exits and installs the filter (pvemu_kvm_setup_vm).
  absl::Status SetupVm(int vm_fd);
  // KVM_SET_CPUID2 from the policy, then a Vcpu (pvemu_kvm_vcpu_open).
  absl::StatusOr<std::unique_ptr<Vcpu>> OpenVcpu(int kvm_fd, int vcpu_fd, uint32_t index);
  // The exit handler of vCPU `index` whose CPUID is set up, for a kvm_run
  // mapping of `run_size` bytes (OpenVcpu's second half; tests drive exits
  // through it without /dev/kvm).
  // `vcpu_fd` (-1: none) is read only for first-access RIPs.
  std::unique_ptr<Vcpu> NewVcpu(uint32_t index, size_t run_size, int vcpu_fd = -1);

  // Checks `policy` for this domain (valid, expressible as a filter, CPUID
  // consistent with guest_vendor), then swaps it in atomically as
  // `generation` and reinstalls the filter if the exiting set changed. On
  // error nothing changes.
  absl::Status Apply(const pvemu::v1::Policy& policy, const policy::SourceMap& source,
                     uint64_t generation);

  uint32_t domain() const { return options_.domain; }
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  enforce::MsrFilter filter() const;
  // The vCPUs open now, and the counts of every vCPU opened so far.
  struct Totals {
    uint32_t vcpus = 0;
    pvemu_kvm_stats stats{};
  };
  Totals totals() const;
  // Moves the audited traps waiting for pvemud into `batch` (subscribed
  // only; one caller at a time: the subscription's report thread).
  void DrainAudit(v1::KvmTrapBatch* batch) {
    if (audit_ring_ != nullptr) audit_ring_->Drain(batch);
  }
  // Subscribed: what pvemud shows of this VM, since the plane opened (the
  // batch's cumulative tables: traps by instruction and outcome, MSR
  // accesses by MSR, access and action, learned accesses), and the log
  // lines for pvemud not yet sent. One caller at a time (the report thread).
  void FillReport(v1::KvmTrapBatch* batch);
  // The MSR accesses by (MSR, access, action) over every vCPU, open or
  // closed (dispatch::Dispatcher::CountsByKey); FailedPrecondition unless
  // the plane counts them (count_msrs, or subscribed). Off the exit path.
  absl::StatusOr<std::vector<dispatch::MsrCount>> MsrCounts() const;
  // Nanoseconds per TSC tick, measured over the plane's lifetime so far.
  double NanosPerTick() const;

 private:
  friend class Vcpu;
  explicit DataPlane(const DataPlaneOptions& options);
  absl::Status InstallFilter(const enforce::MsrFilter& filter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DataPlaneOptions options_;
  std::unique_ptr<emulator::Host> host_;
  std::unique_ptr<policy::Store> store_;
  std::unique_ptr<AuditRing> audit_ring_;  // subscribed only; outlives the dispatcher
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
  std::unique_ptr<dispatch::TrapCapture> capture_;  // options_.capture; observes dispatcher_
  // Subscribed: the dispatcher's lines for pvemud's log (first accesses,
  // learning), until the next report takes them; at most kMaxLogLines.
  static constexpr size_t kMaxLogLines = 256;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
  uint64_t log_dropped_ ABSL_GUARDED_BY(log_mu_) = 0;
  std::unique_ptr<PolicySubscription> subscription_;
  std::atomic<uint64_t> generation_{0};

  void Register(Vcpu* vcpu);
  void Unregister(Vcpu* vcpu);

  mutable absl::Mutex vcpus_mu_;  // vCPU open/close and totals(); never on exits
  std::vector<Vcpu*> vcpus_ ABSL_GUARDED_BY(vcpus_mu_);
  pvemu_kvm_stats closed_ ABSL_GUARDED_BY(vcpus_mu_){};

  mutable absl::Mutex mu_;  // serialises Apply and SetupVm
  enforce::MsrFilter filter_ ABSL_GUARDED_BY(mu_);
  int vm_fd_ ABSL_GUARDED_BY(mu_) = -1;

  // TSC and clock at open, to turn the counted ticks into nanoseconds
  // without a clock read per exit.
  const uint64_t tsc_at_open_;
  const absl::Time time_at_open_;
};

// KVM_SET_CPUID2's entries for one domain: KVM's supported leaves with the
// policy's leaves applied (CONST: the policy's registers; HOST: the host
// backend's, masked), plus the policy's leaves KVM does not list, and leaf 0's
// vendor string from an explicit guest_vendor. Public for tests.
struct CpuidLeaf {
  uint32_t function = 0, index = 0, flags = 0;
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};
absl::StatusOr<std::vector<CpuidLeaf>> GuestCpuid(const std::vector<CpuidLeaf>& supported,
                                                  const pvemu::v1::Policy& policy,
                                                  const policy::DomainSnapshot& domain,
                                                  emulator::Host& host);

}  // namespace pvemu::kvm

#endif  // PVEMU_KVM_DATA_PLANE_H_
