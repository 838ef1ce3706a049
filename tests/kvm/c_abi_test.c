/*
 * The C ABI (kvm/pvemu_kvm.h) used from a program compiled as C11, as a VMM
 * written in C uses it: open a handle on a policy file, read its MSR filter,
 * see the error path, and, where /dev/kvm exists, run a tiny real-mode VM
 * whose RDMSR of a named MSR pvemu answers while an unnamed one stays in KVM.
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
  pvemu_kvm_vcpu_stats(vcpu, &stats);
  CHECK(stats.rdmsr == 1, "%llu RDMSR exits, want 1: the TSC read must stay in KVM",
        (unsigned long long)stats.rdmsr);
  CHECK(stats.completed == 1 && stats.exceptions == 0, "completed %llu, exceptions %llu",
        (unsigned long long)stats.completed, (unsigned long long)stats.exceptions);

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
  int vm = test_tiny_vm_rdmsr_is_answered_by_the_policy(kvm);
  pvemu_kvm_close(kvm);

  if (failures > 0) {
    fprintf(stderr, "c_abi_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c_abi_test: all checks passed%s\n", vm == 77 ? " but the VM part (no /dev/kvm)" : "");
  return vm;
}
