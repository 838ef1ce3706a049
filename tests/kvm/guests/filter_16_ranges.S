# filter_16_ranges: reads the 16 MSRs of
# tests/kvm/policies/filter-16-ranges.textproto, each in a KVM filter range
# of its own: all 16 ranges are installed and each MSR exits to pvemu.
        .include "lib.inc"

main:
        RDMSR_PRINT 0xf000010
        RDMSR_PRINT 0x1e000010
        RDMSR_PRINT 0x2d000010
        RDMSR_PRINT 0x3c000010
        RDMSR_PRINT 0x4b000010
        RDMSR_PRINT 0x5a000010
        RDMSR_PRINT 0x69000010
        RDMSR_PRINT 0x78000010
        RDMSR_PRINT 0x87000010
        RDMSR_PRINT 0x96000010
        RDMSR_PRINT 0xa5000010
        RDMSR_PRINT 0xb4000010
        RDMSR_PRINT 0xc3000010
        RDMSR_PRINT 0xd2000010
        RDMSR_PRINT 0xe1000010
        RDMSR_PRINT 0xf0000010
        GP_PRINT
        STOP
