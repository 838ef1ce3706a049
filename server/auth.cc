#include "server/auth.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/server_context.h"

namespace pvemu::server {

bool AllowList::Contains(const PeerCred& cred) const {
  return std::find(uids.begin(), uids.end(), cred.uid) != uids.end() ||
         std::find(gids.begin(), gids.end(), cred.gid) != gids.end();
}

absl::StatusOr<AllowList> ParseAllowList(absl::string_view spec,
                                         absl::string_view flag_name) {
  AllowList list;
  for (absl::string_view entry :
       absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const bool is_uid = absl::ConsumePrefix(&entry, "uid:");
    const bool is_gid = !is_uid && absl::ConsumePrefix(&entry, "gid:");
    if (is_uid || is_gid) {
      uint32_t id = 0;
      if (!absl::SimpleAtoi(entry, &id)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag_name, ": '", entry,
            "' is not a number; uid: and gid: take a decimal id, e.g. uid:1000"));
      }
      (is_uid ? list.uids : list.gids).push_back(id);
    } else if (absl::ConsumePrefix(&entry, "@")) {
      const struct group* gr = getgrnam(std::string(entry).c_str());
      if (gr == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag_name, ": no group named '", entry,
            "'; use @GROUP, gid:N, USER or uid:N separated by commas"));
      }
      list.gids.push_back(gr->gr_gid);
    } else {
      const struct passwd* pw = getpwnam(std::string(entry).c_str());
      if (pw == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag_name, ": no user named '", entry,
            "'; use USER, uid:N, @GROUP or gid:N separated by commas"));
      }
      list.uids.push_back(pw->pw_uid);
    }
  }
  return list;
}

void PeerTable::Set(int fd, const PeerCred& cred) {
  absl::MutexLock lock(&mu_);
  by_fd_[fd] = cred;
}

bool PeerTable::Lookup(absl::string_view peer, PeerCred* cred) const {
  int fd = -1;
  if (!absl::ConsumePrefix(&peer, "fd:") || !absl::SimpleAtoi(peer, &fd)) {
    return false;
  }
  absl::MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return false;
  *cred = it->second;
  return true;
}

Role Authorizer::RoleOf(const grpc::ServerContext& context) const {
  PeerCred cred;
  if (peers_ != nullptr && peers_->Lookup(context.peer(), &cred)) {
    if (cred.uid == 0 || editors_.Contains(cred)) return Role::kEditor;
    if (readers_.Contains(cred)) return Role::kReader;
    return Role::kNone;
  }
  // Not a Unix-socket connection: only TLS listeners exist besides it, and
  // they require and verify a client certificate before any call arrives.
  auto auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) return Role::kEditor;
  return Role::kNone;
}

std::string Authorizer::Describe(const grpc::ServerContext& context) const {
  PeerCred cred;
  if (peers_ != nullptr && peers_->Lookup(context.peer(), &cred)) {
    return absl::StrCat("uid=", cred.uid, " gid=", cred.gid, " pid=", cred.pid);
  }
  return absl::StrCat("tls:", context.peer());
}

std::string Authorizer::PeerKey(const grpc::ServerContext& context) const {
  PeerCred cred;
  if (peers_ != nullptr && peers_->Lookup(context.peer(), &cred)) {
    return absl::StrCat("uid ", cred.uid);
  }
  auto auth = context.auth_context();
  if (auth != nullptr) {
    std::vector<grpc::string_ref> names = auth->GetPeerIdentity();
    if (!names.empty()) {
      return absl::StrCat("TLS client ", absl::string_view(names.front().data(), names.front().size()));
    }
  }
  return absl::StrCat("TLS peer ", context.peer());
}

absl::StatusOr<StreamHold> Authorizer::HoldStream(const grpc::ServerContext& context,
                                                  absl::string_view rpc) const {
  return streams_.Admit(PeerKey(context), rpc);
}

pid_t Authorizer::PeerPid(const grpc::ServerContext& context) const {
  PeerCred cred;
  if (peers_ != nullptr && peers_->Lookup(context.peer(), &cred)) return cred.pid;
  return 0;
}

}  // namespace pvemu::server
