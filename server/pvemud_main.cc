// pvemud: the pvemu daemon. See CLI.md, "Daemon".
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"

ABSL_FLAG(std::string, host, "sim", "host backend: sim | xen | linux");
ABSL_FLAG(std::string, host_profile, "",
          "sim host profile textproto (default: the shipped Intel Xeon E-2136)");
ABSL_FLAG(std::string, listen, "unix:///run/pvemu/pvemu.sock",
          "where to serve: unix:///path (mode 0660) or host:port (TLS required)");
ABSL_FLAG(std::string, state_dir, "/var/lib/pvemu",
          "where accepted policy edits are kept across restarts");
ABSL_FLAG(std::string, policy, "",
          "policy textproto to start from when the state dir has none "
          "(default: the shipped default policy)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pvemu privileged-operation emulator daemon.\n"
      "Usage: pvemud [--host=sim|xen|linux] [--host-profile=FILE] "
      "[--listen=ADDR] [--state-dir=DIR] [--policy=FILE]");
  absl::ParseCommandLine(argc, argv);
  std::fprintf(stderr, "pvemud: the server is not built yet\n");
  return 1;
}
