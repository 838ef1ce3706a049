/*
 * pvemu_kvm.h: pvemu's KVM data plane, for a VMM written in C, C++ or Rust.
 *
 * A VMM opens one handle per domain (VM). The handle holds the domain's
 * compiled policy and answers the guest's MSR and port accesses in the VMM's
 * own process: no IPC per exit. The policy comes from a file or a shipped
 * policy's name (standalone), or from pvemud's socket (subscribed: pvemud
 * sends every new generation, which swaps in atomically).
 *
 * The sequence a VMM follows (README, "pvemu on KVM"):
 *   pvemu_kvm_open                      once per domain
 *   KVM_CREATE_VM, then pvemu_kvm_setup_vm(vm_fd)
 *                                       user-space MSR exits + the MSR filter
 *   KVM_CREATE_VCPU, mmap kvm_run, then pvemu_kvm_vcpu_open
 *                                       KVM_SET_CPUID2 from the CPUID policy
 *   loop: KVM_RUN; pvemu_kvm_handle_exit(vcpu, run) says whether pvemu
 *         answered the exit, or the exit is the VMM's own
 *   pvemu_kvm_vcpu_close, pvemu_kvm_close
 *
 * Errors: every function returning int returns 0 (or a non-negative result
 * where its comment says so) or a negative errno. After a failure,
 * pvemu_kvm_last_error() gives a sentence saying what failed, where, and
 * what to do. No C++ exception crosses this interface.
 *
 * Threads: one handle serves all of a domain's vCPU threads. Each
 * pvemu_kvm_vcpu is used by one thread at a time (its vCPU's). On the exit
 * path pvemu_kvm_handle_exit allocates nothing, takes no lock and never
 * waits on the network.
 *
 * How the ABI grows. Every struct that crosses it starts with
 * `uint32_t size`, which the caller sets to sizeof the struct as the
 * caller's header declares it; zero-initialise the rest before filling it.
 *   - Fields are only appended: never removed, reordered, retyped or
 *     resized, and `size` stays first. An appended field's zero means what
 *     the library did before the field existed, so an older caller (which
 *     leaves it out) and a newer caller that leaves it 0 get the same.
 *   - A struct the caller fills (pvemu_kvm_options). A smaller size, from
 *     an older caller: the fields past it count as 0. A larger size, from a
 *     newer caller: the library reads the fields it knows, and the bytes
 *     past them must be 0 (a field it does not know, set, asks for what it
 *     cannot do): otherwise -E2BIG, the message naming the offset.
 *   - A struct the library fills (pvemu_kvm_stats). It writes the fields it
 *     knows that lie wholly within `size`, and not one byte past `size`;
 *     it never writes the header (`size` and what pads it). It returns how
 *     many leading bytes of the struct it accounts for: the end of the last
 *     field it wrote, or of the header. A smaller size, from an older
 *     caller: only that caller's fields are written. A larger size, from a
 *     newer caller: the fields this library does not know are left as the
 *     caller set them (0 when zero-initialised); the result says so.
 *   - A size smaller than the `size` field itself is -EINVAL, and so is a
 *     size above 4096 (no version of a struct is that large: the caller
 *     did not set it); pvemu_kvm_options has a larger minimum (below).
 *   - Functions are only added.
 *
 * The soname (libpvemu-kvm.so.N) and the symbol version node
 * (PVEMU_KVM_<N>, pvemu_kvm.map) change N exactly when a program built
 * against the older header could break: a function removed or its
 * parameters or result changed, a field removed, reordered, retyped or
 * resized (inserting a field before others reorders them), an enum value's
 * meaning changed, or a new value returned to callers that did not ask for
 * it. Appending fields (behind `size`) and adding functions keep N.
 */
#ifndef PVEMU_KVM_H_
#define PVEMU_KVM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvm_run;

/* One domain's data plane (opaque). */
typedef struct pvemu_kvm pvemu_kvm;
/* One vCPU of it (opaque). */
typedef struct pvemu_kvm_vcpu pvemu_kvm_vcpu;

/* What pvemu_kvm_open needs. Zero-initialise, set `size`, fill the rest.
 * It grows as "How the ABI grows" says (above). */
