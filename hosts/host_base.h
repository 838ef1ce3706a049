// HostBase: what every host backend keeps the same way. The vendor, the
// description and the TSC frequency are found once, while the backend is
// built, and never change; HostBase holds them and answers the three
// emulator::Host accessors. The backends add the MSR, CPUID and port access.
#ifndef PVEMU_HOSTS_HOST_BASE_H_
#define PVEMU_HOSTS_HOST_BASE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "emulator/host.h"

namespace pvemu::hosts {

class HostBase : public emulator::Host {
 public:
  pvemu::v1::Vendor vendor() const final { return vendor_; }
  absl::string_view description() const final { return description_; }
  // 0 when the backend does not know it.
  uint64_t tsc_khz() const final { return tsc_khz_; }

 protected:
  HostBase() = default;

  // Set by the backend's factory before the host is handed out.
  pvemu::v1::Vendor vendor_ = pvemu::v1::VENDOR_UNSPECIFIED;
  std::string description_;
  uint64_t tsc_khz_ = 0;
};

}  // namespace pvemu::hosts

#endif  // PVEMU_HOSTS_HOST_BASE_H_
