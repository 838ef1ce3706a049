#include "output.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "devices.h"
#include "messages.h"

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

// The handle's MSR rows: asked once for how many, then read.
std::vector<pvemu_kvm_msr_count> MsrRows(pvemu_kvm* pvemu) {
  const int n = pvemu_kvm_msr_counts(pvemu, nullptr, 0);
  if (n <= 0) return {};
  std::vector<pvemu_kvm_msr_count> rows(static_cast<size_t>(n));
  for (pvemu_kvm_msr_count& row : rows) row.size = sizeof row;
  const int got = pvemu_kvm_msr_counts(pvemu, rows.data(), static_cast<uint32_t>(rows.size()));
  rows.resize(got < 0 ? 0 : std::min(rows.size(), static_cast<size_t>(got)));
  return rows;
}

}  // namespace

Summary Summarize(int status, pvemu_kvm* pvemu, double seconds,
                  const std::vector<std::unique_ptr<Vcpu>>& vcpus) {
  Summary s;
  s.exit_status = status;
  s.vcpus = static_cast<uint32_t>(vcpus.size());
  s.generation = pvemu_kvm_generation(pvemu);
  s.msrs = MsrRows(pvemu);
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
  for (const pvemu_kvm_msr_count& m : s.msrs) {
    if (m.other) {
      std::fprintf(stderr, "  msr other %s %s: %" PRIu64 "\n", m.write ? "write" : "read",
                   pvemu_kvm_msr_action_name(m.action), m.count);
    } else {
      std::fprintf(stderr, "  msr 0x%x %s %s: %" PRIu64 "\n", m.msr, m.write ? "write" : "read",
                   pvemu_kvm_msr_action_name(m.action), m.count);
    }
  }
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
      "\"pvemu_ns_per_exit\":%.1f,\"msrs\":[",
      // The summary is the last line on its own, after the console bytes.
      last_console_byte >= 0 && last_console_byte != '\n' ? "\n" : "", s.exit_status, s.vcpus,
      s.generation, s.seconds, s.pvemu.rdmsr, s.pvemu.wrmsr, s.pvemu.io, s.exits.hlt,
      s.exits.mmio, s.exits.shutdown, s.exits.internal_error, s.exits.fail_entry, s.exits.other,
      s.pvemu.completed, s.pvemu.exceptions, s.pvemu.device, s.PvemuNsPerExit());
  std::string out(line, static_cast<size_t>(n));
  // The same rows as `pvemuctl stats --msrs` (one per MSR, access, action).
  for (size_t i = 0; i < s.msrs.size(); ++i) {
    const pvemu_kvm_msr_count& m = s.msrs[i];
    char row[160];
    const int len = std::snprintf(
        row, sizeof row, "%s{\"msr\":\"%s\",\"access\":\"%s\",\"action\":\"%s\",\"count\":%" PRIu64 "}",
        i == 0 ? "" : ",", m.other ? "other" : Hex(m.msr).c_str(), m.write ? "write" : "read",
        pvemu_kvm_msr_action_name(m.action), m.count);
    out.append(row, static_cast<size_t>(len));
  }
  out += "]}\n";
  Devices::WriteStdout(out.data(), out.size());
}

}  // namespace pvemu_vm