struct pvemu_kvm_options {
  /* sizeof(struct pvemu_kvm_options) as the caller's header declares it;
   * at least the first version's, which ends after host_profile. */
  uint32_t size;
  /* The domain (VM) number the policy's domain layers and counts use. */
  uint32_t domain;
  /* Standalone: a policy file, or a shipped or installed policy's name
   * ("kvm", "default"): the whole policy, as `pvemud --policy`. */
  const char *policy;
  /* Subscribed: pvemud's address ("unix:/run/pvemu/pvemu.sock", or a path).
   * Exactly one of `policy` and `server` is set. */
  const char *server;
  /* Subscribed: how long open waits for the first policy, in milliseconds
   * (0: 5000). A daemon that does not answer in time fails the open. */
  uint32_t connect_timeout_ms;
  /* The host PASSTHROUGH reads and host CPUID leaves come from: "sim"
   * (NULL or "": the default) or "linux" (/dev/cpu/N/msr, the real CPU). */
  const char *host;
  /* sim only: a shipped host profile's name ("amd-epyc-7443p") or a
   * profile file; NULL or "": the shipped Intel profile. */
  const char *host_profile;
  /* Appended (a caller whose size ends before it reads as NULL): a trap
   * log (.traps, or .textproto) that records every exit pvemu decides, with
   * the answer the guest got and, for an access a learning domain got
   * relaxed, that it was (`pvemuctl replay` and `suggest` read it). Written
   * out completely by pvemu_kvm_close. NULL or "": no capture. */
  const char *capture;
  /* Appended: nonzero counts MSR accesses per (MSR, access, action) for
   * pvemu_kvm_msr_counts (a few nanoseconds an MSR exit: one counter store
   * for an MSR a rule names, a hashed table for the others; a subscribed
   * data plane always counts, for pvemud). 0: the exits count only in
   * pvemu_kvm_stats. */
  uint32_t count_msrs;
  /* Appended (in what was count_msrs' tail padding, so sizeof is
   * unchanged: an older caller that zero-initialised reads as 0): nonzero
   * times each exit's decision for pvemu_kvm_stats.pvemu_ns (two TSC reads,
   * about 10 ns an exit, a fifth of the decision). 0: pvemu_ns stays 0. */
  uint32_t time_exits;
};

/*
 * Opens the data plane of one domain. On success *out holds the handle and 0
 * is returned. Fails with -EINVAL for bad options or a policy that is invalid
 * or that KVM's MSR filter cannot express (the message names the rules),
 * -ENOENT for a missing policy file, -ECONNREFUSED or -ETIMEDOUT when the
 * daemon is not reachable in time, -ENOMEM. -EINVAL too for an
 * options->size below the first version's or above 4096, and -E2BIG for a
 * larger struct from a newer header that sets a field this library does
 * not know (the message names its offset).
 */
int pvemu_kvm_open(const struct pvemu_kvm_options *options, pvemu_kvm **out);

/* Closes a handle whose vCPUs are all closed. NULL is a no-op. */
void pvemu_kvm_close(pvemu_kvm *kvm);

/*
 * Sets up a VM created with KVM_CREATE_VM, before its vCPUs: enables
 * KVM_CAP_X86_USER_SPACE_MSR with the reasons FILTER, UNKNOWN and INVAL, and
 * installs the MSR filter compiled from the policy. Later policy generations
 * reinstall the filter on this VM when the set of exiting MSRs changes.
 * -EOPNOTSUPP when KVM lacks user-space MSR exits or the MSR filter; other
 * ioctl failures as their errno. `vm_fd` stays the caller's; it must stay
 * open until pvemu_kvm_close.
 */
int pvemu_kvm_setup_vm(pvemu_kvm *kvm, int vm_fd);

