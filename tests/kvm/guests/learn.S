# learn: a guest touching a known set of MSRs and ports, for the learning
# loop (kvm_learn_test) under tests/kvm/policies/learn-base.textproto, a
# deny-by-default policy: reads and writes of a GP-ruled MSR, a read of an
# MSR no rule names, a read of an allowed (ZERO) MSR, and IN/OUT on the
# runner's scratch register (0x510), which the base policy does not grant.
# learn_more.S is the same guest touching one more MSR.
        .include "lib.inc"
        .include "learn_body.inc"

main:
        LEARN_BODY
        GP_PRINT
        STOP
