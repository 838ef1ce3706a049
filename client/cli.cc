#include "client/cli.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/flags.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "x86/msr_catalog.h"
#include "base/textproto.h"

namespace pvemu::client {

bool JsonOutput() { return absl::GetFlag(FLAGS_o) == "json"; }

JsonLine& JsonLine::Str(absl::string_view key, absl::string_view value) {
  (*value_.mutable_fields())[std::string(key)].set_string_value(std::string(value));
  return *this;
}

JsonLine& JsonLine::Hex(absl::string_view key, uint64_t value) {
  return Str(key, HexString(value));
}

JsonLine& JsonLine::Num(absl::string_view key, double value) {
  (*value_.mutable_fields())[std::string(key)].set_number_value(value);
  return *this;
}

JsonLine& JsonLine::Bool(absl::string_view key, bool value) {
  (*value_.mutable_fields())[std::string(key)].set_bool_value(value);
  return *this;
}

JsonLine& JsonLine::Null(absl::string_view key) {
  (*value_.mutable_fields())[std::string(key)].set_null_value(
      google::protobuf::NULL_VALUE);
  return *this;
}

JsonLine& JsonLine::Obj(absl::string_view key, const JsonLine& value) {
  *(*value_.mutable_fields())[std::string(key)].mutable_struct_value() =
      value.value_;
  return *this;
}

void JsonLine::Print() const {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(value_, &out, options);
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
