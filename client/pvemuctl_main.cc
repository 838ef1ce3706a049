// pvemuctl: the pvemu command line. See CLI.md.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"

ABSL_FLAG(std::string, o, "text", "output format: text | json (JSON Lines)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "pvemu command line.\n"
      "Usage: pvemuctl COMMAND [flags] [args]\n"
      "Offline: decode, validate, explain, emulate, import, replay, suggest\n"
      "Online:  policy get|apply|set-rule|delete-rule|diff, domains, stats, watch");
  absl::ParseCommandLine(argc, argv);
  return 2;
}
