# msr_odd_indices: the MSR indices at the edges of the space and those the
# Linux KVM selftest userspace_msr_exit_test.c uses, read, written and read
# again: 0 (IA32_P5_MC_ADDR, whose read KVM answers itself), 0xffffffff (the
# last index), 0xdeadbeef and 0x474f4f00 ("GOO\0", the selftest's
# MSR_NON_EXISTENT), the last three unknown to KVM. Then the x2APIC
# range: IA32_APIC_BASE (0x1b) shows x2APIC disabled (bit 10 clear), and each
# of 0x800-0x8ff is read and written (value 0) silently, the #GPs counted:
#   "cpu0: x2apic 0x800-0x8ff: 256 reads 256 #GP, 256 writes 256 #GP"
# No KVM MSR filter can hold those: KVM decides them, and with no in-kernel
# APIC (pvemu-vm makes none) and x2APIC disabled it rejects every access,
# so each faults whatever the policy's unknown_msr says. Run under
# tests/kvm/policies/msr-odd-named.textproto (a rule for each of the four)
# and unknown-gp / unknown-relaxed.textproto.
        .include "lib.inc"

main:
        RDMSR_PRINT 0x0
        WRMSR_PRINT 0x0, 0x1
        RDMSR_PRINT 0x0
        RDMSR_PRINT 0xffffffff
        WRMSR_PRINT 0xffffffff, 0x1
        RDMSR_PRINT 0xffffffff
        RDMSR_PRINT 0xdeadbeef
        WRMSR_PRINT 0xdeadbeef, 0x1
        RDMSR_PRINT 0xdeadbeef
        RDMSR_PRINT 0x474f4f00
        WRMSR_PRINT 0x474f4f00, 0x1
        RDMSR_PRINT 0x474f4f00
        RDMSR_PRINT 0x1b

        # The x2APIC range: %r12 = read #GPs, %r13 = write #GPs.
        lea gp_counts(%rip), %rdi
        xor %r12d, %r12d
        xor %r13d, %r13d
        mov $0x800, %ebx
1:      mov (%rdi,%r15,8), %rsi
        mov %ebx, %ecx
        rdmsr
        cmp (%rdi,%r15,8), %rsi
        je 2f
        inc %r12
2:      mov (%rdi,%r15,8), %rsi
        mov %ebx, %ecx
        xor %eax, %eax
        xor %edx, %edx
        wrmsr
        cmp (%rdi,%r15,8), %rsi
        je 3f
        inc %r13
3:      inc %ebx
        cmp $0x900, %ebx
        jb 1b
        call put_prefix
        PRINT "x2apic 0x800-0x8ff: 256 reads "
        mov %r12, %rax
        call put_dec
        PRINT " #GP, 256 writes "
        mov %r13, %rax
        call put_dec
        PRINT " #GP\n"
        GP_PRINT
        STOP
