// An inclusive range of I/O ports: the 16-bit port space IN/OUT address
// (SDM vol. 1, 18.2 "I/O port addressing"). The Xen ioreq server claims
// such ranges and enforce/ describes them.
#ifndef PVEMU_X86_PORT_SPAN_H_
#define PVEMU_X86_PORT_SPAN_H_

#include <cstdint>

namespace pvemu::x86 {

struct PortSpan {
  uint16_t first = 0;
  uint16_t last = 0;
};

}  // namespace pvemu::x86

#endif  // PVEMU_X86_PORT_SPAN_H_
