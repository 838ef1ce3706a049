// The smallest HVM domain Xen will run and monitor, for the e2e's probes
// (monitor_probe.cc, hvm_guest.cc) in dom0, where there is no toolstack: a
// PVH-style domain (no device model: Xen emulates only the LAPIC, so every
// port I/O Xen does not handle itself goes to an ioreq server, or reads all
// ones), one vCPU, guest RAM at frames 0-3, one more frame for the vm_event
// ring, and 32-bit protected-mode code started at a given address.
#ifndef PVEMU_TESTS_XEN_TINY_HVM_H_
#define PVEMU_TESTS_XEN_TINY_HVM_H_

#define XC_WANT_COMPAT_MAP_FOREIGN_API 1  // xc_map_foreign_range
extern "C" {
#include <xenctrl.h>
#include <xen/hvm/params.h>
#include <xen/hvm/save.h>
}

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace tiny_hvm {

inline int Fail(const char* tool, const char* what) {
  std::printf("%s: %s failed: %s\n", tool, what, std::strerror(errno));
  return 1;
}

// Guest RAM is frames 0..kRamFrames-1 (the code at 0x1000, data above);
// the vm_event ring is frame kRingFrame, outside it.
constexpr xen_pfn_t kRamFrames = 4;
constexpr xen_pfn_t kRingFrame = 0x100;

// Creates the domain, paused, with its memory and ring page; 0 on success.
inline int Create(xc_interface* xch, const char* tool, uint32_t* domid) {
  xen_domctl_createdomain config;
  std::memset(&config, 0, sizeof(config));
  config.flags = XEN_DOMCTL_CDF_hvm | XEN_DOMCTL_CDF_hap;
  config.max_vcpus = 1;
  config.max_evtchn_port = 1023;
  config.max_grant_frames = -1;
  config.max_maptrack_frames = -1;
  config.grant_opts = XEN_DOMCTL_GRANT_version(1);
  config.arch.emulation_flags = XEN_X86_EMU_LAPIC;  // PVH-style: no device model
  *domid = 0;
  if (xc_domain_create(xch, domid, &config) != 0) return Fail(tool, "xc_domain_create (HVM, HAP)");
  xen_pfn_t ring = kRingFrame;
  std::vector<xen_pfn_t> ram;
  for (xen_pfn_t f = 0; f < kRamFrames; ++f) ram.push_back(f);
  // XEN_DOMCTL_max_vcpus still allocates the vCPUs in 4.17, and vm_event
  // refuses a domain without vCPU 0.
  if (xc_domain_max_vcpus(xch, *domid, 1) != 0) return Fail(tool, "xc_domain_max_vcpus");
  if (xc_domain_setmaxmem(xch, *domid, 4096) != 0) return Fail(tool, "xc_domain_setmaxmem");
  if (xc_set_paging_mempool_size(xch, *domid, 4 << 20) != 0 && errno != EOPNOTSUPP) {
    return Fail(tool, "xc_set_paging_mempool_size");
  }
  if (xc_domain_populate_physmap_exact(xch, *domid, 1, 0, 0, &ring) != 0) {
    return Fail(tool, "xc_domain_populate_physmap_exact (ring)");
  }
  if (xc_domain_populate_physmap_exact(xch, *domid, ram.size(), 0, 0, ram.data()) != 0) {
    return Fail(tool, "xc_domain_populate_physmap_exact (guest RAM)");
  }
  if (xc_hvm_param_set(xch, *domid, HVM_PARAM_MONITOR_RING_PFN, kRingFrame) != 0) {
    return Fail(tool, "xc_hvm_param_set(HVM_PARAM_MONITOR_RING_PFN)");
  }
  return 0;
}

// Copies `size` bytes of code to guest frame 1 (0x1000); 0 on success.
inline int LoadCode(xc_interface* xch, const char* tool, uint32_t domid, const void* code,
                    size_t size) {
  if (size > XC_PAGE_SIZE) {
    errno = E2BIG;
    return Fail(tool, "loading the code (one page at most)");
  }
  void* page = xc_map_foreign_range(xch, domid, XC_PAGE_SIZE, PROT_READ | PROT_WRITE, 1);
  if (page == nullptr) return Fail(tool, "xc_map_foreign_range (code page)");
  std::memcpy(page, code, size);
  munmap(page, XC_PAGE_SIZE);
  return 0;
}

// Loads vCPU 0 with 32-bit protected mode (flat segments, paging off) at
// `rip` with the stack at `rsp`, as libxenguest does for PVH (HVM save
// records HEADER, CPU, END); 0 on success.
inline int SetBootCpu(xc_interface* xch, const char* tool, uint32_t domid, uint32_t rip,
                      uint32_t rsp) {
  int size = xc_domain_hvm_getcontext(xch, domid, nullptr, 0);
  if (size <= 0) return Fail(tool, "xc_domain_hvm_getcontext (size)");
  std::vector<uint8_t> full(size);
  if (xc_domain_hvm_getcontext(xch, domid, full.data(), size) <= 0) {
    return Fail(tool, "xc_domain_hvm_getcontext");
  }
  struct {
    hvm_save_descriptor header_d;
    HVM_SAVE_TYPE(HEADER) header;
    hvm_save_descriptor cpu_d;
    HVM_SAVE_TYPE(CPU) cpu;
    hvm_save_descriptor end_d;
    HVM_SAVE_TYPE(END) end;
  } ctx;
  std::memset(&ctx, 0, sizeof(ctx));
  std::memcpy(&ctx.header_d, full.data(), sizeof(ctx.header_d) + sizeof(ctx.header));
  ctx.cpu_d.typecode = HVM_SAVE_CODE(CPU);
  ctx.cpu_d.instance = 0;
  ctx.cpu_d.length = HVM_SAVE_LENGTH(CPU);
  auto& c = ctx.cpu;
  c.cs_limit = c.ds_limit = c.es_limit = c.ss_limit = 0xffffffff;
  c.cs_arbytes = 0xc9b;  // 32-bit code, DPL 0, present, 4K granular
  c.ds_arbytes = c.es_arbytes = c.ss_arbytes = 0xc93;
  c.tr_arbytes = 0x8b;
  c.tr_limit = 0x67;
  c.cr0 = 0x11;  // PE | ET
  c.rip = rip;
  c.rflags = 0x2;
  c.rsp = rsp;
  c.dr6 = 0xffff0ff0;
  c.dr7 = 0x400;
  ctx.end_d.typecode = HVM_SAVE_CODE(END);
  ctx.end_d.length = HVM_SAVE_LENGTH(END);
  if (xc_domain_hvm_setcontext(xch, domid, reinterpret_cast<uint8_t*>(&ctx), sizeof(ctx)) != 0) {
    return Fail(tool, "xc_domain_hvm_setcontext");
  }
  return 0;
}

}  // namespace tiny_hvm

#endif  // PVEMU_TESTS_XEN_TINY_HVM_H_
