/*
 * The C ABI (kvm/pvemu_kvm.h) used from a program compiled as C11, as a VMM
 * written in C uses it: open a handle on a policy file, read its MSR filter,
 * see the error path, check that the structs grow as the header says (an
 * older and a newer caller's sizes), and, where /dev/kvm exists, run a tiny
 * real-mode VM whose RDMSR of a named MSR pvemu answers while an unnamed one
 * stays in KVM.
 *
 * Exit status: 0 when every check passed, 1 when one failed, 77 (meson's
 * skip) when all passed but the VM part could not run for want of /dev/kvm.
 */
/* -std=c11 hides POSIX and Linux calls (O_CLOEXEC, MAP_ANONYMOUS) the test
 * itself uses; the header needs nothing beyond C11. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <pvemu_kvm.h>

static int failures;

#define CHECK(cond, ...)                                            \
  do {                                                              \
    if (!(cond)) {                                                  \
      ++failures;                                                   \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                 \
      fprintf(stderr, "\n");                                        \
    }                                                               \
  } while (0)

/* tests/kvm/policies/in-kernel.textproto names one MSR, 0x12345600, CONST 5. */
static char policy_path[4096];
static const uint32_t kNamedMsr = 0x12345600;
static const uint64_t kNamedMsrValue = 5;

static struct pvemu_kvm_options policy_options(const char *policy) {
  struct pvemu_kvm_options options;
  memset(&options, 0, sizeof(options));
  options.size = sizeof(options);
  options.domain = 1;
  options.policy = policy;
  return options;
}

static void test_filter_text_lists_the_named_msr(pvemu_kvm *kvm) {
  int needed = pvemu_kvm_filter_text(kvm, NULL, 0);
  CHECK(needed > 0, "filter_text(NULL, 0) = %d: %s", needed, pvemu_kvm_last_error());
  if (needed <= 0) return;
  char *text = malloc((size_t)needed + 1);
  int written = pvemu_kvm_filter_text(kvm, text, (size_t)needed + 1);
  CHECK(written == needed, "filter_text gave %d, then %d", needed, written);
  CHECK(text[needed] == '\0', "not NUL-terminated");
  CHECK(strstr(text, "12345600") != NULL, "the filter does not name 0x12345600:\n%s", text);
  free(text);

  /* A short buffer: the length it needs, and what fits, NUL-terminated. */
  char small[8];
  memset(small, 'x', sizeof(small));
  CHECK(pvemu_kvm_filter_text(kvm, small, sizeof(small)) == needed, "short buffer");
  CHECK(small[sizeof(small) - 1] == '\0', "short buffer not NUL-terminated");
}

static void test_errors_are_negative_errno_with_a_message(void) {
  pvemu_kvm *kvm = NULL;

  /* Both a policy and a server: exactly one is allowed. */
  struct pvemu_kvm_options both = policy_options(policy_path);
  both.server = "unix:/nonexistent";
  int rc = pvemu_kvm_open(&both, &kvm);
  CHECK(rc == -EINVAL, "open with policy and server = %d, want -EINVAL", rc);
  CHECK(kvm == NULL, "a failed open left a handle");
  CHECK(strlen(pvemu_kvm_last_error()) > 0, "no message after a failed open");

  /* A missing policy file. */
  struct pvemu_kvm_options missing = policy_options("/nonexistent/policy.textproto");
  rc = pvemu_kvm_open(&missing, &kvm);
  CHECK(rc == -ENOENT, "open of a missing policy = %d, want -ENOENT", rc);
  CHECK(strstr(pvemu_kvm_last_error(), "/nonexistent/policy.textproto") != NULL,
        "the message does not name the file: %s", pvemu_kvm_last_error());

  /* NULL is a no-op for both closes. */
  pvemu_kvm_vcpu_close(NULL);
  pvemu_kvm_close(NULL);
}

/*
 * The growth rules of pvemu_kvm.h ("How the ABI grows") for the struct the
 * library fills. An older caller's struct pvemu_kvm_stats, as its header
 * declared it: the first fields only. Each is followed by a guard that the
 * library must leave as it was.
 */
