// How pvemu-vm speaks: its exit statuses (docs/CLI.md, "pvemu-vm") and its
// messages, one line each on stderr as "pvemu-vm: MESSAGE".
#ifndef PVEMU_KVM_VM_MESSAGES_H_
#define PVEMU_KVM_VM_MESSAGES_H_

#include <cstdint>
#include <string>

namespace pvemu_vm {

// The exit statuses besides 0 (every vCPU halted) and the guest's own V.
inline constexpr int kExitBadInput = 2;  // bad input or a failed setup; it never ran
inline constexpr int kExitCrash = 3;     // the guest crashed
inline constexpr int kExitTimeout = 124;

// Prints "pvemu-vm: MESSAGE" to stderr.
void Say(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Bad input or a failed setup, before any vCPU runs (no thread to stop yet):
// says so as Say does and exits with kExitBadInput.
[[noreturn]] void Fail(const char* format, ...) __attribute__((format(printf, 1, 2)));

// "0x" and `v` in lower-case hex.
std::string Hex(uint64_t v);

}  // namespace pvemu_vm

#endif  // PVEMU_KVM_VM_MESSAGES_H_
