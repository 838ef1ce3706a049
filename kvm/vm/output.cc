#include "output.h"

#include <cinttypes>
#include <cstdio>

#include "devices.h"

namespace pvemu_vm {
namespace {

void AddExits(const ExitCounts& e, ExitCounts* sum) {
  sum->hlt += e.hlt;
  sum->mmio += e.mmio;
  sum->shutdown += e.shutdown;
  sum->internal_error += e.internal_error;
  sum->fail_entry += e.fail_entry;
  sum->other += e.other;
}

void AddStats(const pvemu_kvm_stats& s, pvemu_kvm_stats* sum) {
  sum->rdmsr += s.rdmsr;
  sum->wrmsr += s.wrmsr;
  sum->io += s.io;
  sum->completed += s.completed;
  sum->exceptions += s.exceptions;
  sum->device += s.device;
  sum->pvemu_ns += s.pvemu_ns;
}

}  // namespace

Summary Summarize(int status, uint64_t generation, double seconds,
                  const std::vector<std::unique_ptr<Vcpu>>& vcpus) {
  Summary s;
  s.exit_status = status;
  s.vcpus = static_cast<uint32_t>(vcpus.size());
  s.generation = generation;
  s.seconds = seconds;
  for (const auto& cpu : vcpus) {
    AddExits(cpu->exits, &s.exits);
    AddStats(cpu->stats, &s.pvemu);
  }
  return s;
}

void PrintStatsText(const Summary& s) {
  std::fprintf(stderr,
               "pvemu-vm: exit status %d after %.3f s; %u vCPU(s); policy generation %" PRIu64 "\n"
               "  exits: rdmsr %" PRIu64 ", wrmsr %" PRIu64 ", io %" PRIu64 ", hlt %" PRIu64
               ", mmio %" PRIu64 ", shutdown %" PRIu64 ", internal_error %" PRIu64
               ", fail_entry %" PRIu64 ", other %" PRIu64 "\n"
               "  outcomes: completed %" PRIu64 ", exception %" PRIu64 ", device %" PRIu64 "\n"
               "  pvemu: %.0f ns per exit\n",
               s.exit_status, s.seconds, s.vcpus, s.generation, s.pvemu.rdmsr, s.pvemu.wrmsr,
               s.pvemu.io, s.exits.hlt, s.exits.mmio, s.exits.shutdown, s.exits.internal_error,
               s.exits.fail_entry, s.exits.other, s.pvemu.completed, s.pvemu.exceptions,
               s.pvemu.device, s.PvemuNsPerExit());
}

void PrintStatsJson(const Summary& s, int last_console_byte) {
  char line[1024];
  const int n = std::snprintf(
      line, sizeof line,
      "%s{\"exit_status\":%d,\"vcpus\":%u,\"generation\":%" PRIu64 ",\"seconds\":%.6f,"
      "\"exits\":{\"rdmsr\":%" PRIu64 ",\"wrmsr\":%" PRIu64 ",\"io\":%" PRIu64 ",\"hlt\":%" PRIu64
      ",\"mmio\":%" PRIu64 ",\"shutdown\":%" PRIu64 ",\"internal_error\":%" PRIu64
      ",\"fail_entry\":%" PRIu64 ",\"other\":%" PRIu64 "},"
      "\"outcomes\":{\"completed\":%" PRIu64 ",\"exception\":%" PRIu64 ",\"device\":%" PRIu64 "},"
      "\"pvemu_ns_per_exit\":%.1f}\n",
      // The summary is the last line on its own, after the console bytes.
      last_console_byte >= 0 && last_console_byte != '\n' ? "\n" : "", s.exit_status, s.vcpus,
      s.generation, s.seconds, s.pvemu.rdmsr, s.pvemu.wrmsr, s.pvemu.io, s.exits.hlt,
      s.exits.mmio, s.exits.shutdown, s.exits.internal_error, s.exits.fail_entry, s.exits.other,
      s.pvemu.completed, s.pvemu.exceptions, s.pvemu.device, s.PvemuNsPerExit());
  Devices::WriteStdout(line, static_cast<size_t>(n));
}

}  // namespace pvemu_vm
