#include "server/metrics.h"
#include "server/kvm_attachments.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "pvemu/v1/service.pb.h"
#include "x86/msr_catalog.h"

namespace pvemu::server {
namespace {

constexpr absl::string_view kCodeNames[] = {
    "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
    "UNAUTHENTICATED"};

std::string DomainLabel(const std::optional<uint32_t>& domain) {
  return domain.has_value() ? absl::StrCat(*domain) : "other";
}

class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(RpcMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method == nullptr ? "" : method) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->CountRpc(method_, methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* metrics_;
  std::string method_;
};

class CountingInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingInterceptorFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CountingInterceptor(metrics_, info->method());
  }

 private:
  RpcMetrics* metrics_;
};

// Reads a whole /proc file; "" if it cannot.
std::string ReadProcFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrFormat("%.0f", value);
  }
  return absl::StrFormat("%.15g", value);
}

void ExpositionWriter::Family(absl::string_view name, absl::string_view type,
                              absl::string_view help) {
  // HELP text escapes \ and newline (no quotes).
  std::string escaped;
  for (char c : help) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped.push_back(c);
    }
  }
  absl::StrAppend(&out_, "# HELP ", name, " ", escaped, "\n# TYPE ", name, " ", type, "\n");
}

void ExpositionWriter::Sample(absl::string_view name, const Labels& labels, double value) {
  out_.append(name.data(), name.size());
  if (!labels.empty()) {
    out_.push_back('{');
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&out_, i == 0 ? "" : ",", labels[i].first, "=\"",
                      EscapeLabelValue(labels[i].second), "\"");
    }
    out_.push_back('}');
  }
  absl::StrAppend(&out_, " ", FormatValue(value), "\n");
}

RpcMetrics::RpcMetrics() {
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  // Every service pvemud serves: the KVM data planes' streams and the
  // fleet's service count under their own names, never as "other".
  for (const char* service : {"pvemu.v1.PolicyService", "pvemu.v1.EmulatorService",
                              "pvemu.v1.AuditService", "pvemu.v1.KvmService",
                              "pvemu.v1.FleetService"}) {
    const google::protobuf::ServiceDescriptor* d = pool->FindServiceByName(service);
    if (d == nullptr) continue;
    for (int i = 0; i < d->method_count(); ++i) {
      methods_.push_back(absl::StrCat(service, "/", d->method(i)->name()));
    }
  }
  // Served beside them by the daemon (server/daemon.cc).
  for (const char* method : {"grpc.health.v1.Health/Check", "grpc.health.v1.Health/Watch",
                             "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}) {
    methods_.push_back(method);
  }
  for (size_t i = 0; i < methods_.size(); ++i) method_index_["/" + methods_[i]] = i;
  methods_.push_back("other");
  rpcs_ = std::make_unique<std::atomic<uint64_t>[]>(methods_.size() * kNumCodes);
}

size_t RpcMetrics::MethodIndex(absl::string_view method) const {
  auto it = method_index_.find(method);
  return it == method_index_.end() ? methods_.size() - 1 : it->second;
}

void RpcMetrics::CountRpc(absl::string_view method, grpc::StatusCode code) {
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNumCodes) c = grpc::StatusCode::UNKNOWN;
  rpcs_[MethodIndex(method) * kNumCodes + c].fetch_add(1, std::memory_order_relaxed);
}

void RpcMetrics::CountEdit(const absl::Status& status, absl::Duration took) {
  int result = 0;  // accepted
  switch (status.code()) {
    case absl::StatusCode::kOk:
      break;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kPermissionDenied:
      result = 1;  // refused: the request's fault
      break;
    default:
      result = 2;  // failed: the daemon's (a disk, an internal error)
  }
  const double seconds = absl::ToDoubleSeconds(took);
  absl::MutexLock lock(&edit_mu_);
  ++edits_[result];
  for (int i = 0; i < kNumEditBuckets; ++i) {
    if (seconds <= kEditBuckets[i]) ++buckets_[i];
  }
  duration_sum_ += seconds;
  ++duration_count_;
}

