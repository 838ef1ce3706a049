# learn_more: learn.S plus one read of an MSR the learning run never saw
# (0x12345620): under the drafted policy in ENFORCE, exactly that read faults.
        .include "lib.inc"
        .include "learn_body.inc"

main:
        LEARN_BODY
        RDMSR_PRINT 0x12345620
        GP_PRINT
        STOP
