#include "server/rpc_common.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pvemu::server {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels percent-encoded in a trailer, and clients refuse
  // metadata over 8 KiB with a transport error that hides this status. Long
  // messages echo the caller's input (an MSR "name" of megabytes); cut them.
  constexpr size_t kMaxMessage = 2048;
  absl::string_view message = status.message();
  if (message.size() > kMaxMessage) {
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        absl::StrCat(message.substr(0, kMaxMessage), "... (",
                                     message.size() - kMaxMessage, " more bytes)"));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(message));
}

grpc::Status Denied(absl::string_view what, const Authorizer& auth,
                    const grpc::ServerContext& context) {
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(what, " is not allowed for ", auth.Describe(context),
                                   "; ask an operator to add you to pvemud's --",
                                   what == "reading" ? "readers" : "editors", " list"));
}

bool Allowed(const Authorizer& auth, const grpc::ServerContext& context, bool edit) {
  const Role role = auth.RoleOf(context);
  return role != Role::kNone && (!edit || role == Role::kEditor);
}

}  // namespace pvemu::server
