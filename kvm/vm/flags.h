// pvemu-vm's flags: what the command line asks for, checked whole before
// anything else happens. The flags are part of pvemu-vm's contract
// (docs/CLI.md, "pvemu-vm").
#ifndef PVEMU_KVM_VM_FLAGS_H_
#define PVEMU_KVM_VM_FLAGS_H_

#include <cstdint>
#include <string>

namespace pvemu_vm {

struct Flags {
  uint32_t domain = 0;
  bool domain_given = false;  // --domain is required: it names the policy's layer
  std::string policy;
  std::string server;
  std::string host = "sim";
  std::string host_profile;
  std::string capture;  // --capture: a trap log of every exit pvemu decides
  uint32_t vcpus = 1;
  uint64_t memory_mib = 64;
  double timeout_s = 30;
  bool stats = false;
  bool json = false;
  std::string image;
};

// Parses the command line: GNU style (--name=value or --name value), with
// getopt_long, so that the runner needs no flags library. --help prints the
// usage to stdout and exits 0; bad input says why and exits with status 2.
Flags ParseFlags(int argc, char** argv);

}  // namespace pvemu_vm

#endif  // PVEMU_KVM_VM_FLAGS_H_
