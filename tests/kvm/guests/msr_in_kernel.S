# msr_in_kernel: 1000 reads each of IA32_TSC (0x10) and IA32_APIC_BASE
# (0x1b), which no rule of tests/kvm/policies/in-kernel.textproto names and
# KVM emulates: they must cost no user-space exit. One read of the one named
# MSR at the end proves the exit counter counts.
        .include "lib.inc"

        .set LOOPS, 1000

main:
        mov $0x10, %ecx
        rdmsr
        shl $32, %rdx
        mov %eax, %eax
        or %rdx, %rax
        mov %rax, %r12           # the first TSC read
        mov $LOOPS, %r13d
1:      mov $0x10, %ecx
        rdmsr
        mov $0x1b, %ecx
        rdmsr
        dec %r13d
        jnz 1b
        mov $0x10, %ecx
        rdmsr
        shl $32, %rdx
        mov %eax, %eax
        or %rdx, %rax
        mov %rax, %r13           # the last TSC read (printing clobbers %rax)

        call put_prefix
        PRINT "read 0x10 and 0x1b "
        mov $LOOPS, %eax
        call put_dec
        PRINT " times, tsc advanced "
        cmp %r12, %r13
        ja 2f
        PRINT "no\n"
        jmp 3f
2:      PRINT "yes\n"
3:      GP_PRINT
        RDMSR_PRINT 0x12345600
        STOP