struct old_stats {
  uint32_t size;
  uint32_t reserved;
  uint64_t rdmsr;
  uint64_t wrmsr;
  uint64_t io;
};
_Static_assert(offsetof(struct old_stats, io) == offsetof(struct pvemu_kvm_stats, io),
               "old_stats is a prefix of struct pvemu_kvm_stats");
_Static_assert(sizeof(struct old_stats) < sizeof(struct pvemu_kvm_stats),
               "old_stats is shorter than struct pvemu_kvm_stats");

struct old_stats_guarded {
  struct old_stats stats;
  unsigned char guard[64];
};
_Static_assert(offsetof(struct old_stats_guarded, guard) == sizeof(struct old_stats),
               "the guard starts right after the old struct");

/* A newer caller's: one count this library does not know, then the guard. */
struct newer_stats_guarded {
  struct pvemu_kvm_stats stats;
  uint64_t newer_count;
  unsigned char guard[64];
};

#define GUARD_BYTE 0xa5
static const uint64_t kUntouched = 0xa5a5a5a5a5a5a5a5ull;

/* Every byte GUARD_BYTE, then `size` set: what the library does not write
 * stays GUARD_BYTE. */
static void fill_old(struct old_stats_guarded *b, uint32_t size) {
  memset(b, GUARD_BYTE, sizeof(*b));
  b->stats.size = size;
}

static int untouched(const unsigned char *bytes, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    if (bytes[i] != GUARD_BYTE) return 0;
  }
  return 1;
}

/* An older caller gets its fields written (a fresh handle counts 0, over the
 * guard bytes), its header left alone, and nothing past its size. */
static void test_stats_older_caller_gets_its_fields_only(pvemu_kvm *kvm) {
  struct old_stats_guarded b;
  fill_old(&b, sizeof(b.stats));
  int rc = pvemu_kvm_totals(kvm, (struct pvemu_kvm_stats *)&b.stats);
  CHECK(rc == (int)sizeof(b.stats), "totals, older size %zu = %d: %s", sizeof(b.stats), rc,
        pvemu_kvm_last_error());
  CHECK(b.stats.rdmsr == 0 && b.stats.wrmsr == 0 && b.stats.io == 0,
        "the older caller's counts were not written: rdmsr 0x%llx wrmsr 0x%llx io 0x%llx",
        (unsigned long long)b.stats.rdmsr, (unsigned long long)b.stats.wrmsr,
        (unsigned long long)b.stats.io);
  CHECK(b.stats.size == sizeof(b.stats), "size changed to %u", b.stats.size);
  CHECK(untouched((const unsigned char *)&b.stats.reserved, sizeof(b.stats.reserved)),
        "reserved was written: 0x%x", b.stats.reserved);
  CHECK(untouched(b.guard, sizeof(b.guard)), "the library wrote past the older caller's size");

  /* A size that ends inside a count: the counts before it, not that one. */
  const uint32_t split = (uint32_t)offsetof(struct old_stats, wrmsr) + 4;
  fill_old(&b, split);
  rc = pvemu_kvm_totals(kvm, (struct pvemu_kvm_stats *)&b.stats);
  CHECK(rc == (int)offsetof(struct old_stats, wrmsr), "totals, size %u = %d, want %zu", split,
        rc, offsetof(struct old_stats, wrmsr));
  CHECK(b.stats.rdmsr == 0, "rdmsr not written: 0x%llx", (unsigned long long)b.stats.rdmsr);
  CHECK(b.stats.wrmsr == kUntouched, "wrmsr, cut by the size, was written: 0x%llx",
        (unsigned long long)b.stats.wrmsr);

  /* The header alone: nothing to write. */
  fill_old(&b, sizeof(uint32_t));
  rc = pvemu_kvm_totals(kvm, (struct pvemu_kvm_stats *)&b.stats);
  CHECK(rc == (int)sizeof(uint32_t), "totals, size 4 = %d, want 4", rc);
  CHECK(untouched((const unsigned char *)&b.stats.reserved,
                  sizeof(b) - offsetof(struct old_stats, reserved)),
        "a size of 4 let the library write past the size field");
}

/* A newer caller: this library's fields written, the newer one left alone,
 * and the result says how far the library went. */
