// xen-hvm-guest: runs the e2e's HVM guest (hvm_guest.S) on the real Xen in
// the e2e VM (tests/xen/run-e2e.sh), in two steps so that pvemud can attach
// to the domain in between:
//   xen-hvm-guest create IMAGE   creates the domain paused (tiny_hvm.h),
//                                loads IMAGE at 0x1000; prints "domid N"
//   xen-hvm-guest run N [SECS]   unpauses it, waits (default 120 s) for the
//                                guest's done marker (0xdeadbeef at 0x2100),
//                                prints the guest's console lines from Xen's
//                                console ring, destroys the domain
// Exit 0 when the guest finished; 1 on any failure, with a message.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/xen/tiny_hvm.h"

namespace {

constexpr char kTool[] = "xen-hvm-guest";
constexpr uint32_t kDoneMarker = 0xdeadbeef;
constexpr size_t kDoneOffset = 0x100;  // in guest frame 2 (0x2100)

double Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int Create(xc_interface* xch, const char* image_path) {
  std::FILE* f = std::fopen(image_path, "rb");
  if (f == nullptr) return tiny_hvm::Fail(kTool, image_path);
  std::vector<uint8_t> image(XC_PAGE_SIZE + 1);
  const size_t n = std::fread(image.data(), 1, image.size(), f);
  std::fclose(f);
  uint32_t domid = 0;
  if (tiny_hvm::Create(xch, kTool, &domid) != 0 ||
      tiny_hvm::LoadCode(xch, kTool, domid, image.data(), n) != 0 ||
      tiny_hvm::SetBootCpu(xch, kTool, domid, 0x1000, 0x4000) != 0) {
    if (domid != 0) xc_domain_destroy(xch, domid);
    return 1;
  }
  std::printf("domid %u\n", domid);
  return 0;
}

// The lines of Xen's console ring that domain `domid` printed ("(dN) ...").
void PrintGuestConsole(xc_interface* xch, uint32_t domid) {
  std::vector<char> ring(1 << 20);
  unsigned int size = ring.size() - 1;
  if (xc_readconsolering(xch, ring.data(), &size, 0, 0, nullptr) != 0) {
    tiny_hvm::Fail(kTool, "xc_readconsolering");
    return;
  }
  ring[size] = 0;
  const std::string prefix = "(d" + std::to_string(domid) + ") ";
  const char* line = ring.data();
  while (*line != 0) {
    const char* end = std::strchr(line, '\n');
    const size_t len = end != nullptr ? end - line : std::strlen(line);
    const std::string text(line, len);
    const size_t at = text.find(prefix);
    if (at != std::string::npos) std::printf("console: %s\n", text.c_str() + at);
    line += len + (end != nullptr ? 1 : 0);
  }
}

int Run(xc_interface* xch, uint32_t domid, double seconds) {
  if (xc_domain_unpause(xch, domid) != 0) return tiny_hvm::Fail(kTool, "xc_domain_unpause");
  auto* data = static_cast<volatile uint32_t*>(
      xc_map_foreign_range(xch, domid, XC_PAGE_SIZE, PROT_READ, 2));
  if (data == nullptr) return tiny_hvm::Fail(kTool, "xc_map_foreign_range (data page)");
  const double start = Now();
  while (Now() - start < seconds && data[kDoneOffset / 4] != kDoneMarker) usleep(20000);
  const bool done = data[kDoneOffset / 4] == kDoneMarker;
  munmap(const_cast<uint32_t*>(data), XC_PAGE_SIZE);
  std::printf("%s: guest %s after %.1f s\n", kTool, done ? "finished" : "did NOT finish",
              Now() - start);
  PrintGuestConsole(xch, domid);
  if (xc_domain_destroy(xch, domid) != 0) return tiny_hvm::Fail(kTool, "xc_domain_destroy");
  return done ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (!((cmd == "create" && argc == 3) || (cmd == "run" && (argc == 3 || argc == 4)))) {
    std::fprintf(stderr, "usage: %s create IMAGE | run DOMID [SECONDS]\n", kTool);
    return 2;
  }
  xc_interface* xch = xc_interface_open(nullptr, nullptr, 0);
  if (xch == nullptr) return tiny_hvm::Fail(kTool, "xc_interface_open");
  int rc = 0;
  if (cmd == "create") {
    rc = Create(xch, argv[2]);
  } else {
    rc = Run(xch, static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 0)),
             argc == 4 ? std::atof(argv[3]) : 120.0);
  }
  xc_interface_close(xch);
  return rc;
}
