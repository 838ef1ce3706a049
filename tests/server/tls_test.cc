// TCP listening: TLS with client certificates, nothing else. A client with a
// certificate signed by --tls-client-ca is served (as an editor); a client
// without one, or with one from another CA, never gets an answer.
// Certificates are made with the openssl command in a temp dir.
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "base/textproto.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

// Makes a CA and a certificate signed by it for `cn` (with 127.0.0.1 as a
// subject alternative name). Returns false if openssl is missing or fails.
bool MakeCa(const std::string& dir, const std::string& ca) {
  return std::system(absl::StrCat("cd ", dir, " && openssl req -x509 -newkey rsa:2048 -nodes "
                                  "-keyout ", ca, ".key -out ", ca, ".pem -days 2 -subj /CN=", ca,
                                  " >/dev/null 2>&1")
                         .c_str()) == 0;
}

bool MakeCert(const std::string& dir, const std::string& ca, const std::string& name) {
  std::ofstream(dir + "/" + name + ".ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  return std::system(absl::StrCat("cd ", dir, " && openssl req -newkey rsa:2048 -nodes -keyout ",
                                  name, ".key -out ", name, ".csr -subj /CN=", name,
                                  " >/dev/null 2>&1 && openssl x509 -req -in ", name,
                                  ".csr -CA ", ca, ".pem -CAkey ", ca, ".key -CAcreateserial -out ",
                                  name, ".pem -days 2 -extfile ", name, ".ext >/dev/null 2>&1")
                         .c_str()) == 0;
}

std::string Read(const std::string& path) {
  std::string text;
  EXPECT_TRUE(ReadFileToString(path, &text).ok()) << path;
  return text;
}

class TlsTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    certs_ = dir_;
    if (!MakeCa(certs_, "ca") || !MakeCert(certs_, "ca", "server") ||
        !MakeCert(certs_, "ca", "client") || !MakeCa(certs_, "otherca") ||
        !MakeCert(certs_, "otherca", "stranger")) {
      GTEST_SKIP() << "openssl could not make test certificates";
    }
    options_.tls_cert = certs_ + "/server.pem";
    options_.tls_key = certs_ + "/server.key";
    options_.tls_client_ca = certs_ + "/ca.pem";
    // A loopback port derived from the pid; the next ones if it is taken.
    absl::Status last;
    for (int attempt = 0; attempt < 10 && daemon_ == nullptr; ++attempt) {
      port_ = 20000 + (getpid() + attempt * 997) % 20000;
      options_.listen = absl::StrCat("127.0.0.1:", port_);
      std::vector<std::string> warnings;
      auto daemon = server::Daemon::Start(options_, &warnings);
      if (daemon.ok()) {
        daemon_ = std::move(*daemon);
      } else {
        last = daemon.status();
      }
    }
    ASSERT_NE(daemon_, nullptr) << last;
  }

  // GetStats through a TLS channel presenting `client` (empty: no cert).
  grpc::Status Call(const std::string& client) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = Read(certs_ + "/ca.pem");
    if (!client.empty()) {
      tls.pem_cert_chain = Read(certs_ + "/" + client + ".pem");
      tls.pem_private_key = Read(certs_ + "/" + client + ".key");
    }
    auto channel = grpc::CreateChannel(options_.listen, grpc::SslCredentials(tls));
    auto stub = v1::EmulatorService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::StatsResponse stats;
    return stub->GetStats(&context, v1::StatsRequest(), &stats);
  }

  std::string certs_;
  int port_ = 0;
};

TEST_F(TlsTest, ClientWithACertificateFromTheCaIsServed) {
  grpc::Status status = Call("client");
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(TlsTest, ClientWithoutACertificateIsRefused) {
  grpc::Status status = Call("");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsTest, ClientWithACertificateFromAnotherCaIsRefused) {
  grpc::Status status = Call("stranger");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

}  // namespace
}  // namespace pvemu::testing
