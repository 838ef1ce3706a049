// pvemuctl's flags. Abseil flags are global, so they are all defined once
// (flags.cc) and each command reads the ones it documents.
#ifndef PVEMU_CLIENT_FLAGS_H_
#define PVEMU_CLIENT_FLAGS_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, o);
ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(std::string, policy);
ABSL_DECLARE_FLAG(std::string, host_profile);
ABSL_DECLARE_FLAG(std::string, host);
ABSL_DECLARE_FLAG(std::string, host_vendor);
ABSL_DECLARE_FLAG(std::string, domain);
ABSL_DECLARE_FLAG(std::string, vcpu);
ABSL_DECLARE_FLAG(std::string, cpl);
ABSL_DECLARE_FLAG(std::string, msr);
ABSL_DECLARE_FLAG(std::string, port);
ABSL_DECLARE_FLAG(uint32_t, width);
ABSL_DECLARE_FLAG(bool, kvm);
ABSL_DECLARE_FLAG(std::string, range);
ABSL_DECLARE_FLAG(std::string, write);
ABSL_DECLARE_FLAG(std::string, read);
ABSL_DECLARE_FLAG(std::string, value);
ABSL_DECLARE_FLAG(std::string, writable_mask);
ABSL_DECLARE_FLAG(std::string, if_generation);
ABSL_DECLARE_FLAG(std::string, bytes);
ABSL_DECLARE_FLAG(std::string, f);
ABSL_DECLARE_FLAG(std::string, from);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(bool, progress);
ABSL_DECLARE_FLAG(std::string, jobs);
ABSL_DECLARE_FLAG(std::string, count);
ABSL_DECLARE_FLAG(bool, msrs);
ABSL_DECLARE_FLAG(bool, learned);
ABSL_DECLARE_FLAG(bool, changes);
ABSL_DECLARE_FLAG(bool, dry_run);
ABSL_DECLARE_FLAG(std::vector<std::string>, against);
ABSL_DECLARE_FLAG(std::string, interval);
ABSL_DECLARE_FLAG(bool, once);
ABSL_DECLARE_FLAG(std::string, timeout);
ABSL_DECLARE_FLAG(std::string, layer);
ABSL_DECLARE_FLAG(std::string, if_revision);
ABSL_DECLARE_FLAG(std::string, rax);
ABSL_DECLARE_FLAG(std::string, rbx);
ABSL_DECLARE_FLAG(std::string, rcx);
ABSL_DECLARE_FLAG(std::string, rdx);
ABSL_DECLARE_FLAG(std::string, rsi);
ABSL_DECLARE_FLAG(std::string, rdi);
ABSL_DECLARE_FLAG(std::string, rip);
ABSL_DECLARE_FLAG(std::string, rflags);
ABSL_DECLARE_FLAG(std::string, host_tsc);

#endif  // PVEMU_CLIENT_FLAGS_H_
