// What of a policy decision Xen lets pvemud carry out, for the Explain RPC
// on a `--host=xen` daemon: the sentence `pvemuctl explain` prints as
// "on this host: ...", from what the daemon monitors (--monitor-domain,
// --monitor-msrs, --monitor-ports). Pure; no Xen headers.
#ifndef PVEMU_ENFORCE_XEN_ENFORCEMENT_H_
#define PVEMU_ENFORCE_XEN_ENFORCEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "x86/port_span.h"

namespace pvemu::enforce {

struct XenMonitoring {
  std::vector<uint32_t> domains;  // --monitor-domain
  std::vector<uint32_t> msrs;     // --monitor-msrs
  std::vector<x86::PortSpan> ports;    // --monitor-ports
};

// For an MSR read or write of `msr` by `domain`.
std::string XenMsrNote(const XenMonitoring& m, uint32_t domain, uint32_t msr, bool write);
// For an IN/OUT of `width` bytes at `port` by `domain`.
std::string XenPortNote(const XenMonitoring& m, uint32_t domain, uint16_t port, uint8_t width);

}  // namespace pvemu::enforce

#endif  // PVEMU_ENFORCE_XEN_ENFORCEMENT_H_
