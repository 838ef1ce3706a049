# unknown_msr: an MSR no rule names and KVM does not know (0x87654321)
# follows the policy's unknown_msr; a write KVM rejects (EFER with reserved
# bit 63) is #GP whatever unknown_msr says. 1 RDMSR and 2 WRMSR exits: the
# EFER read stays in KVM.
        .include "lib.inc"

main:
        RDMSR_PRINT 0x87654321
        WRMSR_PRINT 0x87654321, 0x1
        mov $0xc0000080, %ecx
        rdmsr
        shl $32, %rdx
        mov %eax, %eax
        or %rdx, %rax
        bts $63, %rax
        WRMSR_PRINT_RAX 0xc0000080
        GP_PRINT
        STOP