static void test_stats_newer_caller_keeps_the_fields_it_added(pvemu_kvm *kvm) {
  struct newer_stats_guarded b;
  memset(&b, GUARD_BYTE, sizeof(b));
  b.stats.size = (uint32_t)offsetof(struct newer_stats_guarded, guard);
  int rc = pvemu_kvm_totals(kvm, &b.stats);
  CHECK(rc == (int)sizeof(struct pvemu_kvm_stats), "totals, newer size %u = %d, want %zu",
        b.stats.size, rc, sizeof(struct pvemu_kvm_stats));
  CHECK(b.stats.pvemu_ns == 0 && b.stats.rdmsr == 0, "this library's counts were not written");
  CHECK(b.newer_count == kUntouched, "a count this library does not know was written: 0x%llx",
        (unsigned long long)b.newer_count);
  CHECK(untouched(b.guard, sizeof(b.guard)), "the library wrote past the newer caller's size");

  /* The caller's own header: all of it, the result sizeof. */
  struct pvemu_kvm_stats stats;
  memset(&stats, GUARD_BYTE, sizeof(stats));
  stats.size = sizeof(stats);
  rc = pvemu_kvm_vcpu_stats(NULL, &stats);
  CHECK(rc == (int)sizeof(stats), "vcpu_stats(NULL) = %d, want %zu", rc, sizeof(stats));
  CHECK(stats.rdmsr == 0 && stats.device == 0 && stats.pvemu_ns == 0,
        "a NULL vCPU does not have zero counts");
}

/* A size smaller than the size field, or above 4096 (never set), is refused;
 * nothing is written. */
static void test_stats_size_too_small_or_unset_is_refused(pvemu_kvm *kvm) {
  static const uint32_t kBadSizes[] = {0, 1, 3, 4097, 0xffffffffu};
  for (size_t i = 0; i < sizeof(kBadSizes) / sizeof(kBadSizes[0]); ++i) {
    struct old_stats_guarded b;
    fill_old(&b, kBadSizes[i]);
    int rc = pvemu_kvm_totals(kvm, (struct pvemu_kvm_stats *)&b.stats);
    CHECK(rc == -EINVAL, "totals, size %u = %d, want -EINVAL", kBadSizes[i], rc);
    CHECK(strstr(pvemu_kvm_last_error(), "size") != NULL, "the message does not name the size: %s",
          pvemu_kvm_last_error());
    CHECK(untouched((const unsigned char *)&b.stats.reserved,
                    sizeof(b) - offsetof(struct old_stats, reserved)),
          "a refused size %u let the library write", kBadSizes[i]);
    rc = pvemu_kvm_vcpu_stats(NULL, (struct pvemu_kvm_stats *)&b.stats);
    CHECK(rc == -EINVAL, "vcpu_stats, size %u = %d, want -EINVAL", kBadSizes[i], rc);
  }
  CHECK(pvemu_kvm_totals(kvm, NULL) == -EINVAL, "totals(NULL out) is not -EINVAL");
  CHECK(pvemu_kvm_vcpu_stats(NULL, NULL) == -EINVAL, "vcpu_stats(NULL out) is not -EINVAL");
}

/* The struct the caller fills, from a newer header: a field this library does
 * not know is refused when set, and ignored when 0. */
struct newer_options {
  struct pvemu_kvm_options options;
  uint64_t newer_field;
};

static void test_options_from_a_newer_caller(void) {
  struct newer_options newer;
  memset(&newer, 0, sizeof(newer));
  newer.options = policy_options(policy_path);
  newer.options.size = sizeof(newer);
  newer.newer_field = 1;
  pvemu_kvm *kvm = NULL;
  int rc = pvemu_kvm_open(&newer.options, &kvm);
  CHECK(rc == -E2BIG && kvm == NULL, "open with an unknown field set = %d, want -E2BIG", rc);
  CHECK(strstr(pvemu_kvm_last_error(), "newer") != NULL, "the message does not say why: %s",
        pvemu_kvm_last_error());

  newer.newer_field = 0;
  rc = pvemu_kvm_open(&newer.options, &kvm);
  CHECK(rc == 0 && kvm != NULL, "open with an unknown field 0 = %d: %s", rc,
        pvemu_kvm_last_error());
  pvemu_kvm_close(kvm);

  struct pvemu_kvm_options small = policy_options(policy_path);
  small.size = sizeof(uint32_t);
  kvm = NULL;
  rc = pvemu_kvm_open(&small, &kvm);
  CHECK(rc == -EINVAL && kvm == NULL, "open with options->size 4 = %d, want -EINVAL", rc);
}

