#include "server/daemon.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "policy/store.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "dispatch/audit.h"
#include "policy/loader.h"
#include "policy/shipped.h"
#include "server/auth.h"
#include "dispatch/dispatch.h"
#include "dispatch/trap_capture.h"
#include "enforce/kvm_msr_filter.h"
#include "server/fault_logging_host.h"
#include "hosts/open_host.h"
#include "hosts/xen/xen_host.h"
#include "fleet/fleet.h"
#include "server/fleet_service.h"
#include "server/listener.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/audit_service.h"
#include "server/emulator_service.h"
#include "server/kvm_attachments.h"
#include "server/kvm_service.h"
#include "server/policy_service.h"
#include "enforce/xen_enforcement.h"
#include "server/xen/xen_monitor.h"
#include "server/xen/xen_port_server.h"
#include "server/xen/xen_vm_event.h"

namespace pvemu::server {
namespace {

// The fewest threads the gRPC server may run for calls, whatever
// --max-streams-per-peer says (StartServer).
constexpr int kMinRpcThreads = 1024;

// Lists Xen's live domains for `pvemuctl domains`.
LiveDomainsFn XenDomains(hosts::XenHost* xen) {
  return [xen]() -> absl::StatusOr<std::vector<v1::DomainInfo>> {
    ASSIGN_OR_RETURN(std::vector<hosts::DomainState> states, xen->ListDomains());
    std::vector<v1::DomainInfo> out;
    for (const hosts::DomainState& s : states) {
      v1::DomainInfo d;
      d.set_domain(s.domid);
      d.set_live(true);
      d.set_vcpus(s.nr_online_vcpus);
      d.set_state(s.dying      ? "dying"
                  : s.shutdown ? "shutdown"
                  : s.paused   ? "paused"
                  : s.running  ? "running"
                  : s.blocked  ? "blocked"
                               : "idle");
      out.push_back(std::move(d));
    }
    return out;
  };
}

class DaemonImpl final : public Daemon {
 public:
  ~DaemonImpl() override { Shutdown(); }

  std::string ReadyMessage() const override {
    return absl::StrCat("pvemud: ready on ", listen_, " (host ", host_->description(),
                        ", policy generation ", store_->generation(),
                        state_dir_.empty() ? ", in memory" : ", state in " + state_dir_,
                        host_writes_ ? ", host MSR writes ENABLED" : "",
                        fleet_ == nullptr ? ""
                                          : absl::StrCat(", fleet ", fleet_->Self().endpoints(),
                                                         " as host ", fleet_->keys().host_id()),
                        metrics_http_ == nullptr
                            ? ""
                            : absl::StrCat(", metrics on http://", metrics_http_->address(),
                                           "/metrics"),
                        ")");
  }

  void Shutdown() override {
    if (shut_down_) return;
    shut_down_ = true;
    metrics_http_.reset();  // waits for a scrape in progress
    // First release every guest vCPU the monitors hold (they answer what is
    // still on their rings), then stop serving.
    for (auto& monitor : monitors_) monitor->Stop();
    for (auto& ports : port_servers_) ports->Stop();
    if (listener_ != nullptr) listener_->Stop();
    audit_.Shutdown();
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now() +
                                              std::chrono::seconds(3));
    // After the server: an edit in flight may still wait for the watcher.
    if (fleet_ != nullptr) fleet_->Stop();
    if (capture_ != nullptr) {
      dispatcher_->RemoveObserver(capture_.get());
      absl::Status closed = capture_->Close();
      std::fprintf(stderr, "pvemud: capture: %llu traps%s%s\n",
                   static_cast<unsigned long long>(capture_->records()),
                   closed.ok() ? "" : ", ", std::string(closed.message()).c_str());
    }
  }

  // Init's phases, in order: the listening flags, the host, the store, the
  // trap path, the services, the server, the Xen monitors.
  absl::Status Init(const DaemonOptions& options, std::vector<std::string>* warnings);
  struct Listening {
    bool activated = false;   // a socket from systemd (--listen-fd)
    std::string socket_path;  // unix:// (empty for TCP)
    bool tls = false;         // TCP with client certificates
  };
  static absl::StatusOr<Listening> CheckListening(const DaemonOptions& options);
  absl::Status OpenStore(const DaemonOptions& options, std::vector<std::string>* warnings);
  absl::Status StartDispatch(const DaemonOptions& options);
  void CreateServices(const DaemonOptions& options);
  absl::Status StartServer(const DaemonOptions& options, const Listening& listening);
  // Opens --host (wrapped to log host faults) into host_; xen_host_ when it
  // is Xen, which only the daemon opens (hosts::OpenHost has no Xen).
  absl::Status OpenBackend(const DaemonOptions& options);
  absl::Status StartMonitors(const DaemonOptions& options);
  // Fleet mode: the store holds the base policy in memory (the fleet's
  // last good state lives in state_dir/fleet.state, not policy.textproto),
  // and the fleet replaces it whole, revision by revision.
  absl::Status StartFleet(const DaemonOptions& options, std::vector<std::string>* warnings);

