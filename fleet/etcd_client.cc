#include "fleet/etcd_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/textproto.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace pvemu::fleet {
namespace {

// "HOST:PORT" as numeric addresses: IP literals as they are, names through
// the resolver (once, at start). gRPC's ipv4:/ipv6: targets take a list of
// addresses, which its round-robin policy then spreads calls over.
absl::StatusOr<std::string> Target(const std::vector<std::string>& endpoints) {
  std::vector<std::string> v4, v6;
  for (const std::string& ep : endpoints) {
    const size_t colon = ep.rfind(':');
    std::string host = ep.substr(0, colon);
    const std::string port = ep.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0 || res == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--fleet: cannot resolve etcd endpoint ", ep, ": ", gai_strerror(rc)));
    }
    char text[INET6_ADDRSTRLEN] = {0};
    if (res->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, text,
                sizeof(text));
      v4.push_back(absl::StrCat(text, ":", port));
    } else {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr, text,
                sizeof(text));
      v6.push_back(absl::StrCat("[", text, "]:", port));
    }
    freeaddrinfo(res);
  }
  if (!v4.empty() && !v6.empty()) {
    return absl::InvalidArgumentError(
        "--fleet: the etcd endpoints mix IPv4 and IPv6 addresses; give one family");
  }
  return v4.empty() ? absl::StrCat("ipv6:", absl::StrJoin(v6, ","))
                    : absl::StrCat("ipv4:", absl::StrJoin(v4, ","));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(const EtcdOptions& options) {
  std::unique_ptr<EtcdClient> client(new EtcdClient());
  client->name_ = absl::StrCat("etcd at ", absl::StrJoin(options.endpoints, ","));
  ASSIGN_OR_RETURN(std::string target, Target(options.endpoints));
  grpc::ChannelArguments args;
  args.SetLoadBalancingPolicyName("round_robin");
  // A member that comes back is retried at least every 5 s, whatever gRPC's
  // default (120 s): a host converges within 15 s of etcd's return.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  // Notice a member that vanished without closing its connection (a
  // partition) while a watch waits for events. etcd refuses pings more
  // often than every 5 s.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Answers of any size, as etcd's own client takes (clientv3:
  // math.MaxInt32), not gRPC's default 4 MiB. etcd takes a value up to its
  // --max-request-bytes (1.5 MiB by default) but sends answers of any size:
  // the read of all this host's keys in one Txn (GetAll) or a WatchResponse
  // holding several of its values can pass 4 MiB with three layers near
  // etcd's limit, and the host would then never sync (the same answer fails
  // every retry). What a host reads is bounded by what etcd holds under its
  // keys, that is by the etcd writers, who are trusted with its policy.
  args.SetMaxReceiveMessageSize(-1);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options.ca_file.empty()) {
    grpc::SslCredentialsOptions tls;
    RETURN_IF_ERROR(ReadFileToString(options.ca_file, &tls.pem_root_certs));
    if (!options.cert_file.empty() || !options.key_file.empty()) {
      if (options.cert_file.empty() || options.key_file.empty()) {
        return absl::InvalidArgumentError(
            "--fleet-cert and --fleet-key go together: the client certificate and its key");
      }
      RETURN_IF_ERROR(ReadFileToString(options.cert_file, &tls.pem_cert_chain));
      RETURN_IF_ERROR(ReadFileToString(options.key_file, &tls.pem_private_key));
    }
    // The certificate names the endpoint as the operator wrote it, not the
    // address it resolved to.
    const std::string& first = options.endpoints.front();
    args.SetSslTargetNameOverride(first.substr(0, first.rfind(':')));
    creds = grpc::SslCredentials(tls);
  } else {
    if (!options.cert_file.empty() || !options.key_file.empty()) {
      return absl::InvalidArgumentError(
          "--fleet-cert/--fleet-key need --fleet-ca: the CA that signs etcd's certificate "
          "(TLS is used when a CA is given)");
    }
    creds = grpc::InsecureChannelCredentials();
  }
  client->channel_ = grpc::CreateCustomChannel(target, creds, args);
  client->kv_ = etcdserverpb::KV::NewStub(client->channel_);
  client->watch_ = etcdserverpb::Watch::NewStub(client->channel_);
  client->lease_ = etcdserverpb::Lease::NewStub(client->channel_);
  return client;
}

