// pvemu-vm's device model: the ports its contract lists (docs/CLI.md,
// "pvemu-vm": Devices), and nothing else.
//
//   0x3f8  OUT of a byte writes it to stdout, unbuffered
//   0x3fd  IN of a byte reads 0x60 (transmitter empty)
//   0xf4   OUT of any size with value V ends the run with exit status V & 0xff
//   0x510  a 32-bit scratch register (starts at 0): 32-bit IN/OUT read and
//          write it; 8- and 16-bit accesses read or write its low bytes only
//
// Every other access that reaches the model reads all ones for its size, or
// is dropped if it is a write: other ports, and other sizes or directions on
// the ports above. Accesses reach the model only when the domain's io_port
// policy grants the port (pvemu_kvm_handle_exit returned PVEMU_KVM_DEVICE);
// pvemu answers the rest itself.
//
// As kvmtool does, devices are rows of a table keyed by port; the vCPU loop
// never knows a device by name.
//
// Thread-safety: one Devices serves every vCPU thread. The scratch register
// is atomic; console bytes go to stdout with one write(2) each.
#ifndef PVEMU_KVM_VM_DEVICES_H_
#define PVEMU_KVM_VM_DEVICES_H_

#include <atomic>
#include <cstdint>

struct kvm_run;

namespace pvemu_vm {

// One element of a KVM_EXIT_IO (a REP INS/OUTS exit carries `count` of them).
struct PortAccess {
  uint16_t port = 0;
  uint8_t size = 0;    // 1, 2 or 4 bytes
  bool out = false;    // OUT (guest writes `value`) or IN (model sets `value`)
  uint32_t value = 0;  // the low `size` bytes are meaningful
};

class Devices {
 public:
  // What the vCPU loop does after an access.
  struct Result {
    bool end_run = false;  // the guest wrote the exit port
    int exit_status = 0;   // with end_run: V & 0xff
  };

  // Handles one access. For IN, sets access.value (all ones for an access
  // no device takes).
  Result Access(PortAccess& access);

  // Handles a whole KVM_EXIT_IO that pvemu_kvm_handle_exit handed to the
  // device model: every element of a REP access, reading and writing the
  // data at run->io.data_offset. Stops at the first element that ends the
  // run. REQUIRES: run->exit_reason == KVM_EXIT_IO and the data area lies
  // inside the mmap'ed run area (pvemu_kvm_handle_exit checked it).
  Result HandleIoExit(kvm_run* run);

  // The last byte written to stdout, or -1 before any: the runner starts the
  // JSON summary on a fresh line.
  int last_console_byte() const { return last_console_byte_.load(); }

  // Writes bytes to stdout, retrying short writes. Errors (a closed pipe) are
  // ignored: the guest's console must never stop the guest.
  static void WriteStdout(const void* data, size_t len);

 private:
  // The devices. Each returns false for an access it does not take (the
  // wrong size or direction), which then reads all ones or is dropped.
  bool Console(PortAccess& access, Result* result);
  bool LineStatus(PortAccess& access, Result* result);
  bool ExitPort(PortAccess& access, Result* result);
  bool Scratch(PortAccess& access, Result* result);

  struct Port {
    uint16_t port;
    bool (Devices::*handle)(PortAccess&, Result*);
  };
  static const Port kPorts[];

  std::atomic<uint32_t> scratch_{0};
  std::atomic<int> last_console_byte_{-1};
};

}  // namespace pvemu_vm

#endif  // PVEMU_KVM_VM_DEVICES_H_
