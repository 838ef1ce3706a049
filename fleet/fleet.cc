#include "fleet/fleet.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "policy/vendor_proto.h"
#include "x86/vendor.h"

namespace pvemu::fleet {
namespace {

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_sec, t, absl::UTCTimeZone());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Fleet>> Fleet::Start(const FleetOptions& options,
                                                    policy::Store& store,
                                                    policy::LoadedPolicy base,
                                                    std::vector<std::string>* warnings) {
  ASSIGN_OR_RETURN(FleetUrl url, ParseFleetUrl(options.url));
  std::string host_id = options.host_id;
  if (host_id.empty()) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    host_id = name;
  }
  if (absl::Status s = CheckName(host_id, "--host-id"); !s.ok()) return s;
  for (const std::string& c : options.classes) {
    if (absl::Status s = CheckName(c, "--host-class"); !s.ok()) return s;
  }
  std::unique_ptr<Fleet> fleet(new Fleet());
  fleet->classes_ = options.classes;
  EtcdOptions etcd_options{url.endpoints, options.ca_file, options.cert_file, options.key_file};
  ASSIGN_OR_RETURN(fleet->etcd_, EtcdClient::Create(etcd_options));
  fleet->applier_ = std::make_unique<Applier>(store, std::move(base),
                                              FleetKeys(url.prefix, host_id, options.classes),
                                              options.state_dir, url.ToString());
  fleet->applier_->LoadLastGood(warnings);
  fleet->watcher_ = std::make_unique<Watcher>(*fleet->etcd_, *fleet->applier_);
  v1::FleetRegistration self;
  self.set_id(host_id);
  for (const std::string& c : options.classes) self.add_classes(c);
  self.set_vendor(
      absl::AsciiStrToLower(std::string(x86::VendorWord(policy::FromProto(store.host_vendor())))));
  self.set_version(options.version);
  fleet->keeper_ = std::make_unique<StatusKeeper>(*fleet->etcd_, *fleet->applier_, self);
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  fleet->editor_ = std::make_unique<Editor>(*fleet->etcd_, *fleet->applier_,
                                            fleet->watcher_.get(), name);
  fleet->watcher_->Start();
  fleet->keeper_->Start();
  return fleet;
}

Fleet::~Fleet() { Stop(); }

void Fleet::Stop() {
  if (keeper_ != nullptr) keeper_->Stop();
  if (watcher_ != nullptr) watcher_->Stop();
}

bool Fleet::WaitFirstSync(absl::Duration timeout) const {
  return applier_->WaitSeen(1, timeout);
}

v1::FleetSelf Fleet::Self() const {
  HostView view = applier_->View();
  v1::FleetSelf self;
  self.set_id(keys().host_id());
  for (const std::string& c : classes_) self.add_classes(c);
  self.set_endpoints(applier_->url());
  self.set_applied_revision(view.applied_revision);
  if (view.last_error.has_value()) *self.mutable_last_error() = *view.last_error;
  if (view.stale_since.has_value()) self.set_stale_since(Rfc3339(*view.stale_since));
  return self;
}

v1::FleetStatusResponse Fleet::Status() {
  const FleetKeys& k = keys();
  constexpr absl::Duration kTimeout = absl::Seconds(3);
  absl::StatusOr<RangeResult> hosts =
      etcd_->Get(k.RegistrationPrefix(), PrefixEnd(k.RegistrationPrefix()), 0, kTimeout);
  absl::StatusOr<RangeResult> statuses =
      hosts.ok() ? etcd_->Get(k.StatusPrefix(), PrefixEnd(k.StatusPrefix()), hosts->revision,
                              kTimeout)
                 : absl::StatusOr<RangeResult>(hosts.status());
  const v1::FleetSelf self = Self();
  absl::MutexLock lock(&view_mu_);
  if (!statuses.ok()) {
    // etcd is unreachable: the last view, marked stale, with this host's
    // own state as it is now.
    v1::FleetStatusResponse stale = last_view_;
    stale.set_stale(true);
    stale.set_endpoints(applier_->url());
    stale.set_stale_since(self.stale_since().empty() ? Rfc3339(absl::Now()) : self.stale_since());
    bool found = false;
    for (v1::FleetHost& h : *stale.mutable_hosts()) {
      if (h.id() != self.id()) continue;
      found = true;
      h.set_applied_revision(self.applied_revision());
      h.set_stale_since(stale.stale_since());
      *h.mutable_last_error() = self.last_error();
      if (!self.has_last_error()) h.clear_last_error();
    }
    if (!found) {
      v1::FleetHost* h = stale.add_hosts();
      h->set_id(self.id());
      *h->mutable_classes() = self.classes();
      h->set_alive(true);
      h->set_applied_revision(self.applied_revision());
      h->set_stale_since(stale.stale_since());
      if (self.has_last_error()) *h->mutable_last_error() = self.last_error();
    }
    return stale;
  }
  std::map<std::string, v1::FleetHost> by_id;
  for (const KeyValue& kv : hosts->kvs) {
    v1::FleetRegistration reg;
    if (!FromJson(kv.value, &reg).ok()) continue;
    v1::FleetHost& h = by_id[reg.id()];
    h.set_id(reg.id());
    *h.mutable_classes() = reg.classes();
    h.set_vendor(reg.vendor());
    h.set_version(reg.version());
    h.set_first_seen(reg.first_seen());
  }
  for (const KeyValue& kv : statuses->kvs) {
    const std::string id = kv.key.substr(k.StatusPrefix().size());
    v1::FleetHostStatus st;
    if (!FromJson(kv.value, &st).ok()) continue;
    auto it = by_id.find(id);
    if (it == by_id.end()) continue;
    it->second.set_alive(true);
    it->second.set_applied_revision(st.applied_revision());
    it->second.set_stale_since(st.stale_since());
    if (st.has_last_error()) *it->second.mutable_last_error() = st.last_error();
  }
  // This host knows its own state better than its last status write.
  if (auto it = by_id.find(self.id()); it != by_id.end()) {
    it->second.set_alive(true);
    it->second.set_applied_revision(self.applied_revision());
    it->second.set_stale_since(self.stale_since());
    it->second.clear_last_error();
    if (self.has_last_error()) *it->second.mutable_last_error() = self.last_error();
  }
  v1::FleetStatusResponse out;
  out.set_revision(statuses->revision);
  out.set_endpoints(applier_->url());
  for (auto& [id, h] : by_id) *out.add_hosts() = std::move(h);
  last_view_ = out;
  return out;
}

absl::StatusOr<v1::GetLayerResponse> Fleet::GetLayer(const LevelName& layer) const {
  return editor_->Get(layer);
}

absl::StatusOr<v1::FleetEditResponse> Fleet::Edit(const LevelEdit& edit) {
  return editor_->Edit(edit);
}

}  // namespace pvemu::fleet
