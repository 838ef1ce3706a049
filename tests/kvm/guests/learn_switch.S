# learn_switch: the learning loop's guest (learn.S) for a switch made while
# it runs. Under tests/kvm/policies/learn-base.textproto in ENFORCE it reads
# 0x12345602, a GP-ruled MSR, again and again, silently, until a read
# completes: the operator switched domain 1 to LEARN with `pvemuctl policy
# set-mode`. Then it says so, forgets the #GPs it took while waiting, and
# makes learn.S's accesses.
        .include "lib.inc"
        .include "learn_body.inc"

main:
        lea gp_counts(%rip), %rdi
1:      pause
        mov (%rdi,%r15,8), %rsi
        mov $0x12345602, %ecx
        rdmsr
        cmp (%rdi,%r15,8), %rsi
        jne 1b
        movq $0, (%rdi,%r15,8)
        SAY "switched to learning"
        LEARN_BODY
        GP_PRINT
        STOP
