#include "server/peer_limits.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pvemu::server {

StreamHold::~StreamHold() {
  if (limit_ != nullptr) limit_->Release(peer_);
}

absl::StatusOr<StreamHold> PeerStreamLimit::Admit(const std::string& peer,
                                                  absl::string_view rpc) {
  absl::MutexLock lock(&mu_);
  int& open = open_[peer];
  if (open >= per_peer_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        rpc, " refused: ", peer, " already holds ", open, " open streams, pvemud's limit per peer"
        " (--max-streams-per-peer=", per_peer_, "); close streams it no longer reads, or raise "
        "the limit"));
  }
  ++open;
  return StreamHold(this, peer);
}

int PeerStreamLimit::Open(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(peer);
  return it == open_.end() ? 0 : it->second;
}

void PeerStreamLimit::Release(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(peer);
  if (it == open_.end()) return;
  // A peer with nothing open leaves no entry: the table is as large as the
  // peers streaming now.
  if (--it->second <= 0) open_.erase(it);
}

}  // namespace pvemu::server