/*
 * Real mode, at 0x1000:
 *   mov ecx, 0x10 ; rdmsr     IA32_TSC: no rule names it, KVM answers
 *   mov ecx, 0x12345600 ; rdmsr    named: pvemu answers 5
 *   hlt
 */
static const uint8_t kGuest[] = {
    0x66, 0xb9, 0x10, 0x00, 0x00, 0x00, 0x0f, 0x32,
    0x66, 0xb9, 0x00, 0x56, 0x34, 0x12, 0x0f, 0x32,
    0xf4,
};

/* Returns 0, or 77 when there is no /dev/kvm to run it on. */
static int test_tiny_vm_rdmsr_is_answered_by_the_policy(pvemu_kvm *kvm) {
  int kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm_fd < 0 && errno == ENOENT) {
    printf("c_abi_test: no /dev/kvm here: the tiny VM did not run\n");
    return 77;
  }
  /* /dev/kvm exists: the VM part must run (a skip here would hide a failure). */
  CHECK(kvm_fd >= 0, "open /dev/kvm: %s", strerror(errno));
  if (kvm_fd < 0) return 0;

  int vm_fd = ioctl(kvm_fd, KVM_CREATE_VM, 0);
  CHECK(vm_fd >= 0, "KVM_CREATE_VM: %s", strerror(errno));
  const size_t mem_size = 0x10000;
  uint8_t *mem = mmap(NULL, mem_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(mem != MAP_FAILED, "mmap: %s", strerror(errno));
  memcpy(mem + 0x1000, kGuest, sizeof(kGuest));
  struct kvm_userspace_memory_region region = {
      .slot = 0, .guest_phys_addr = 0, .memory_size = mem_size, .userspace_addr = (uintptr_t)mem};
  CHECK(ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &region) == 0, "KVM_SET_USER_MEMORY_REGION: %s",
        strerror(errno));
  /* Real mode needs a TSS on VMX hosts without unrestricted guests. */
  ioctl(vm_fd, KVM_SET_TSS_ADDR, 0xfffbd000ul);

  int rc = pvemu_kvm_setup_vm(kvm, vm_fd);
  CHECK(rc == 0, "pvemu_kvm_setup_vm = %d: %s", rc, pvemu_kvm_last_error());

  int vcpu_fd = ioctl(vm_fd, KVM_CREATE_VCPU, 0);
  CHECK(vcpu_fd >= 0, "KVM_CREATE_VCPU: %s", strerror(errno));
  int run_size = ioctl(kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
  struct kvm_run *run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu_fd, 0);
  CHECK(run != MAP_FAILED, "mmap kvm_run: %s", strerror(errno));
  pvemu_kvm_vcpu *vcpu = NULL;
  rc = pvemu_kvm_vcpu_open(kvm, kvm_fd, vcpu_fd, 0, &vcpu);
  CHECK(rc == 0 && vcpu != NULL, "pvemu_kvm_vcpu_open = %d: %s", rc, pvemu_kvm_last_error());
  if (failures > 0) return 0;

  struct kvm_sregs sregs;
  ioctl(vcpu_fd, KVM_GET_SREGS, &sregs);
  sregs.cs.base = 0;
  sregs.cs.selector = 0;
  CHECK(ioctl(vcpu_fd, KVM_SET_SREGS, &sregs) == 0, "KVM_SET_SREGS: %s", strerror(errno));
  struct kvm_regs regs;
  memset(&regs, 0, sizeof(regs));
  regs.rip = 0x1000;
  regs.rflags = 0x2;
  CHECK(ioctl(vcpu_fd, KVM_SET_REGS, &regs) == 0, "KVM_SET_REGS: %s", strerror(errno));

  int halted = 0;
  for (int exits = 0; exits < 100 && !halted; ++exits) {
    if (ioctl(vcpu_fd, KVM_RUN, 0) != 0) {
      CHECK(0, "KVM_RUN: %s", strerror(errno));
      break;
    }
    int result = pvemu_kvm_handle_exit(vcpu, run);
    if (result == PVEMU_KVM_HANDLED) continue;
    CHECK(result == PVEMU_KVM_NOT_MINE, "handle_exit = %d on exit reason %u", result,
          run->exit_reason);
    CHECK(run->exit_reason == KVM_EXIT_HLT, "exit reason %u, want KVM_EXIT_HLT", run->exit_reason);
    halted = 1;
  }
  CHECK(halted, "the guest did not reach its HLT");

  CHECK(ioctl(vcpu_fd, KVM_GET_REGS, &regs) == 0, "KVM_GET_REGS: %s", strerror(errno));
  uint64_t value = (regs.rdx & 0xffffffffu) << 32 | (regs.rax & 0xffffffffu);
  CHECK(value == kNamedMsrValue, "RDMSR 0x%x read 0x%llx, want 0x%llx (the policy's CONST)",
        kNamedMsr, (unsigned long long)value, (unsigned long long)kNamedMsrValue);

  struct pvemu_kvm_stats stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  rc = pvemu_kvm_vcpu_stats(vcpu, &stats);
  CHECK(rc == (int)sizeof(stats), "pvemu_kvm_vcpu_stats = %d: %s", rc, pvemu_kvm_last_error());
  CHECK(stats.rdmsr == 1, "%llu RDMSR exits, want 1: the TSC read must stay in KVM",
        (unsigned long long)stats.rdmsr);
  CHECK(stats.completed == 1 && stats.exceptions == 0, "completed %llu, exceptions %llu",
        (unsigned long long)stats.completed, (unsigned long long)stats.exceptions);

  /* The same counts for an older caller: its fields, nothing past them. */
  struct old_stats_guarded old;
  fill_old(&old, sizeof(old.stats));
  rc = pvemu_kvm_vcpu_stats(vcpu, (struct pvemu_kvm_stats *)&old.stats);
  CHECK(rc == (int)sizeof(old.stats), "vcpu_stats, older size = %d: %s", rc,
        pvemu_kvm_last_error());
  CHECK(old.stats.rdmsr == 1 && old.stats.wrmsr == 0 && old.stats.io == 0,
        "older caller: rdmsr %llu wrmsr %llu io %llu, want 1 0 0",
        (unsigned long long)old.stats.rdmsr, (unsigned long long)old.stats.wrmsr,
        (unsigned long long)old.stats.io);
  CHECK(untouched(old.guard, sizeof(old.guard)), "vcpu_stats wrote past the older caller's size");

  pvemu_kvm_vcpu_close(vcpu);
  munmap(run, (size_t)run_size);
  close(vcpu_fd);
  close(vm_fd);
  munmap(mem, mem_size);
  close(kvm_fd);
  return 0;
}

