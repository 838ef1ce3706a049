// Fleet mode over etcd's client TLS (--fleet-ca/--fleet-cert/--fleet-key):
// one etcd member serving https with --client-cert-auth, certificates made
// with the openssl command in a temp dir. A fleet-mode pvemud with the
// right CA and a client certificate serves a fleet edit; one with another
// CA, or without a client certificate, reaches nothing and says why.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pvemu/v1/service.grpc.pb.h"
#include "tests/fleet/etcd_cluster.h"
#include "tests/server/daemon_fixture.h"

namespace pvemu::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

bool Sh(const std::string& command) { return std::system(command.c_str()) == 0; }

bool MakeCa(const std::string& dir, const std::string& ca) {
  return Sh(absl::StrCat("cd ", dir, " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ", ca,
                         ".key -out ", ca, ".pem -days 2 -subj /CN=", ca, " >/dev/null 2>&1"));
}

bool MakeCert(const std::string& dir, const std::string& ca, const std::string& name) {
  std::ofstream(dir + "/" + name + ".ext")
      << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
      << "extendedKeyUsage=serverAuth,clientAuth\n";
  return Sh(absl::StrCat("cd ", dir, " && openssl req -newkey rsa:2048 -nodes -keyout ", name,
                         ".key -out ", name, ".csr -subj /CN=", name,
                         " >/dev/null 2>&1 && openssl x509 -req -in ", name, ".csr -CA ", ca,
                         ".pem -CAkey ", ca, ".key -CAcreateserial -out ", name,
                         ".pem -days 2 -extfile ", name, ".ext >/dev/null 2>&1"));
}

class FleetTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "/usr/bin/etcd is missing";
    dir_ = MakeTempDir();
    if (!MakeCa(dir_, "ca") || !MakeCert(dir_, "ca", "etcd") || !MakeCert(dir_, "ca", "client") ||
        !MakeCa(dir_, "otherca")) {
      GTEST_SKIP() << "openssl could not make test certificates";
    }
    const int client_port = FreePort(), peer_port = FreePort();
    endpoint_ = absl::StrCat("127.0.0.1:", client_port);
    std::vector<std::string> args = {
        "/usr/bin/etcd",
        "--name=tls",
        "--data-dir=" + dir_ + "/etcd",
        "--listen-client-urls=https://" + endpoint_,
        "--advertise-client-urls=https://" + endpoint_,
        absl::StrCat("--listen-peer-urls=http://127.0.0.1:", peer_port),
        absl::StrCat("--initial-advertise-peer-urls=http://127.0.0.1:", peer_port),
        absl::StrCat("--initial-cluster=tls=http://127.0.0.1:", peer_port),
        "--cert-file=" + dir_ + "/etcd.pem",
        "--key-file=" + dir_ + "/etcd.key",
        "--trusted-ca-file=" + dir_ + "/ca.pem",
        "--client-cert-auth",
        "--logger=zap",
        "--log-outputs=" + dir_ + "/etcd.log",
    };
    etcd_ = SpawnQuiet(std::move(args), dir_ + "/etcd.stderr");
    // etcdctl over the same TLS, bounded to 20 s.
    bool healthy = false;
    for (int i = 0; i < 40 && !healthy; ++i) {
      healthy = Etcdctl("endpoint health").status == 0;
      if (!healthy) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    ASSERT_TRUE(healthy) << "etcd with TLS did not come up; see " << dir_ << "/etcd.log";
  }
  void TearDown() override {
    if (daemon_ != nullptr) daemon_->Shutdown();
    daemon_.reset();
    if (etcd_ > 0) {
      kill(etcd_, SIGTERM);
      waitpid(etcd_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  CommandRun Etcdctl(const std::string& args) const {
    return RunCommand(absl::StrCat(
        "ETCDCTL_API=3 /usr/bin/etcdctl --dial-timeout=2s --command-timeout=5s --endpoints=",
        endpoint_, " --cacert=", dir_, "/ca.pem --cert=", dir_, "/client.pem --key=", dir_,
        "/client.key ", args));
  }

  absl::Status StartDaemon(const std::string& ca, const std::string& cert, const std::string& key) {
    server::DaemonOptions options;
    options.listen = absl::StrCat("unix://", dir_, "/h1.sock");
    options.state_dir = dir_ + "/state";
    options.fleet = "etcd://" + endpoint_;
    options.host_id = "h1";
    options.fleet_ca = ca;
    options.fleet_cert = cert;
    options.fleet_key = key;
    std::vector<std::string> warnings;
    auto daemon = server::Daemon::Start(options, &warnings);
    if (!daemon.ok()) return daemon.status();
    daemon_ = std::move(*daemon);
    auto channel = grpc::CreateChannel(options.listen, grpc::InsecureChannelCredentials());
    fleet_ = v1::FleetService::NewStub(channel);
    emulator_ = v1::EmulatorService::NewStub(channel);
    return absl::OkStatus();
  }

  grpc::Status SetEpb(uint64_t value, v1::FleetEditResponse* response) {
    v1::FleetRuleRequest request;
    request.set_layer("default");
    request.mutable_rule()->set_msr("0x1b0");
    request.mutable_rule()->set_read(v1::ReadAction::CONST);
    request.mutable_rule()->set_value(value);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return fleet_->SetRule(&context, request, response);
  }

  int64_t ReadEpb() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::Outcome outcome;
    EXPECT_TRUE(emulator_->Emulate(&context, RdmsrTrap(1, 0x1b0), &outcome).ok());
    if (outcome.kind() != v1::Outcome::COMPLETED) return -1;
    return static_cast<int64_t>((outcome.regs().rdx() << 32) | (outcome.regs().rax() & 0xffffffff));
  }

  std::string dir_;
  std::string endpoint_;
  pid_t etcd_ = -1;
  std::unique_ptr<server::Daemon> daemon_;
  std::unique_ptr<v1::FleetService::Stub> fleet_;
  std::unique_ptr<v1::EmulatorService::Stub> emulator_;
};

TEST_F(FleetTlsTest, WithTheRightCaAndAClientCertificateAFleetEditIsServed) {
  ASSERT_TRUE(StartDaemon(dir_ + "/ca.pem", dir_ + "/client.pem", dir_ + "/client.key").ok());
  v1::FleetEditResponse response;
  grpc::Status s = SetEpb(0x77, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(response.applied());
  EXPECT_EQ(ReadEpb(), 0x77);
  // It went to etcd, over TLS: etcdctl with the client certificate sees it.
  EXPECT_THAT(Etcdctl("get /pvemu/policy/default").output, HasSubstr("value: 119"));
}

TEST_F(FleetTlsTest, AnotherCaReachesNothingAndTheEditSaysWhy) {
  ASSERT_TRUE(StartDaemon(dir_ + "/otherca.pem", dir_ + "/client.pem", dir_ + "/client.key").ok());
  const auto start = std::chrono::steady_clock::now();
  v1::FleetEditResponse response;
  grpc::Status s = SetEpb(0x77, &response);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error_message(), HasSubstr("etcd at " + endpoint_));
  EXPECT_THAT(s.error_message(), HasSubstr("nothing was written"));
  EXPECT_THAT(s.error_message(),
              AnyOf(HasSubstr("certificate"), HasSubstr("CERTIFICATE"), HasSubstr("handshake"),
                    HasSubstr("TLS")));
  EXPECT_EQ(Etcdctl("get /pvemu/policy/default").output, "");
}

TEST_F(FleetTlsTest, WithoutAClientCertificateEtcdRefusesTheEdit) {
  ASSERT_TRUE(StartDaemon(dir_ + "/ca.pem", "", "").ok());
  v1::FleetEditResponse response;
  grpc::Status s = SetEpb(0x77, &response);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.error_message(), HasSubstr("etcd at " + endpoint_));
  EXPECT_EQ(Etcdctl("get /pvemu/policy/default").output, "");
}

TEST_F(FleetTlsTest, AMissingCaFileOrACertificateWithoutACaIsRefusedAtStart) {
  absl::Status s = StartDaemon(dir_ + "/no-such-ca.pem", "", "");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("no-such-ca.pem"));
  s = StartDaemon("", dir_ + "/client.pem", dir_ + "/client.key");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("need --fleet-ca"));
}

}  // namespace
}  // namespace pvemu::testing
