# ports: IN and OUT of each size on the runner's scratch register (0x510),
# on a granted port without a device (0x70) and on a port no policy grants
# (0x80). Run under tests/kvm/policies/ports-allowed.textproto (0x510-0x513
# and 0x70-0x71 granted) and ports-denied.textproto (neither): 13 accesses,
# 12 of them at 0x510-0x513 or 0x70 and one at 0x80.
        .include "lib.inc"

main:
        IN_PRINT 4, 0x510
        OUT_PRINT 4, 0x510, 0x12345678
        IN_PRINT 4, 0x510
        # 8- and 16-bit accesses touch only the low bytes.
        OUT_PRINT 1, 0x510, 0xab
        IN_PRINT 4, 0x510
        OUT_PRINT 2, 0x510, 0xcdef
        IN_PRINT 4, 0x510
        IN_PRINT 1, 0x510
        IN_PRINT 2, 0x510
        # Inside the scratch register's ports but not at its base: all ones.
        IN_PRINT 1, 0x512
        # Granted (in ports-allowed), but the runner has no device there.
        OUT_PRINT 1, 0x70, 0x1
        IN_PRINT 1, 0x70
        # Never granted.
        IN_PRINT 1, 0x80
        STOP
