# shadow_per_vcpu: two vCPUs and one SHADOW MSR (0x12345607, initial 0x5 in
# tests/kvm/policies/msr-actions.textproto). Each vCPU has its own register:
# vCPU 0 writes 0x1111, vCPU 1 still reads 0x5, writes 0x2222, and vCPU 0
# still reads 0x1111. The vCPUs take turns through `step` in guest memory.
        .include "lib.inc"

main:
        test %r15, %r15
        jnz vcpu1
        RDMSR_PRINT 0x12345607
        WRMSR_PRINT 0x12345607, 0x1111
        RDMSR_PRINT 0x12345607
        SET step, 1
        WAIT_FOR step, 2
        RDMSR_PRINT 0x12345607
        GP_PRINT
        STOP

vcpu1:
        cmp $1, %r15
        jne others
        WAIT_FOR step, 1
        RDMSR_PRINT 0x12345607
        WRMSR_PRINT 0x12345607, 0x2222
        RDMSR_PRINT 0x12345607
        GP_PRINT
        SET step, 2
        STOP

# A run with more vCPUs than the two this guest needs says so and fails.
others:
        SAY "shadow_per_vcpu needs exactly 2 vcpus"
        EXIT GUEST_FAILED

        .subsection 2
step:   .quad 0
        .subsection 0
