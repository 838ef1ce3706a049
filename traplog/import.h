// Importers of captured host logs: turn the lines in which a hypervisor
// reported a guest's MSR/CPUID access into v1.TrapRecords, with the outcome
// the host gave where the line says it.
//
// Format families (see import.cc for every accepted spelling and the kernel /
// Xen printk formats they come from):
//   kvm-dmesg    Linux KVM kernel messages: dmesg, journalctl, syslog, with or
//                without timestamps and kvm:/kvm_amd:/kvm_intel: prefixes;
//                "kvm [PID]: vcpuN, guest rIP: 0xRIP ignored rdmsr: 0xMSR",
//                "... unhandled wrmsr: 0xMSR data 0xVAL", 6.3+ "Unhandled
//                WRMSR(0xMSR) = 0xVAL", the illumos/SmartOS port, ...
//   xen-console  Xen's console ("xl dmesg", serial): "(XEN) FILE:LINE:dDvV
//                RDMSR 0x%08x unimplemented", "faking RDMSR", "Domain
//                attempted WRMSR ... from ... to ...", ...
//   ftrace       ftrace / trace-cmd report / perf script text: kvm_msr,
//                kvm_cpuid and kvm_pio (single IN/OUT) events, with kvm_exit
//                giving vCPU and RIP.
//   auto         decides per line, so one file may mix them (a journal).
//
// What a record holds: trap.insn = the instruction (RDMSR 0f 32, WRMSR 0f 30,
// CPUID 0f a2, IN/OUT with the port in DX: ec/66 ed/ed, ee/66 ef/ef); mode
// MODE_64 and cpl 0 (logs do not say); regs.rcx = the MSR (WRMSR: rax/rdx =
// the value's low/high halves; CPUID: rax/rcx = leaf and subleaf; IN/OUT:
// rdx = the port, OUT: rax = the value); regs.rip when the line gives it.
// trap.domain = the Xen domain id; for KVM, which has no domain ids, the QEMU
// process id stands in for the domain (kvm [PID]; for ftrace the TGID when the
// trace has it, else the thread id of the task-pid field). source =
// "NAME:LINE", note = the line.
#ifndef PVEMU_TRAPLOG_IMPORT_H_
#define PVEMU_TRAPLOG_IMPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::traplog {

// Accepted values of ImportLog's `format`; the names also key
// ImportStats::by_format.
inline constexpr absl::string_view kImportFormatAuto = "auto";
inline constexpr absl::string_view kImportFormatKvm = "kvm-dmesg";
inline constexpr absl::string_view kImportFormatXen = "xen-console";
inline constexpr absl::string_view kImportFormatFtrace = "ftrace";

// Lines longer than this are skipped unread (and counted in too_long): no
// trap line is anywhere near it, and memory stays bounded on any input.
inline constexpr size_t kMaxImportLineBytes = 64 * 1024;
// ImportStats keeps the details of this many malformed lines (all are counted).
inline constexpr size_t kMaxMalformedReported = 100;

struct MalformedLine {
  int64_t line = 0;    // 1-based
  std::string reason;  // "ignored wrmsr: missing the data value"
};

// lines == traps + skipped + malformed.
struct ImportStats {
  int64_t lines = 0;
  int64_t traps = 0;      // records handed to the sink
  int64_t skipped = 0;    // not trap lines: other messages, comments, blanks
  int64_t too_long = 0;   // of `skipped`: over kMaxImportLineBytes
  int64_t malformed = 0;  // looked like a trap line but did not parse
  std::map<std::string, int64_t> by_format;  // traps per format family
  // The first kMaxMalformedReported malformed lines.
  std::vector<MalformedLine> malformed_lines;
};

// Receives each record; an error stops the import and is returned.
using TrapSink = std::function<absl::Status(pvemu::v1::TrapRecord&&)>;

// Reads `in` line by line and hands every trap line's record to `sink`, in
// order. `format` is one of the names above; `source_name` prefixes each
// record's source ("NAME:LINE"). Non-trap lines are counted, never an error;
// malformed trap lines are counted and reported with their line numbers.
// Errors: InvalidArgument for an unknown format, DataLoss when reading `in`
// fails, or the sink's error.
absl::StatusOr<ImportStats> ImportLog(absl::string_view format,
                                      std::istream& in,
                                      absl::string_view source_name,
                                      const TrapSink& sink);

// ImportLog on a file; `source_name` is `path`. NotFound etc. name the file.
absl::StatusOr<ImportStats> ImportLogFile(absl::string_view format,
                                          const std::string& path,
                                          const TrapSink& sink);

// Adds `from` into `into` (for one summary over several files). Malformed
// line details beyond kMaxMalformedReported are dropped; counts are kept.
void MergeImportStats(const ImportStats& from, ImportStats* into);

}  // namespace pvemu::traplog

#endif  // PVEMU_TRAPLOG_IMPORT_H_