void RpcMetrics::Render(ExpositionWriter* w) const {
  {
    absl::MutexLock lock(&edit_mu_);
    w->Family("pvemu_edits_total", "counter",
              "Policy edits that reached the store, by result: accepted, refused (invalid, "
              "stale if_generation, no such rule) or failed (the daemon's fault).");
    const char* results[] = {"accepted", "refused", "failed"};
    for (int i = 0; i < 3; ++i) {
      w->Sample("pvemu_edits_total", {{"result", results[i]}}, static_cast<double>(edits_[i]));
    }
    w->Family("pvemu_edit_duration_seconds", "histogram",
              "Time from an edit RPC reaching the store to its answer (validate, compile, "
              "persist, swap).");
    for (int i = 0; i < kNumEditBuckets; ++i) {
      w->Sample("pvemu_edit_duration_seconds_bucket", {{"le", FormatValue(kEditBuckets[i])}},
                static_cast<double>(buckets_[i]));
    }
    w->Sample("pvemu_edit_duration_seconds_bucket", {{"le", "+Inf"}},
              static_cast<double>(duration_count_));
    w->Sample("pvemu_edit_duration_seconds_sum", {}, duration_sum_);
    w->Sample("pvemu_edit_duration_seconds_count", {}, static_cast<double>(duration_count_));
  }
  w->Family("pvemu_rpcs_total", "counter",
            "gRPC calls by method and final status code (methods not served: \"other\").");
  for (size_t m = 0; m < methods_.size(); ++m) {
    for (int c = 0; c < kNumCodes; ++c) {
      const uint64_t n = rpcs_[m * kNumCodes + c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      w->Sample("pvemu_rpcs_total", {{"method", methods_[m]}, {"code", std::string(kCodeNames[c])}},
                static_cast<double>(n));
    }
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewRpcCountingInterceptorFactory(RpcMetrics* metrics) {
  return std::make_unique<CountingInterceptorFactory>(metrics);
}

void RenderTrapCounts(const dispatch::Dispatcher::Counts& counts, ExpositionWriter* w) {
  w->Family("pvemu_traps_total", "counter",
            "Traps handled, by domain, instruction (mnemonic, or undecodable) and outcome.");
  for (const dispatch::KindCount& k : counts.kinds) {
    w->Sample("pvemu_traps_total",
              {{"domain", DomainLabel(k.domain)},
               {"instruction", std::string(dispatch::InstructionLabel(k.insn))},
               {"outcome", std::string(dispatch::OutcomeLabel(k.outcome))}},
              static_cast<double>(k.count));
  }
  w->Family("pvemu_msr_accesses_total", "counter",
            "RDMSR/WRMSR accesses by domain, MSR, access and the policy's action (UNKNOWN_*: "
            "no rule, the unknown-MSR mode decided). Per domain: MSRs a rule names, the first "
            "64 others, then msr=\"other\".");
  for (const dispatch::MsrCount& m : counts.msrs) {
    w->Sample("pvemu_msr_accesses_total",
              {{"domain", DomainLabel(m.domain)},
               {"msr", m.msr.has_value() ? absl::StrFormat("0x%x", *m.msr) : "other"},
               {"name", m.msr.has_value() ? std::string(x86::MsrName(*m.msr)) : ""},
               {"access", m.write ? "write" : "read"},
               {"action", std::string(dispatch::MsrActionName(m.action))}},
              static_cast<double>(m.count));
  }
}

void RenderProcessMetrics(ExpositionWriter* w) {
  // /proc/self/stat: the fields after the command's closing parenthesis,
  // from field 3 (state); proc(5) numbers them from 1.
  const std::string stat = ReadProcFile("/proc/self/stat");
  const size_t paren = stat.rfind(')');
  std::vector<std::string> f;
  if (paren != std::string::npos) {
    f = absl::StrSplit(absl::string_view(stat).substr(paren + 2), ' ', absl::SkipEmpty());
  }
  const auto field = [&](int number) -> double {
    const size_t i = static_cast<size_t>(number - 3);
    double v = 0;
    return i < f.size() && absl::SimpleAtod(f[i], &v) ? v : 0;
  };
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  double boot = 0;
  for (absl::string_view line : absl::StrSplit(ReadProcFile("/proc/stat"), '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) (void)absl::SimpleAtod(line, &boot);
  }
  w->Family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
  w->Sample("process_cpu_seconds_total", {}, (field(14) + field(15)) / ticks);
  w->Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  w->Sample("process_resident_memory_bytes", {},
            field(24) * static_cast<double>(sysconf(_SC_PAGESIZE)));
  w->Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  w->Sample("process_virtual_memory_bytes", {}, field(23));
  w->Family("process_start_time_seconds", "gauge",
            "Start time of the process since unix epoch in seconds.");
  w->Sample("process_start_time_seconds", {}, boot + field(22) / ticks);
  double open_fds = 0;
  if (DIR* dir = opendir("/proc/self/fd"); dir != nullptr) {
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] != '.') ++open_fds;
    }
    closedir(dir);
  }
  w->Family("process_open_fds", "gauge", "Number of open file descriptors.");
  w->Sample("process_open_fds", {}, open_fds);
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  w->Family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
  w->Sample("process_max_fds", {},
            limit.rlim_cur == RLIM_INFINITY ? INFINITY : static_cast<double>(limit.rlim_cur));
}

std::string RenderMetrics(const MetricsSources& sources) {
  ExpositionWriter w;
  if (sources.dispatcher != nullptr) {
    dispatch::Dispatcher::Counts counts = sources.dispatcher->CountsByKey();
    if (sources.kvm != nullptr) sources.kvm->AddCountsTo(&counts);
    RenderTrapCounts(counts, &w);
  }
  if (sources.store != nullptr) {
    w.Family("pvemu_policy_generation", "gauge", "The serving policy's generation.");
    w.Sample("pvemu_policy_generation", {}, static_cast<double>(sources.store->generation()));
  }
  if (sources.rpcs != nullptr) sources.rpcs->Render(&w);
  if (sources.audit != nullptr) {
    const dispatch::AuditHub::Stats audit = sources.audit->stats();
    w.Family("pvemu_audit_watchers", "gauge", "AuditService.Watch streams open now.");
    w.Sample("pvemu_audit_watchers", {}, static_cast<double>(audit.watchers));
    w.Family("pvemu_audit_events_suppressed_total", "counter",
             "Audit trap events not delivered: unknown-MSR events over the per-domain, per-MSR "
             "rate limit, and trap events dropped for a watcher whose queue was full.");
    w.Sample("pvemu_audit_events_suppressed_total", {{"reason", "rate_limited"}},
             static_cast<double>(audit.rate_limited));
    w.Sample("pvemu_audit_events_suppressed_total", {{"reason", "slow_watcher"}},
             static_cast<double>(audit.dropped));
  }
  RenderProcessMetrics(&w);
  return w.text();
}

}  // namespace pvemu::server
