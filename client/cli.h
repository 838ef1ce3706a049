// What every pvemuctl command shares: exit codes, output (-o text|json),
// number parsing, and the connection to pvemud. See CLI.md.
#ifndef PVEMU_CLIENT_CLI_H_
#define PVEMU_CLIENT_CLI_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}

namespace pvemu::client {

// Exit statuses (CLI.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalid = 1;      // bad input, or a check failed
inline constexpr int kExitUsage = 2;        // the command line itself is wrong
inline constexpr int kExitUnreachable = 3;  // the server could not be reached

// Positional arguments after the command word(s).
using Args = std::vector<std::string>;

bool JsonOutput();  // -o json

// A JSON object built field by field, printed as one JSON Lines line with
// its keys in the order they were added, so every command's output has one
// stable key order (docs/CLI.md lists each shape in that order). Adding a key
// again replaces its value in place.
class JsonLine {
 public:
  JsonLine& Str(absl::string_view key, absl::string_view value);
  JsonLine& Hex(absl::string_view key, uint64_t value);  // "0x1b0"
  JsonLine& Num(absl::string_view key, double value);
  JsonLine& Bool(absl::string_view key, bool value);
  JsonLine& Null(absl::string_view key);
  JsonLine& Obj(absl::string_view key, const JsonLine& value);
  JsonLine& StrList(absl::string_view key, const std::vector<std::string>& values);
  // `json` is already JSON text (an array of objects, say).
  JsonLine& Raw(absl::string_view key, std::string json) { return Set(key, std::move(json)); }
  // Prints the object on one line of stdout.
  void Print() const;
  // The object as JSON text ("{...}").
  std::string Render() const;
  // The members without braces ("\"a\":1,\"b\":2"), for splicing.
  std::string RenderMembers() const;
  bool empty() const { return fields_.empty(); }

 private:
  JsonLine& Set(absl::string_view key, std::string json);
  std::vector<std::pair<std::string, std::string>> fields_;  // key, JSON text
};

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view text);

std::string HexString(uint64_t value);  // "0x1b0"

// Decimal or 0x hex; `what` names the flag or argument in the error.
absl::StatusOr<uint64_t> ParseNumber(absl::string_view text, absl::string_view what);
// A 32-bit number; out-of-range values are errors.
absl::StatusOr<uint32_t> ParseNumber32(absl::string_view text, absl::string_view what);
// An MSR: catalog name (any case) or number.
absl::StatusOr<uint32_t> ParseMsrArg(absl::string_view text, absl::string_view what);

// Prints "pvemuctl: MESSAGE" to stderr and returns the exit code that fits
// the status: kExitUnreachable for UNAVAILABLE/DEADLINE_EXCEEDED from a
// server, kExitUsage for a usage error, kExitInvalid otherwise.
int Fail(const absl::Status& status);
int UsageError(absl::string_view message);

// The daemon address: --server, else $PVEMU_SERVER, else the default socket.
std::string ServerAddress();
// A gRPC status as an absl::Status; UNAVAILABLE becomes "cannot reach
// pvemud at ADDR: ..." (exit 3 through Fail()).
absl::Status FromGrpc(const grpc::Status& status);

// A channel to pvemud (unix:// insecure with peer credentials; host:port TLS
// with --tls-ca/--tls-cert/--tls-key).
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect();

// Sets the --timeout deadline (default 10 seconds) on a call's context.
void SetDeadline(grpc::ClientContext* context);

}  // namespace pvemu::client

#endif  // PVEMU_CLIENT_CLI_H_
