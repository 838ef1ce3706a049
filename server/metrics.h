// pvemud's metrics in the Prometheus text exposition format (version
// 0.0.4): what `GET /metrics` answers (server/metrics_http.h serves it).
//
// Families (docs/CLI.md, "Metrics"): pvemu_traps_total,
// pvemu_msr_accesses_total, pvemu_policy_generation, pvemu_edits_total,
// pvemu_edit_duration_seconds, pvemu_rpcs_total, pvemu_audit_watchers,
// pvemu_audit_events_suppressed_total and the standard process_* metrics.
// Trap and MSR counts are the dispatcher's per-session tables, summed at
// scrape time (dispatch/trap_counts.h); nothing here is on the trap path.
#ifndef PVEMU_SERVER_METRICS_H_
#define PVEMU_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dispatch/audit.h"
#include "dispatch/dispatch.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"
#include "policy/store.h"

namespace pvemu::server {

class KvmAttachments;  // server/kvm_attachments.h

// Writes metric families: "# HELP", "# TYPE", then samples.
class ExpositionWriter {
 public:
  using Labels = std::vector<std::pair<absl::string_view, std::string>>;

  // `type`: counter | gauge | histogram.
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  void Sample(absl::string_view name, const Labels& labels, double value);

  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// A label value with \, " and newline escaped (\\, \", \n).
std::string EscapeLabelValue(absl::string_view value);
// A sample value: integers as such, +Inf, -Inf, NaN, else up to 15 digits.
std::string FormatValue(double value);

// What the gRPC layer counts: RPCs by method and status code, and policy
// edits by result with their duration. Thread-safe.
class RpcMetrics {
 public:
  // Edit durations, 100 us .. 10 s.
  static constexpr double kEditBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                            0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                            1,      2.5,     5,      10};
  static constexpr int kNumEditBuckets = sizeof(kEditBuckets) / sizeof(kEditBuckets[0]);

  // Knows the methods of pvemu's services, health checking and reflection;
  // any other method name counts as "other" (clients choose method names).
  RpcMetrics();

  // `method`: "/package.Service/Method", as gRPC names it.
  void CountRpc(absl::string_view method, grpc::StatusCode code);
  // One edit that reached the policy store: accepted (OK), refused (the
  // request's fault: invalid, stale generation, not found, ...) or failed.
  void CountEdit(const absl::Status& status, absl::Duration took);

  void Render(ExpositionWriter* w) const;

 private:
  static constexpr int kNumCodes = 17;  // grpc::StatusCode 0..16
  size_t MethodIndex(absl::string_view method) const;

  std::vector<std::string> methods_;  // label values; the last is "other"
  absl::flat_hash_map<std::string, size_t> method_index_;  // "/pkg.Svc/M" -> index
  std::unique_ptr<std::atomic<uint64_t>[]> rpcs_;          // methods_ x kNumCodes

  mutable absl::Mutex edit_mu_;
  uint64_t edits_[3] ABSL_GUARDED_BY(edit_mu_) = {};  // accepted, refused, failed
  uint64_t buckets_[kNumEditBuckets] ABSL_GUARDED_BY(edit_mu_) = {};
  double duration_sum_ ABSL_GUARDED_BY(edit_mu_) = 0;
  uint64_t duration_count_ ABSL_GUARDED_BY(edit_mu_) = 0;
};

// A server interceptor that counts every RPC's final status into `metrics`
// (which must outlive the server).
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewRpcCountingInterceptorFactory(RpcMetrics* metrics);

// Where the families come from; the daemon's components.
struct MetricsSources {
  const dispatch::Dispatcher* dispatcher = nullptr;
  const policy::Store* store = nullptr;
  dispatch::AuditHub* audit = nullptr;
  const RpcMetrics* rpcs = nullptr;
  // The KVM VMs following this daemon: their traps join the same series.
  const KvmAttachments* kvm = nullptr;
};

// Every family, for one scrape.
std::string RenderMetrics(const MetricsSources& sources);

// The trap and MSR-access families alone (RenderMetrics includes them).
void RenderTrapCounts(const dispatch::Dispatcher::Counts& counts, ExpositionWriter* w);
// process_cpu_seconds_total, process_resident_memory_bytes, ... from
// /proc/self at the time of the call.
void RenderProcessMetrics(ExpositionWriter* w);

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_METRICS_H_
