# live_read_loop: for the live-edit tests (tests/kvm/kvm_live_test.cc).
# Reads MSR 0x12345670 and prints it, again and again. It stops when MSR
# 0x12345671 reads non-zero, or after 0x12345672 reads (read once, at the
# start; 0: no limit) that differ from the first value it read: so a test
# can let the guest run until the policy changed, and then for a while. All
# three are CONST rules the tests edit through pvemud.
        .include "lib.inc"

main:
        RDMSR_PRINT 0x12345672
        mov %rax, %r12           # reads of a changed value left; 0: no limit
        RDMSR_PRINT 0x12345670
        mov %rax, %r13           # the first value
1:      RDMSR_PRINT 0x12345670
        cmp %r13, %rax
        je 2f
        dec %r12
        jz 3f
2:      mov $0x12345671, %ecx
        xor %eax, %eax           # a #GP leaves 0 here: keep going
        xor %edx, %edx
        rdmsr
        or %edx, %eax
        jz 1b
        SAY "done: stop flag"
        STOP
3:      SAY "done: read limit"
        STOP