/*
 * Sets up vCPU `index` (0-based) created with KVM_CREATE_VCPU, before its
 * first KVM_RUN: KVM_SET_CPUID2 from the domain's CPUID policy over
 * KVM_GET_SUPPORTED_CPUID (read through `kvm_fd`, the /dev/kvm descriptor).
 * Leaves the policy does not set are KVM's; leaves it takes from the host
 * come from the `host` backend, masked as the policy says; a guest_vendor
 * sets leaf 0's vendor string. KVM refuses CPUID changes after the first
 * KVM_RUN, so CPUID edits reach only vCPUs opened afterwards.
 * `vcpu_fd` must stay open until pvemu_kvm_vcpu_close: an exit that records
 * a first access (the first-access log, a learning domain's first relaxed
 * access) reads the guest RIP with KVM_GET_REGS on it, from the thread
 * calling pvemu_kvm_handle_exit.
 * On success *out holds the vCPU and 0 is returned.
 */
int pvemu_kvm_vcpu_open(pvemu_kvm *kvm, int kvm_fd, int vcpu_fd, uint32_t index,
                        pvemu_kvm_vcpu **out);

/* Closes a vCPU; its counts stay in the handle's totals. NULL is a no-op. */
void pvemu_kvm_vcpu_close(pvemu_kvm_vcpu *vcpu);

/* What pvemu_kvm_handle_exit did (its non-negative results). */
enum pvemu_kvm_exit_result {
  /* pvemu answered: KVM_EXIT_X86_RDMSR/WRMSR (msr.error and msr.data set;
   * RIP is KVM's to move), or KVM_EXIT_IO on a port outside the domain's
   * io_port ranges (IN reads all ones, OUT is dropped). Run the vCPU again. */
  PVEMU_KVM_HANDLED = 0,
  /* KVM_EXIT_IO on a port inside the domain's io_port ranges that the host
   * backend models no device for: the access is the caller's device model's.
   * "Inside" means every byte of [port, port + size): a 4-byte access at a
   * port granted alone is outside, and pvemu answers it (all ones). */
  PVEMU_KVM_DEVICE = 1,
  /* Any other exit reason: not pvemu's; the caller handles it. */
  PVEMU_KVM_NOT_MINE = 2,
};

/*
 * Handles one exit of `vcpu` from its kvm_run area. Returns an
 * enum pvemu_kvm_exit_result, or a negative errno for a malformed exit that
 * KVM never makes (an I/O size other than 1, 2 or 4, a direction other than
 * in or out, data at `data_offset` that does not lie wholly inside the
 * mapping's KVM_GET_VCPU_MMAP_SIZE bytes): -EINVAL, with nothing read or
 * written. Never moves RIP.
 */
int pvemu_kvm_handle_exit(pvemu_kvm_vcpu *vcpu, struct kvm_run *run);

/* Counts of the exits one vCPU handed to pvemu_kvm_handle_exit.
 * Zero-initialise, set `size`; the library fills the counts. It grows as
 * "How the ABI grows" says (above): counts are only appended. */
struct pvemu_kvm_stats {
  /* sizeof(struct pvemu_kvm_stats) as the caller's header declares it: the
   * library writes no byte at or past `size` bytes from the struct's start.
   * The library reads it and never writes it. */
  uint32_t size;
  uint32_t reserved;    /* 0: the counts start 8-byte aligned; the library
                         * neither reads nor writes it */
  uint64_t rdmsr;       /* KVM_EXIT_X86_RDMSR */
  uint64_t wrmsr;       /* KVM_EXIT_X86_WRMSR */
  uint64_t io;          /* KVM_EXIT_IO */
  uint64_t completed;   /* answered with a value / write done or dropped */
  uint64_t exceptions;  /* answered with #GP */
  uint64_t device;      /* PVEMU_KVM_DEVICE */
  uint64_t pvemu_ns;    /* time spent deciding, in nanoseconds, with
                         * options.time_exits (else 0); the first exits of a
                         * vCPU are cold (caches, page faults), so judge the
                         * cost per exit over many exits */
};

/*
 * Copies vCPU `vcpu`'s counts into *out (lock-free; from its own thread):
 * each count this library keeps that lies wholly within out->size bytes;
 * nothing at or past out->size, and never `size` or `reserved`. Returns the
 * number of leading bytes of *out it accounts for: the end of the last
 * field it wrote, or of the last header field that fits (4 or 8) when no
 * count fits. A count that ends past the result was not written: it holds
 * what the caller put there. Reading it back:
 *     struct pvemu_kvm_stats s = {.size = sizeof s};
 *     int n = pvemu_kvm_vcpu_stats(vcpu, &s);   (n < 0: an error)
 *     if (n >= (int)(offsetof(struct pvemu_kvm_stats, device) + 8)) ... s.device
 * -EINVAL when out is NULL, or out->size is below sizeof(uint32_t) or above
 * 4096; *out is then left as it was. A NULL vcpu has zero counts.
 */
