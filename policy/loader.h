// Reading and validating policy files and messages. Every error reads
// "FILE:LINE:COL: message" (1-based) for text with positions, or
// "SOURCE:FIELD.PATH: message" for a message without them (gRPC), and says
// what to do. Errors are collected, not just the first (up to 8, so a flood
// of copies of one mistake stays readable and fits in a gRPC status), and
// returned as one InvalidArgument with one error per line.
//
// Thread-safety: free functions without shared state.
#ifndef PVEMU_POLICY_LOADER_H_
#define PVEMU_POLICY_LOADER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "policy/source_map.h"
#include "pvemu/v1/policy.pb.h"

namespace pvemu::policy {

// A policy and where its fields came from.
struct LoadedPolicy {
  pvemu::v1::Policy policy;
  SourceMap source;
};

// Parses text format and validates. `source_name` names the text in errors.
absl::StatusOr<LoadedPolicy> ParsePolicy(absl::string_view text,
                                         absl::string_view source_name);

// Reads, parses and validates a file (NotFound/PermissionDenied name it).
absl::StatusOr<LoadedPolicy> LoadPolicyFile(const std::string& path);

// Validates a parsed policy; `source` supplies positions (or only a name).
absl::Status ValidatePolicy(const pvemu::v1::Policy& policy, const SourceMap& source);

// Same for a message with no positions (e.g. from gRPC): errors read
// "SOURCE_NAME:domain[0].msr[2]: message".
absl::Status ValidatePolicy(const pvemu::v1::Policy& policy,
                            absl::string_view source_name);

}  // namespace pvemu::policy

#endif  // PVEMU_POLICY_LOADER_H_
