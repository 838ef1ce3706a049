# msr_actions: one vCPU reads and writes one MSR per policy action of
# tests/kvm/policies/msr-actions.textproto and prints what it saw.
# 10 RDMSR and 8 WRMSR exits, 4 of them #GP (kvm_vm_test counts them).
        .include "lib.inc"

main:
        # PASSTHROUGH: MSR_PLATFORM_INFO, the sim profile's value.
        RDMSR_PRINT 0xce
        # CONST, whose write is GP.
        RDMSR_PRINT 0x12345600
        WRMSR_PRINT 0x12345600, 0x1
        # ZERO, whose write is IGNORE.
        RDMSR_PRINT 0x12345601
        # GP on both.
        RDMSR_PRINT 0x12345602
        WRMSR_PRINT 0x12345602, 0x1
        # IGNORE: the write completes and changes nothing.
        WRMSR_PRINT 0x12345603, 0x77
        RDMSR_PRINT 0x12345603
        # SHADOW: the write is read back.
        WRMSR_PRINT 0x12345604, 0xfeedfacecafef00d
        RDMSR_PRINT 0x12345604
        # SHADOW with writable_mask 0xff: changing the low byte is allowed;
        # clearing bit 8 (outside the mask) is #GP (RESERVED_GP) ...
        WRMSR_PRINT 0x12345605, 0xff42
        WRMSR_PRINT 0x12345605, 0x0042
        RDMSR_PRINT 0x12345605
        # ... or the whole write is dropped (RESERVED_DROP).
        WRMSR_PRINT 0x12345606, 0x1ff42
        RDMSR_PRINT 0x12345606
        # SHADOW without a value starts from the host's (the sim profile's
        # IA32_ENERGY_PERF_BIAS).
        RDMSR_PRINT 0x1b0
        WRMSR_PRINT 0x1b0, 0x1
        RDMSR_PRINT 0x1b0
        GP_PRINT
        STOP