void EtcdClient::Prepare(grpc::ClientContext* context, absl::Duration timeout) {
  // etcd's own "require leader" marker (clientv3.WithRequireLeader).
  context->AddMetadata("hasleader", "true");
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  }
}

absl::Status EtcdClient::Error(const grpc::Status& status, absl::string_view what) const {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(name_, ": ", what, ": ",
                                   status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                       ? "no answer in time (no quorum, or no member reachable)"
                                       : status.error_message()));
}

template <typename Stub, typename Request, typename Response>
absl::Status EtcdClient::Unary(
    Stub& stub, grpc::Status (Stub::*call)(grpc::ClientContext*, const Request&, Response*),
    const Request& request, Response* response, absl::Duration timeout,
    absl::string_view what) const {
  grpc::ClientContext context;
  Prepare(&context, timeout);
  grpc::Status status = (stub.*call)(&context, request, response);
  return status.ok() ? absl::OkStatus() : Error(status, what);
}

namespace {

// A read is safe to repeat: an election in progress ("leader changed", "no
// leader": UNAVAILABLE) is waited out within the timeout, as etcd's own
// client does. Whether a read that failed with `status` is tried again
// before `deadline`, after sleeping until then.
constexpr absl::Duration kReadRetryPause = absl::Milliseconds(100);
bool PauseToRetry(const grpc::Status& status, absl::Time deadline) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
      absl::Now() + kReadRetryPause >= deadline) {
    return false;
  }
  absl::SleepFor(kReadRetryPause);
  return true;
}

// `call(context)` makes one attempt; PauseToRetry decides on another.
template <typename Call>
grpc::Status ReadRetrying(absl::Duration timeout, Call call) {
  const absl::Time deadline = absl::Now() + timeout;
  grpc::Status status;
  do {
    grpc::ClientContext context;
    EtcdClient::Prepare(&context, std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    status = call(&context);
  } while (PauseToRetry(status, deadline));
  return status;
}

RangeResult ToRangeResult(int64_t revision, const etcdserverpb::RangeResponse& response) {
  RangeResult out;
  out.revision = revision;
  for (const mvccpb::KeyValue& kv : response.kvs()) {
    out.kvs.push_back(KeyValue::From(kv));
  }
  return out;
}

}  // namespace

absl::StatusOr<RangeResult> EtcdClient::Get(const std::string& key, const std::string& range_end,
                                            int64_t revision, absl::Duration timeout) const {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  if (!range_end.empty()) request.set_range_end(range_end);
  request.set_revision(revision);
  etcdserverpb::RangeResponse response;
  const grpc::Status status = ReadRetrying(timeout, [&](grpc::ClientContext* context) {
    return kv_->Range(context, request, &response);
  });
  if (!status.ok()) {
    return Error(status, absl::StrCat("reading ", key, range_end.empty() ? "" : "*",
                                      revision > 0 ? absl::StrCat(" at revision ", revision) : ""));
  }
  return ToRangeResult(response.header().revision(), response);
}

EtcdClient::PendingGet::PendingGet(const EtcdClient& client, std::string key,
                                   absl::Duration timeout)
    : client_(client), key_(std::move(key)), deadline_(absl::Now() + timeout) {
  request_.set_key(key_);
  Prepare(&context_, timeout);
  client_.kv_->async()->Range(&context_, &request_, &response_, [this](grpc::Status status) {
    status_ = std::move(status);
    done_.Notify();
  });
}

EtcdClient::PendingGet::~PendingGet() {
  // The callback writes into this object: it must have run before it goes.
  if (!waited_) context_.TryCancel();
  done_.WaitForNotification();
}

