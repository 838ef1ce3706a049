#include "devices.h"

#include <errno.h>
#include <linux/kvm.h>
#include <unistd.h>

#include <cstring>

namespace pvemu_vm {
namespace {

constexpr uint32_t AllOnes(uint8_t size) {
  return size >= 4 ? 0xffffffffu : (1u << (size * 8)) - 1;
}

}  // namespace

const Devices::Port Devices::kPorts[] = {
    {0x3f8, &Devices::Console},
    {0x3fd, &Devices::LineStatus},
    {0xf4, &Devices::ExitPort},
    {0x510, &Devices::Scratch},
};

void Devices::WriteStdout(const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = write(STDOUT_FILENO, p, len);
    if (n < 0 && errno == EINTR) continue;  // a kick arrived mid-write
    if (n <= 0) return;
    p += n;
    len -= static_cast<size_t>(n);
  }
}

bool Devices::Console(PortAccess& access, Result*) {
  if (!access.out || access.size != 1) return false;
  const char byte = static_cast<char>(access.value);
  WriteStdout(&byte, 1);
  last_console_byte_.store(static_cast<unsigned char>(byte));
  return true;
}

bool Devices::LineStatus(PortAccess& access, Result*) {
  if (access.out || access.size != 1) return false;
  access.value = 0x60;  // THR empty and transmitter empty: never busy
  return true;
}

bool Devices::ExitPort(PortAccess& access, Result* result) {
  if (!access.out) return false;
  result->end_run = true;
  result->exit_status = static_cast<int>(access.value & 0xff);
  return true;
}

bool Devices::Scratch(PortAccess& access, Result*) {
  // An 8- or 16-bit access touches only the low bytes, as a narrow access
  // to a little-endian register would; the 32-bit one touches all of it.
  const uint32_t mask = AllOnes(access.size);
  if (!access.out) {
    access.value = scratch_.load() & mask;
    return true;
  }
  uint32_t old = scratch_.load();
  while (!scratch_.compare_exchange_weak(old, (old & ~mask) | (access.value & mask))) {
  }
  return true;
}

Devices::Result Devices::Access(PortAccess& access) {
  Result result;
  for (const Port& p : kPorts) {
    if (p.port == access.port) {
      if ((this->*p.handle)(access, &result)) return result;
      break;
    }
  }
  if (!access.out) access.value = AllOnes(access.size);
  return result;
}

Devices::Result Devices::HandleIoExit(kvm_run* run) {
  uint8_t* data = reinterpret_cast<uint8_t*>(run) + run->io.data_offset;
  const uint8_t size = run->io.size;
  Result result;
  if (size != 1 && size != 2 && size != 4) return result;  // KVM sends no other
  for (uint32_t i = 0; i < run->io.count; ++i, data += size) {
    PortAccess access;
    access.port = run->io.port;
    access.size = size;
    access.out = run->io.direction == KVM_EXIT_IO_OUT;
    if (access.out) std::memcpy(&access.value, data, size);  // x86: little-endian
    result = Access(access);
    if (!access.out) std::memcpy(data, &access.value, size);
    if (result.end_run) break;
  }
  return result;
}

}  // namespace pvemu_vm