 private:
  void OnEdit(const policy::EditEvent& edit);

  std::string listen_;
  std::string state_dir_;
  bool host_writes_ = false;
  bool shut_down_ = false;
  std::unique_ptr<emulator::Host> host_;  // the backend behind a FaultLoggingHost
  hosts::XenHost* xen_host_ = nullptr;    // the backend, when it is --host=xen
  std::unique_ptr<policy::Store> store_;
  dispatch::AuditHub audit_;
  RpcMetrics rpc_metrics_;  // counted only while --metrics is on
  std::unique_ptr<dispatch::Dispatcher> dispatcher_;
  std::unique_ptr<dispatch::TrapCapture> capture_;
  std::vector<std::unique_ptr<XenMonitor>> monitors_;
  std::vector<std::unique_ptr<XenPortServer>> port_servers_;
  PeerTable peers_;
  std::unique_ptr<Authorizer> auth_;
  std::unique_ptr<PolicyServiceImpl> policy_service_;
  std::unique_ptr<EmulatorServiceImpl> emulator_service_;
  std::unique_ptr<AuditServiceImpl> audit_service_;
  KvmAttachments kvm_attachments_;
  std::unique_ptr<KvmServiceImpl> kvm_service_;
  std::unique_ptr<fleet::Fleet> fleet_;  // fleet mode only; uses store_
  std::unique_ptr<FleetServiceImpl> fleet_service_;
  std::unique_ptr<UnixListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;  // reads everything above
};

// Every accepted edit: to the watchers, to stderr (the journal) and to
// state_dir/audit.log, with who, when, generation and what changed.
void DaemonImpl::OnEdit(const policy::EditEvent& edit) {
  emulator_service_->CountEdit();
  kvm_attachments_.PolicyChanged(edit.generation);
  std::string line = absl::StrCat(absl::FormatTime(absl::RFC3339_sec, absl::Now(),
                                                   absl::UTCTimeZone()),
                                  " edit generation=", edit.generation, " ", edit.method,
                                  " layer=", edit.layer, " by ", edit.who);
  std::fprintf(stderr, "pvemud: %s\n", line.c_str());
  if (!state_dir_.empty()) {
    std::ofstream log(state_dir_ + "/audit.log", std::ios::app);
    log << line << "\n" << edit.diff << (edit.diff.empty() || edit.diff.back() == '\n' ? "" : "\n");
  }
  v1::EditEvent event;
  event.set_who(edit.who);
  event.set_generation(edit.generation);
  event.set_method(edit.method);
  event.set_layer(edit.layer);
  event.set_diff(edit.diff);
  audit_.PublishEdit(std::move(event));
}

absl::Status DaemonImpl::OpenBackend(const DaemonOptions& options) {
  std::unique_ptr<emulator::Host> host;
  if (options.host == "xen" && options.host_profile.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<hosts::XenHost> xen, hosts::XenHost::Open());
    xen_host_ = xen.get();
    host = std::move(xen);
  } else {
    hosts::HostOptions host_options;
    host_options.profile = options.host_profile;
    ASSIGN_OR_RETURN(host, hosts::OpenHost(options.host, host_options));
  }
  host_ = std::make_unique<FaultLoggingHost>(std::move(host));
  return absl::OkStatus();
}

