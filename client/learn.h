// The learning loop's client half (README, "From learning to enforcing"):
// drafting rules from what learning domains did (`suggest` on captures or
// on pvemud's learned list) and checking a candidate policy against
// recorded traffic (`replay --changes`, `policy apply --dry-run --against`).
#ifndef PVEMU_CLIENT_LEARN_H_
#define PVEMU_CLIENT_LEARN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "policy/learn_draft.h"
#include "pvemu/v1/policy.pb.h"
#include "pvemu/v1/service.pb.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::client {

// Whether `path` is a trap log pvemu wrote (a capture, an import): its
// first bytes are a PVTRAPS magic, or it is a .textproto trap log.
bool IsTrapLog(const std::string& path);

// Reads the trap log at `path`: each record a learning domain got relaxed
// goes to `learned` (its domain replaced by `domain` when set); every other
// record to `other`. A truncated or damaged log is an error that names the
// file and the byte offset (TrapLogReader).
absl::Status ReadCapture(const std::string& path, std::optional<uint32_t> domain,
                         policy::LearnedDrafter* learned,
                         const std::function<void(pvemu::v1::TrapRecord&&)>& other);

// Prints the layers `learned` drafts (text, after `header`), or one JSON
// line per layer.
void PrintLearnedDraft(const pvemu::v1::Policy& draft, const std::string& header);

// suggest --server=ADDR [--domain=N]: drafts from pvemud's learned list.
int RunSuggestFromServer();

// replay --changes CAPTURE... (--policy=CANDIDATE offline, or --server for
// the daemon's live policy): the exit code (0 nothing changes, 2 something
// does, 1 an error).
int RunReplayChanges(const std::vector<std::string>& captures);

// policy apply -f FILE [--domain=N|default] --dry-run --against=CAPTURE...:
// the same report for the policy pvemud would compose with FILE; applies
// nothing. The exit code as RunReplayChanges.
int RunApplyDryRun(const std::string& textproto, const std::string& source_name,
                   const pvemu::v1::LayerRef* layer);

}  // namespace pvemu::client

#endif  // PVEMU_CLIENT_LEARN_H_