int pvemu_kvm_vcpu_stats(const pvemu_kvm_vcpu *vcpu, struct pvemu_kvm_stats *out);

/* The sum over every vCPU of the handle, open or closed (lock-free for the
 * vCPUs; takes a short lock that no exit takes), written and returned as
 * pvemu_kvm_vcpu_stats does. A NULL kvm has zero counts. */
int pvemu_kvm_totals(const pvemu_kvm *kvm, struct pvemu_kvm_stats *out);

/* What decided an MSR access, as `pvemuctl stats --msrs` and pvemud's
 * pvemu_msr_accesses_total name it (pvemu_kvm_msr_action_name). */
enum pvemu_kvm_msr_action {
  PVEMU_KVM_MSR_PASSTHROUGH = 0,
  PVEMU_KVM_MSR_CONST = 1,
  PVEMU_KVM_MSR_SHADOW = 2,
  PVEMU_KVM_MSR_ZERO = 3,
  PVEMU_KVM_MSR_GP = 4,
  PVEMU_KVM_MSR_IGNORE = 5,
  PVEMU_KVM_MSR_UNKNOWN_GP = 6,       /* no rule: the unknown-MSR mode */
  PVEMU_KVM_MSR_UNKNOWN_RELAXED = 7,
  PVEMU_KVM_MSR_LEARN_RELAXED = 8,    /* a learning domain's would-be #GP */
};

/* One (MSR, access, action) and how many accesses it had. Grows as the
 * other structs do: `size` first, fields appended. */
struct pvemu_kvm_msr_count {
  uint32_t size;    /* caller: sizeof as its header declares it */
  uint32_t msr;     /* the MSR; 0 when `other` */
  uint32_t write;   /* 1: WRMSR, 0: RDMSR */
  uint32_t action;  /* enum pvemu_kvm_msr_action */
  uint32_t other;   /* 1: the MSRs past the per-domain bound of 64 unnamed
                     * MSRs, together */
  uint32_t reserved;
  uint64_t count;
};

/*
 * The handle's MSR accesses by (MSR, access, action), every vCPU's, open or
 * closed, sorted by MSR (other last), access, action; needs
 * options->count_msrs (or a subscribed handle). Writes at most `max` rows
 * into out[0..max), each out[i].size bytes apart as out[0].size says (set it
 * to sizeof(struct pvemu_kvm_msr_count)); a field past that size is not
 * written. Returns the number of rows there are (which may exceed max: call
 * again with a larger array), or a negative errno: -EINVAL for a NULL kvm, a
 * NULL out with max > 0, or out[0].size below 8 or above 4096;
 * -EOPNOTSUPP when the handle does not count MSR accesses.
 * Off the exit path: takes the handle's locks and allocates.
 */
int pvemu_kvm_msr_counts(const pvemu_kvm *kvm, struct pvemu_kvm_msr_count *out, uint32_t max);

/* "PASSTHROUGH", ..., "LEARN_RELAXED"; "?" for a value this library does not
 * know. */
const char *pvemu_kvm_msr_action_name(uint32_t action);

/* The policy generation in force (the daemon's, when subscribed). */
uint64_t pvemu_kvm_generation(const pvemu_kvm *kvm);

/*
 * The MSR filter in force, as text for people (the `pvemuctl kvm-filter`
 * format), written NUL-terminated into buf (at most len bytes). Returns the
 * length the whole text needs, excluding the NUL, or a negative errno.
 */
int pvemu_kvm_filter_text(const pvemu_kvm *kvm, char *buf, size_t len);

/*
 * The message of the last failing call on this thread ("" if none). Valid
 * until the next failing call on this thread.
 */
const char *pvemu_kvm_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* PVEMU_KVM_H_ */