// How pvemud listens: a socket systemd passed, a Unix socket it binds, or
// TCP with TLS and client certificates. InvalidArgument for a combination
// that makes no sense, saying which flags to drop or add.
absl::StatusOr<DaemonImpl::Listening> DaemonImpl::CheckListening(const DaemonOptions& options) {
  Listening l;
  l.activated = options.listen_fd >= 0;
  l.socket_path = UnixSocketPath(options.listen);
  l.tls = !options.tls_cert.empty() || !options.tls_key.empty() || !options.tls_client_ca.empty();
  const bool activated = l.activated, tls = l.tls;
  const std::string& socket_path = l.socket_path;
  if (activated && tls) {
    return absl::InvalidArgumentError(
        "--tls-* flags apply to TCP listening; the socket systemd passed is a Unix "
        "socket, authenticated by SO_PEERCRED: drop the --tls-* flags");
  }
  if (socket_path.empty() && !tls && !activated) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen=", options.listen,
        " is TCP; pvemud serves TCP only over TLS with client certificates: give "
        "--tls-cert, --tls-key and --tls-client-ca, or listen on unix:///path"));
  }
  if (tls && (options.tls_cert.empty() || options.tls_key.empty() ||
              options.tls_client_ca.empty())) {
    return absl::InvalidArgumentError(
        "TLS needs all three of --tls-cert, --tls-key and --tls-client-ca (clients "
        "must present a certificate signed by that CA)");
  }
  if (!socket_path.empty() && tls) {
    return absl::InvalidArgumentError(
        "--tls-* flags apply to TCP listening; a unix:// socket is authenticated by "
        "SO_PEERCRED instead: drop the --tls-* flags or listen on host:port");
  }
  return l;
}

// The policy store: on disk in --state-dir (created 0700), or the fleet's.
absl::Status DaemonImpl::OpenStore(const DaemonOptions& options,
                                   std::vector<std::string>* warnings) {
  if (!state_dir_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(state_dir_, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create --state-dir=", state_dir_, ": ", ec.message()));
    }
    chmod(state_dir_.c_str(), 0700);
  }
  if (options.fleet.empty()) {
    ASSIGN_OR_RETURN(store_, policy::Store::Open(state_dir_, options.policy, host_->vendor(),
                                                 warnings));
  } else {
    RETURN_IF_ERROR(StartFleet(options, warnings));
  }
  return absl::OkStatus();
}

// The trap path, and the capture observer when --capture is given.
absl::Status DaemonImpl::StartDispatch(const DaemonOptions& options) {
  dispatch::DispatchOptions dispatch_options;
  dispatch_options.allow_host_writes = options.allow_host_writes;
  dispatch_options.count_by_domain_and_msr = options.count_msrs || !options.metrics.empty();
  dispatch_options.log = [](absl::string_view line) {
    std::fprintf(stderr, "pvemud: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  dispatcher_ = std::make_unique<dispatch::Dispatcher>(*store_, *host_, &audit_, dispatch_options);
  if (!options.capture.empty()) {
    ASSIGN_OR_RETURN(capture_, dispatch::TrapCapture::Open(
                                   options.capture, [](const absl::Status& status) {
                                     std::fprintf(stderr, "pvemud: capture stopped: %s\n",
                                                  std::string(status.message()).c_str());
                                   }));
    RETURN_IF_ERROR(dispatcher_->AddObserver(capture_.get()));
  }
  return absl::OkStatus();
}

// The gRPC services over the store and the dispatcher, and the check that
// refuses an edit an attached KVM data plane could not apply.
void DaemonImpl::CreateServices(const DaemonOptions& options) {
  LiveDomainsFn live;
  if (xen_host_ != nullptr) live = XenDomains(xen_host_);
  RpcMetrics* rpc_metrics = options.metrics.empty() ? nullptr : &rpc_metrics_;
  policy_service_ =
      std::make_unique<PolicyServiceImpl>(*store_, *auth_, std::move(live), rpc_metrics,
                                          &kvm_attachments_);
  if (xen_host_ != nullptr) {
    // Explain says which decisions Xen lets this daemon carry out.
    enforce::XenMonitoring monitoring{options.monitor_domains, options.monitor_msrs,
                             options.monitor_ports};
    policy_service_->SetHostNote([monitoring](const policy::Explanation& e) {
      return e.port.has_value()
                 ? enforce::XenPortNote(monitoring, e.domain, *e.port, e.width)
                 : enforce::XenMsrNote(monitoring, e.domain, e.msr, e.write);
    });
  }
  emulator_service_ = std::make_unique<EmulatorServiceImpl>(
      *dispatcher_, *auth_, std::string(host_->description()), &kvm_attachments_);
  kvm_service_ = std::make_unique<KvmServiceImpl>(*store_, *auth_, kvm_attachments_, audit_);
  audit_service_ = std::make_unique<AuditServiceImpl>(audit_, *auth_);
  if (fleet_ != nullptr) {
    policy_service_->SetFleet(fleet_.get());
    emulator_service_->SetFleet(fleet_.get());
    fleet_service_ = std::make_unique<FleetServiceImpl>(*fleet_, *auth_);
  }
  store_->SetEditListener([this](const policy::EditEvent& e) { OnEdit(e); });
  // An edit an attached KVM data plane could not apply is refused here, with
  // the rules named, rather than ignored there.
  store_->SetCandidateCheck([this](const policy::Snapshot& candidate) -> absl::Status {
    for (const KvmAttachments::Attachment& a : kvm_attachments_.List()) {
      absl::StatusOr<enforce::MsrFilter> filter =
          enforce::CompileMsrFilter(candidate.ForDomain(a.domain));
      if (!filter.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "refused: domain ", a.domain, " runs on KVM (libpvemu-kvm in pid ", a.pid,
            ") and KVM's MSR filter cannot express the edited policy: ",
            filter.status().message()));
      }
    }
    return absl::OkStatus();
  });
}

