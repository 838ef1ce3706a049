/* xen-msr-probe: the reference reading for the e2e test (tests/xen/run-e2e.sh).
 *
 *   xen-msr-probe MSR [CPU]
 *
 * Reads one physical MSR through libxenctrl's xc_resource_op
 * (XEN_RESOURCE_OP_MSR_READ), exactly as Xen reports it, independently of
 * pvemu's own code, and prints "cpu=N msr=0x.. value=0x.. (DEC)". When Xen
 * refuses (the MSR is not on its allow-list, the CPU is offline) it prints
 * "cpu=N msr=0x.. refused errno=E (NAME)" and exits 3; other failures exit 1.
 *
 * Built by run-e2e.sh with `gcc msr_probe.c -lxenctrl`; runs in dom0.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xenctrl.h>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s MSR [CPU]\n", argv[0]);
    return 2;
  }
  uint32_t msr = (uint32_t)strtoul(argv[1], NULL, 0);
  uint32_t cpu = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 0) : 0;

  xc_interface* xch = xc_interface_open(NULL, NULL, 0);
  if (xch == NULL) {
    fprintf(stderr, "xc_interface_open: %s\n", strerror(errno));
    return 1;
  }
  xc_resource_entry_t entry;
  memset(&entry, 0, sizeof(entry));
  entry.u.cmd = XEN_RESOURCE_OP_MSR_READ;
  entry.idx = msr;
  xc_resource_op_t op;
  memset(&op, 0, sizeof(op));
  op.cpu = cpu;
  op.nr_entries = 1;
  op.entries = &entry;
  errno = 0;
  int rc = xc_resource_op(xch, 1, &op);
  int err = rc < 0 ? errno : (op.result < 1 ? -(int)entry.u.ret : 0);
  xc_interface_close(xch);
  if (rc < 0 || op.result < 1) {
    printf("cpu=%u msr=%#x refused errno=%d (%s) rc=%d result=%" PRIu64 "\n", cpu, msr,
           err, strerror(err), rc, (uint64_t)op.result);
    return 3;
  }
  printf("cpu=%u msr=%#x value=%#" PRIx64 " (%" PRIu64 ")\n", cpu, msr, (uint64_t)entry.val,
         (uint64_t)entry.val);
  return 0;
}
