# msr_filter_swap_loop: every vCPU reads three MSRs in a loop, silently,
# while the test swaps domain 1's layer between
# tests/kvm/policies/msr-swap-old.textproto and msr-swap-new.textproto
# through pvemud, each swap changing the set of MSRs that exit (so the data
# plane reinstalls the KVM MSR filter while the vCPUs run):
#   0x277 (IA32_CR_PAT, which KVM knows): old: CONST 0x0606060606060606;
#         new: no rule, so KVM answers: its reset value 0x0007040600070406;
#   0x12345680: old: CONST 0xa; new: CONST 0xb (the filter keeps it);
#   0x12345681 (unknown to KVM): old: no rule, so unknown_msr: #GP;
#         new: CONST 0xb.
# IA32_CR_PAT is read three times a loop, the others once. Each read is
# classed as the old policy's answer, the new one's, or
# neither (counted, the first one kept). The loop ends when 0x12345682 (a
# CONST rule of both layers, 0 until the test sets it) reads non-zero; then
# each vCPU in turn prints, per MSR:
#   "cpuN: msr 0x277 old O new W other X first-other none"
# (first-other: "#GP" or the value), and how often 0x12345680's value
# changed between two loops: "cpuN: changes C loops L". It says
# "cpuN: looping" once it is in the loop.
        .include "lib.inc"

        .set PAT_OLD, 0x0606060606060606
        .set PAT_KVM, 0x0007040600070406

# vCPUs print in turn: WAIT_TURN waits until `var` is this vCPU's index,
# NEXT_TURN passes it on.
.macro WAIT_TURN var
.Lturn_wait\@:
        cmp \var(%rip), %r15
        je .Lturn_done\@
        pause
        jmp .Lturn_wait\@
.Lturn_done\@:
.endm

.macro NEXT_TURN var
        incq \var(%rip)
.endm

# Per vCPU (indexed by %r15): 3 MSRs x (old, new, other, first-other,
# has-other) quadwords, then changes and loops.
        .set SLOT_OLD, 0
        .set SLOT_NEW, 8
        .set SLOT_OTHER, 16
        .set SLOT_FIRST, 24
        .set SLOT_HAS, 32
        .set SLOT_SIZE, 40
        .set VCPU_CHANGES, 3 * SLOT_SIZE
        .set VCPU_LOOPS, 3 * SLOT_SIZE + 8
        .set VCPU_SIZE, 3 * SLOT_SIZE + 16

# read_msr: RDMSR of %ecx; %rax = the value, %rdx = 1 after a #GP (then
# %rax is the poison 0xdeadbeefdeadbeef, never a policy's answer here).
read_msr:
        push %rsi
        push %rdi
        lea gp_counts(%rip), %rdi
        mov (%rdi,%r15,8), %rsi
        mov $0xdeadbeef, %eax
        mov %eax, %edx
        rdmsr
        shl $32, %rdx
        mov %eax, %eax
        or %rdx, %rax
        xor %edx, %edx
        cmp (%rdi,%r15,8), %rsi
        je 1f
        mov $1, %edx
1:      pop %rdi
        pop %rsi
        ret

# classify: %rax/%rdx as read_msr left them, %r8 = the old answer, %r9 =
# the new one (-1: #GP), %rdi = the MSR's slot.
classify:
        test %rdx, %rdx
        jz 1f
        mov $-1, %rax            # #GP
1:      cmp %r8, %rax
        jne 2f
        incq SLOT_OLD(%rdi)
        ret
2:      cmp %r9, %rax
        jne 3f
        incq SLOT_NEW(%rdi)
        ret
3:      incq SLOT_OTHER(%rdi)
        cmpq $0, SLOT_HAS(%rdi)
        jne 4f
        mov %rax, SLOT_FIRST(%rdi)
        movq $1, SLOT_HAS(%rdi)
4:      ret

main:
        # %rbp = this vCPU's counters.
        lea counters(%rip), %rbp
        imul $VCPU_SIZE, %r15, %rax
        add %rax, %rbp
        # Take turns to say we are looping (lines never interleave).
        WAIT_TURN looping_turn
        SAY "looping"
        NEXT_TURN looping_turn
        mov $-2, %r12            # 0x12345680's last value (none yet)

loop:
        # IA32_CR_PAT three times a loop: the MSR whose answer moves between
        # pvemu and KVM, so the one where a swap could show a mixed answer.
        mov $3, %r13d
3:      mov $0x277, %ecx
        call read_msr
        lea 0(%rbp), %rdi
        movabs $PAT_OLD, %r8
        movabs $PAT_KVM, %r9
        call classify
        dec %r13d
        jnz 3b

        mov $0x12345680, %ecx
        call read_msr
        test %rdx, %rdx
        jnz 1f
        cmp $-2, %r12
        je 2f
        cmp %r12, %rax
        je 1f
        incq VCPU_CHANGES(%rbp)
2:      mov %rax, %r12
1:      lea SLOT_SIZE(%rbp), %rdi
        mov $0xa, %r8
        mov $0xb, %r9
        call classify

        mov $0x12345681, %ecx
        call read_msr
        lea 2 * SLOT_SIZE(%rbp), %rdi
        mov $-1, %r8             # old: #GP
        mov $0xb, %r9
        call classify

        incq VCPU_LOOPS(%rbp)
        mov $0x12345682, %ecx
        call read_msr
        test %rdx, %rdx
        jnz loop
        test %rax, %rax
        jz loop

        WAIT_TURN report_turn
        mov $0x277, %ebx
        lea 0(%rbp), %rdi
        call report_slot
        mov $0x12345680, %ebx
        lea SLOT_SIZE(%rbp), %rdi
        call report_slot
        mov $0x12345681, %ebx
        lea 2 * SLOT_SIZE(%rbp), %rdi
        call report_slot
        call put_prefix
        PRINT "changes "
        mov VCPU_CHANGES(%rbp), %rax
        call put_dec
        PRINT " loops "
        mov VCPU_LOOPS(%rbp), %rax
        call put_dec
        call newline
        NEXT_TURN report_turn
        STOP

# report_slot: "cpuN: msr 0xMSR old O new W other X first-other F" for the
# MSR in %ebx and its slot at %rdi.
report_slot:
        call put_prefix
        PRINT "msr "
        mov %rbx, %rax
        call put_hex
        PRINT " old "
        mov SLOT_OLD(%rdi), %rax
        call put_dec
        PRINT " new "
        mov SLOT_NEW(%rdi), %rax
        call put_dec
        PRINT " other "
        mov SLOT_OTHER(%rdi), %rax
        call put_dec
        PRINT " first-other "
        cmpq $0, SLOT_HAS(%rdi)
        jne 1f
        PRINT "none\n"
        ret
1:      mov SLOT_FIRST(%rdi), %rax
        cmp $-1, %rax
        jne 2f
        PRINT "#GP\n"
        ret
2:      call put_hex64
        call newline
        ret

        .subsection 2
        .balign 8
looping_turn:
        .quad 0
report_turn:
        .quad 0
counters:
        .fill 256 * VCPU_SIZE, 1, 0
        .subsection 0