// The gRPC server on its listener, with /metrics when --metrics is given.
absl::Status DaemonImpl::StartServer(const DaemonOptions& options, const Listening& listening) {
  const bool tls = listening.tls;
  const bool activated = listening.activated;
  const std::string& socket_path = listening.socket_path;
  RpcMetrics* rpc_metrics = options.metrics.empty() ? nullptr : &rpc_metrics_;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // A sync server spends a thread on every open call. Streams are capped per
  // peer (--max-streams-per-peer); this caps them all together, so that
  // many peers cannot exhaust the process: past it gRPC answers new calls
  // RESOURCE_EXHAUSTED instead of starting a thread.
  grpc::ResourceQuota quota("pvemud");
  quota.SetMaxThreads(std::max(kMinRpcThreads, 2 * options.max_streams_per_peer + 64));
  builder.SetResourceQuota(quota);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(policy_service_.get());
  builder.RegisterService(emulator_service_.get());
  builder.RegisterService(audit_service_.get());
  builder.RegisterService(kvm_service_.get());
  if (fleet_service_ != nullptr) builder.RegisterService(fleet_service_.get());
  if (rpc_metrics != nullptr) {
    // Every RPC's final status, whichever service and however it ended
    // (refused by auth, a stream cut short): one place, no method forgotten.
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(NewRpcCountingInterceptorFactory(rpc_metrics));
    builder.experimental().SetInterceptorCreators(std::move(creators));
    MetricsSources sources{dispatcher_.get(), store_.get(), &audit_, rpc_metrics,
                           &kvm_attachments_};
    ASSIGN_OR_RETURN(metrics_http_, MetricsHttpServer::Start(options.metrics, [sources] {
                       return RenderMetrics(sources);
                     }));
  }
  int tcp_port = 0;
  if (tls) {
    grpc::SslServerCredentialsOptions ssl(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    RETURN_IF_ERROR(ReadFileToString(options.tls_key, &pair.private_key));
    RETURN_IF_ERROR(ReadFileToString(options.tls_cert, &pair.cert_chain));
    RETURN_IF_ERROR(ReadFileToString(options.tls_client_ca, &ssl.pem_root_certs));
    ssl.pem_key_cert_pairs.push_back(pair);
    builder.AddListeningPort(options.listen, grpc::SslServerCredentials(ssl), &tcp_port);
  } else if (activated) {
    ASSIGN_OR_RETURN(listener_, UnixListener::Adopt(options.listen_fd));
    listen_ = absl::StrCat("unix://", listener_->path(), " (from systemd)");
  } else {
    ASSIGN_OR_RETURN(listener_, UnixListener::Bind(socket_path, options.socket_mode));
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || (tls && tcp_port == 0)) {
    return absl::UnavailableError(absl::StrCat(
        "gRPC could not listen on ", options.listen,
        " (address in use, or not an address this host has)"));
  }
  if (listener_ != nullptr) listener_->Start(server_.get(), &peers_);
  return absl::OkStatus();
}

absl::Status DaemonImpl::Init(const DaemonOptions& options, std::vector<std::string>* warnings) {
  listen_ = options.listen;
  state_dir_ = options.state_dir;
  host_writes_ = options.allow_host_writes;
  ASSIGN_OR_RETURN(const Listening listening, CheckListening(options));
  if (!options.metrics.empty()) RETURN_IF_ERROR(ParseMetricsAddress(options.metrics).status());
  if (options.max_message_bytes < 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-message-bytes=", options.max_message_bytes, ": must be at least 1024"));
  }
  if (options.max_streams_per_peer < 1 || options.max_streams_per_peer > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-streams-per-peer=", options.max_streams_per_peer,
        ": must be 1 to 1048576 (each open stream holds a thread)"));
  }
  ASSIGN_OR_RETURN(AllowList readers, ParseAllowList(options.readers, "readers"));
  ASSIGN_OR_RETURN(AllowList editors, ParseAllowList(options.editors, "editors"));
  RETURN_IF_ERROR(OpenBackend(options));
  RETURN_IF_ERROR(OpenStore(options, warnings));
  RETURN_IF_ERROR(StartDispatch(options));
  auth_ = std::make_unique<Authorizer>(&peers_, std::move(readers), std::move(editors),
                                       options.max_streams_per_peer);
  CreateServices(options);
  RETURN_IF_ERROR(StartServer(options, listening));
  return StartMonitors(options);
}

