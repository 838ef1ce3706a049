#include "client/cli.h"

#include <chrono>
#include <cmath>

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/flags.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "x86/msr_catalog.h"
#include "base/textproto.h"

namespace pvemu::client {

bool JsonOutput() { return absl::GetFlag(FLAGS_o) == "json"; }

std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out.push_back(c);  // UTF-8 passes through as it is
        }
    }
  }
  out.push_back('"');
  return out;
}

JsonLine& JsonLine::Set(absl::string_view key, std::string json) {
  for (auto& [k, v] : fields_) {
    if (k == key) {
      v = std::move(json);
      return *this;
    }
  }
  fields_.emplace_back(std::string(key), std::move(json));
  return *this;
}

JsonLine& JsonLine::Str(absl::string_view key, absl::string_view value) {
  return Set(key, JsonQuote(value));
}

JsonLine& JsonLine::Hex(absl::string_view key, uint64_t value) {
  return Str(key, HexString(value));
}

JsonLine& JsonLine::Num(absl::string_view key, double value) {
  // Whole numbers print as integers (counts, domains, generations), as a
  // JSON reader expects them; others with the precision a double has.
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 9.007199254740992e15) {
    return Set(key, absl::StrFormat("%.0f", value));
  }
  return Set(key, std::isfinite(value) ? absl::StrFormat("%.17g", value) : std::string("null"));
}

JsonLine& JsonLine::Bool(absl::string_view key, bool value) {
  return Set(key, value ? "true" : "false");
}

JsonLine& JsonLine::Null(absl::string_view key) { return Set(key, "null"); }

JsonLine& JsonLine::Obj(absl::string_view key, const JsonLine& value) {
  return Set(key, value.Render());
}

JsonLine& JsonLine::StrList(absl::string_view key, const std::vector<std::string>& values) {
  std::string json = "[";
  for (const std::string& v : values) {
    if (json.size() > 1) json.push_back(',');
    json += JsonQuote(v);
  }
  json.push_back(']');
  return Set(key, std::move(json));
}

std::string JsonLine::RenderMembers() const {
  std::string out;
  for (const auto& [key, json] : fields_) {
    if (!out.empty()) out.push_back(',');
    absl::StrAppend(&out, JsonQuote(key), ":", json);
  }
  return out;
}

std::string JsonLine::Render() const { return absl::StrCat("{", RenderMembers(), "}"); }

void JsonLine::Print() const {
  std::string out = Render();
  out.push_back('\n');
  std::fwrite(out.data(), 1, out.size(), stdout);
}

std::string HexString(uint64_t value) { return absl::StrCat("0x", absl::Hex(value)); }

absl::StatusOr<uint64_t> ParseNumber(absl::string_view text, absl::string_view what) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  uint64_t value = 0;
  bool ok = false;
  if (absl::StartsWithIgnoreCase(t, "0x")) {
    t.remove_prefix(2);
    ok = !t.empty() && absl::SimpleHexAtoi(t, &value) &&
         t.find_first_not_of("0123456789abcdefABCDEF") == absl::string_view::npos;
  } else {
    ok = !t.empty() && t.find_first_not_of("0123456789") == absl::string_view::npos &&
         absl::SimpleAtoi(t, &value);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": '", text, "' is not a number; use decimal or 0x hex within 64 bits"));
  }
  return value;
}

absl::StatusOr<uint32_t> ParseNumber32(absl::string_view text, absl::string_view what) {
  absl::StatusOr<uint64_t> v = ParseNumber(text, what);
  if (!v.ok()) return v.status();
  if (*v > 0xffffffffu) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", text, " does not fit in 32 bits"));
  }
  return static_cast<uint32_t>(*v);
}

absl::StatusOr<uint32_t> ParseMsrArg(absl::string_view text, absl::string_view what) {
  absl::StatusOr<uint32_t> msr = x86::ParseMsr(text);
  if (!msr.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", msr.status().message()));
  }
  return msr;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "pvemuctl: %s\n", std::string(status.message()).c_str());
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    default:
      return kExitInvalid;
  }
}

int UsageError(absl::string_view message) {
  std::fprintf(stderr, "pvemuctl: %s\nRun 'pvemuctl --help' for usage.\n",
               std::string(message).c_str());
  return kExitUsage;
}

std::string ServerAddress() {
  std::string server = absl::GetFlag(FLAGS_server);
  if (!server.empty()) return server;
  if (const char* env = std::getenv("PVEMU_SERVER"); env != nullptr && *env != 0) {
    return env;
  }
  return "unix:///run/pvemu/pvemu.sock";
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach pvemud at ", ServerAddress(), ": ", status.error_message(),
        " (is pvemud running? set --server or $PVEMU_SERVER)"));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

void SetDeadline(grpc::ClientContext* context) {
  absl::StatusOr<uint64_t> seconds = ParseNumber(absl::GetFlag(FLAGS_timeout), "--timeout");
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(seconds.ok() ? *seconds : 10));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect() {
  std::string address = ServerAddress();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  if (absl::StartsWith(address, "unix:")) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  // TCP: the daemon only serves TLS with client certificates there.
  grpc::SslCredentialsOptions tls;
  for (auto [flag, field] : {std::pair{absl::GetFlag(FLAGS_tls_ca), &tls.pem_root_certs},
                             std::pair{absl::GetFlag(FLAGS_tls_cert), &tls.pem_cert_chain},
                             std::pair{absl::GetFlag(FLAGS_tls_key), &tls.pem_private_key}}) {
    if (flag.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--server=", address, " is TCP, which pvemud serves only over TLS with "
          "client certificates: give --tls-ca, --tls-cert and --tls-key, or use "
          "unix:///path"));
    }
    absl::Status read = ReadFileToString(flag, field);
    if (!read.ok()) return read;
  }
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(tls), args);
}

}  // namespace pvemu::client
