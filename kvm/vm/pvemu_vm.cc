// pvemu-vm: the reference runner. A minimal VMM that runs a flat binary on
// KVM and lets pvemu answer the guest's MSR and port accesses through
// libpvemu-kvm's C ABI (pvemu_kvm.h) only: it is meant to be read by VMM
// authors, so it uses nothing else of pvemu, and no library but libc and the
// C++ standard library.
//
// Its contract is docs/CLI.md, "pvemu-vm": the flags (flags.h), the memory
// layout and entry state (x86_setup.h), the ports (devices.h), the exit
// statuses (messages.h) and the output streams (output.h). Tests outside
// this repository rely on it: change none of them.
//
//   0    every vCPU halted
//   V    the guest wrote V to port 0xf4 (V & 0xff)
//   2    bad input, or the VM could not be set up; it never ran
//   3    the guest crashed: triple fault, KVM internal error, failed entry,
//        or an exit this runner does not handle (stderr names it and RIP)
//   124  --timeout passed
//
// stdout carries the guest's console bytes only, then with -o json the
// summary as one JSON object on the last line; everything the runner says
// goes to stderr.
//
// The phases, each in its file: flags.h (the command line), vm_setup.h (the
// VM, its memory and image, its vCPUs), exit_loop.h (the vCPU threads and
// how a run ends), output.h (the summary).
#include <signal.h>

#include "devices.h"
#include "exit_loop.h"
#include "flags.h"
#include "output.h"
#include "pvemu_kvm.h"
#include "vm_setup.h"

namespace pvemu_vm {
namespace {

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the guest
  Vm vm = SetUpVm(f);
  Devices devices;
  const RunResult run = RunVm(vm, devices, f.timeout_s);
  const Summary summary = Summarize(run.status, vm.pvemu, run.seconds, vm.vcpus);
  if (f.stats) PrintStatsText(summary);
  if (f.json) PrintStatsJson(summary, devices.last_console_byte());
  TearDownVm(vm);
  return run.status;
}

}  // namespace
}  // namespace pvemu_vm

int main(int argc, char** argv) { return pvemu_vm::Main(argc, argv); }