absl::Status DaemonImpl::StartFleet(const DaemonOptions& options,
                                    std::vector<std::string>* warnings) {
  policy::LoadedPolicy base;
  if (!options.policy.empty()) {
    ASSIGN_OR_RETURN(base, policy::LoadPolicyByNameOrFile(options.policy));
  } else {
    ASSIGN_OR_RETURN(base, policy::ParsePolicy(policy::ShippedPolicy("default"),
                                               "default.textproto"));
  }
  ASSIGN_OR_RETURN(store_, policy::Store::FromPolicy(base.policy, base.source, host_->vendor()));
  fleet::FleetOptions fo;
  fo.url = options.fleet;
  fo.host_id = options.host_id;
  fo.classes = options.host_classes;
  fo.ca_file = options.fleet_ca;
  fo.cert_file = options.fleet_cert;
  fo.key_file = options.fleet_key;
  fo.state_dir = state_dir_;
  fo.version = PVEMU_VERSION;
  ASSIGN_OR_RETURN(fleet_, fleet::Fleet::Start(fo, *store_, std::move(base), warnings));
  // A first start (nothing on disk) waits a little for etcd, so that it
  // comes up serving the fleet's policy when etcd is there; a host with a
  // last good state serves it at once.
  if (fleet_->Self().applied_revision() == 0) fleet_->WaitFirstSync(absl::Seconds(3));
  return absl::OkStatus();
}

absl::Status DaemonImpl::StartMonitors(const DaemonOptions& options) {
  if (options.monitor_domains.empty()) {
    if (!options.monitor_msrs.empty() || !options.monitor_ports.empty()) {
      return absl::InvalidArgumentError(
          "--monitor-msrs and --monitor-ports say what to decide for --monitor-domain: "
          "add --monitor-domain=N");
    }
    return absl::OkStatus();
  }
  if (xen_host_ == nullptr) {
    return absl::InvalidArgumentError(
        "--monitor-domain watches Xen's vm_event ring: it needs --host=xen");
  }
#ifdef PVEMU_HAVE_XEN
  for (uint32_t domain : options.monitor_domains) {
    // CPUID always: every CPUID of a monitored domain is answered from its
    // policy (Xen's own answer where the policy says nothing).
    ASSIGN_OR_RETURN(std::unique_ptr<VmEventChannel> channel,
                     OpenXenMonitorChannel(domain, options.monitor_msrs, /*cpuid=*/true));
    monitors_.push_back(std::make_unique<XenMonitor>(*dispatcher_, std::move(channel)));
    monitors_.back()->Start();
    std::string ports;
    if (!options.monitor_ports.empty()) {
      ASSIGN_OR_RETURN(std::unique_ptr<IoreqChannel> ioreq,
                       OpenXenIoreqChannel(domain, options.monitor_ports));
      port_servers_.push_back(std::make_unique<XenPortServer>(*dispatcher_, std::move(ioreq)));
      port_servers_.back()->Start();
      for (const PortSpan& span : options.monitor_ports) {
        absl::StrAppend(&ports, ports.empty() ? ", ports " : ",", "0x", absl::Hex(span.first));
        if (span.last != span.first) absl::StrAppend(&ports, "-0x", absl::Hex(span.last));
      }
      ports += " (ioreq server)";
    }
    std::fprintf(stderr, "pvemud: monitoring domain %u on Xen: CPUID, writes of %zu MSR%s%s\n",
                 domain, options.monitor_msrs.size(), options.monitor_msrs.size() == 1 ? "" : "s",
                 ports.c_str());
  }
  return absl::OkStatus();
#else
  return absl::UnimplementedError(
      "built without Xen support: install libxen-dev and reconfigure with -Dxen=enabled");
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options,
                                                      std::vector<std::string>* warnings) {
  auto daemon = std::make_unique<DaemonImpl>();
  RETURN_IF_ERROR(daemon->Init(options, warnings));
  return std::unique_ptr<Daemon>(std::move(daemon));
}

}  // namespace pvemu::server