absl::StatusOr<RangeResult> EtcdClient::PendingGet::Wait() {
  waited_ = true;
  done_.WaitForNotification();
  if (status_.ok()) return ToRangeResult(response_.header().revision(), response_);
  // An election in progress: the rest of the time goes to Get's retries.
  if (PauseToRetry(status_, deadline_)) return client_.Get(key_, "", 0, deadline_ - absl::Now());
  return client_.Error(status_, absl::StrCat("reading ", key_));
}

std::unique_ptr<EtcdClient::PendingGet> EtcdClient::StartGet(const std::string& key,
                                                             absl::Duration timeout) const {
  return std::unique_ptr<PendingGet>(new PendingGet(*this, key, timeout));
}

absl::StatusOr<std::vector<RangeResult>> EtcdClient::GetAll(const std::vector<KeyRange>& ranges,
                                                            int64_t revision,
                                                            absl::Duration timeout) const {
  // A transaction with no compare runs its success branch: every read in it
  // at one revision, in one round trip.
  etcdserverpb::TxnRequest request;
  for (const KeyRange& range : ranges) {
    etcdserverpb::RangeRequest* r = request.add_success()->mutable_request_range();
    r->set_key(range.key);
    if (!range.range_end.empty()) r->set_range_end(range.range_end);
    r->set_revision(revision);
  }
  etcdserverpb::TxnResponse response;
  const grpc::Status status = ReadRetrying(timeout, [&](grpc::ClientContext* context) {
    return kv_->Txn(context, request, &response);
  });
  if (!status.ok()) {
    return Error(status, absl::StrCat("reading ", ranges.size(), " key ranges",
                                      revision > 0 ? absl::StrCat(" at revision ", revision) : ""));
  }
  std::vector<RangeResult> out;
  for (const etcdserverpb::ResponseOp& op : response.responses()) {
    out.push_back(ToRangeResult(response.header().revision(), op.response_range()));
  }
  if (out.size() != ranges.size()) {
    return absl::InternalError(absl::StrCat(name_, ": a read of ", ranges.size(),
                                            " key ranges answered ", out.size()));
  }
  return out;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& request,
                                                          absl::Duration timeout) const {
  etcdserverpb::TxnResponse response;
  RETURN_IF_ERROR(Unary(*kv_, &etcdserverpb::KV::Stub::Txn, request, &response, timeout,
                        "transaction"));
  return response;
}

absl::StatusOr<int64_t> EtcdClient::Put(const std::string& key, const std::string& value,
                                        int64_t lease, absl::Duration timeout) const {
  etcdserverpb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  RETURN_IF_ERROR(Unary(*kv_, &etcdserverpb::KV::Stub::Put, request, &response, timeout,
                        absl::StrCat("writing ", key)));
  return response.header().revision();
}

absl::StatusOr<int64_t> EtcdClient::LeaseGrant(int64_t ttl_seconds, absl::Duration timeout) const {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  RETURN_IF_ERROR(Unary(*lease_, &etcdserverpb::Lease::Stub::LeaseGrant, request, &response,
                        timeout, "granting a lease"));
  if (!response.error().empty()) {
    return absl::UnavailableError(absl::StrCat(name_, ": granting a lease: ", response.error()));
  }
  return response.id();
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAliveOnce(int64_t id, absl::Duration timeout) const {
  grpc::ClientContext context;
  Prepare(&context, timeout);
  auto stream = lease_->LeaseKeepAlive(&context);
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(id);
  etcdserverpb::LeaseKeepAliveResponse response;
  const bool ok = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  if (!ok) {
    context.TryCancel();
    grpc::Status status = stream->Finish();
    return Error(status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended")
                             : status,
                 "keeping the status lease alive");
  }
  context.TryCancel();
  (void)stream->Finish();
  return response.ttl();
}

absl::Status EtcdClient::LeaseRevoke(int64_t id, absl::Duration timeout) const {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(id);
  etcdserverpb::LeaseRevokeResponse response;
  return Unary(*lease_, &etcdserverpb::Lease::Stub::LeaseRevoke, request, &response, timeout,
               "revoking the status lease");
}

}  // namespace pvemu::fleet
