# audit_loop: WRMSR in tight loops, each loop timed with RDTSC, for the
# audit stream's cost (tests/kvm/policies/audit-loop.textproto, under
# pvemud). Three rounds, each of N writes (N = what MSR 0x123456a0 reads)
# to, in turn:
#   0x123456a1: IGNORE, not audited (the baseline);
#   0x123456a2: IGNORE with audit: true (an "audit-rule" event each);
#   0x87654321: no rule, unknown to KVM, so unknown_msr (UNKNOWN_RELAXED:
#               the write completes) decides, an "unknown-msr" event each,
#               which pvemud rate-limits per (domain, MSR).
# After each loop: "cpu0: wrmsr 0xMSR xN: T tsc, G #GP" (T the TSC ticks
# the whole loop took, G the writes that faulted); a test compares each
# MSR's fastest round, which other work on the machine disturbs least.
        .include "lib.inc"

        .set AUDIT_COUNT_MSR, 0x123456a0

main:
        mov $AUDIT_COUNT_MSR, %ecx
        rdmsr
        shl $32, %rdx
        mov %eax, %eax
        or %rdx, %rax
        mov %rax, %r12           # N
        mov $3, %r13d            # rounds
1:      mov $0x123456a1, %ebx
        call write_loop
        mov $0x123456a2, %ebx
        call write_loop
        mov $0x87654321, %ebx
        call write_loop
        dec %r13d
        jnz 1b
        STOP

# write_loop: %r12 writes of the loop index to MSR %ebx, and the line.
write_loop:
        lea gp_counts(%rip), %rdi
        mov (%rdi,%r15,8), %r9   # #GPs before
        rdtsc
        shl $32, %rdx
        mov %eax, %eax
        or %rdx, %rax
        mov %rax, %r8            # start
        xor %r10d, %r10d
1:      cmp %r12, %r10
        jae 2f
        mov %ebx, %ecx
        mov %r10d, %eax
        xor %edx, %edx
        wrmsr
        inc %r10
        jmp 1b
2:      rdtsc
        shl $32, %rdx
        mov %eax, %eax
        or %rdx, %rax
        sub %r8, %rax
        mov %rax, %r8            # ticks
        call put_prefix
        PRINT "wrmsr "
        mov %rbx, %rax
        call put_hex
        PRINT " x"
        mov %r12, %rax
        call put_dec
        PRINT ": "
        mov %r8, %rax
        call put_dec
        PRINT " tsc, "
        mov (%rdi,%r15,8), %rax
        sub %r9, %rax
        call put_dec
        PRINT " #GP\n"
        ret
