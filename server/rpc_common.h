// What every gRPC service of pvemud shares: absl::Status to grpc::Status (the
// one place the two meet) and the role check each RPC makes first.
#ifndef PVEMU_SERVER_RPC_COMMON_H_
#define PVEMU_SERVER_RPC_COMMON_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/auth.h"

namespace pvemu::server {

grpc::Status ToGrpc(const absl::Status& status);

// The refusal every service gives a peer without the role: `what` is
// "reading" or "editing", and the message names the peer and the flag that
// grants the role.
grpc::Status Denied(absl::string_view what, const Authorizer& auth,
                    const grpc::ServerContext& context);
// Whether the peer may read (edit false) or edit (edit true): editors may
// also read.
bool Allowed(const Authorizer& auth, const grpc::ServerContext& context, bool edit);

// The first line of an RPC that needs `role_needed` (Role::kReader or
// Role::kEditor): returns Denied(what, ...) to a peer without it. Readers and
// editors may read; only editors may change anything. Expects the service's
// `auth_` member and the RPC's `context` argument.
#define REQUIRE_ROLE(role_needed, what)                                          \
  do {                                                                           \
    if (!::pvemu::server::Allowed(auth_, *context, role_needed == Role::kEditor)) { \
      return ::pvemu::server::Denied(what, auth_, *context);                     \
    }                                                                            \
  } while (0)

// After REQUIRE_ROLE in a long-lived stream: declares `hold_name`, this
// stream's place among the peer's --max-streams-per-peer, or returns
// RESOURCE_EXHAUSTED naming the peer and the limit.
#define HOLD_STREAM(hold_name, rpc)                                    \
  auto hold_name = auth_.HoldStream(*context, rpc);                    \
  if (!hold_name.ok()) return ::pvemu::server::ToGrpc(hold_name.status())

}  // namespace pvemu::server

#endif  // PVEMU_SERVER_RPC_COMMON_H_