int main(void) {
  const char *source_root = getenv("PVEMU_SOURCE_ROOT");
  if (source_root == NULL) {
    fprintf(stderr, "c_abi_test: PVEMU_SOURCE_ROOT is not set (meson test sets it)\n");
    return 1;
  }
  snprintf(policy_path, sizeof(policy_path), "%s/tests/kvm/policies/in-kernel.textproto",
           source_root);

  struct pvemu_kvm_options options = policy_options(policy_path);
  pvemu_kvm *kvm = NULL;
  int rc = pvemu_kvm_open(&options, &kvm);
  CHECK(rc == 0 && kvm != NULL, "pvemu_kvm_open(%s) = %d: %s", policy_path, rc,
        pvemu_kvm_last_error());
  if (kvm == NULL) return 1;

  test_filter_text_lists_the_named_msr(kvm);
  test_errors_are_negative_errno_with_a_message();
  test_stats_older_caller_gets_its_fields_only(kvm);
  test_stats_newer_caller_keeps_the_fields_it_added(kvm);
  test_stats_size_too_small_or_unset_is_refused(kvm);
  test_options_from_a_newer_caller();
  int vm = test_tiny_vm_rdmsr_is_answered_by_the_policy(kvm);
  pvemu_kvm_close(kvm);

  if (failures > 0) {
    fprintf(stderr, "c_abi_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c_abi_test: all checks passed%s\n", vm == 77 ? " but the VM part (no /dev/kvm)" : "");
  return vm;
}
