# unknown_msr_sweep: every vCPU reads and writes its own share of N distinct
# MSRs that no rule names and KVM does not know, from 0x50000000 up (vCPU k
# of n takes 0x50000000 + i for i = k, k + n, k + 2n, ... below N), so each
# access exits and unknown_msr decides it. N is what MSR 0x12345690 reads
# (a CONST rule of tests/kvm/policies/unknown-sweep.textproto the test may
# edit before the VM starts). vCPU 0 says where it is every tenth of its
# share ("cpu0: swept K"), so that a test can sample the VMM's memory as the
# sweep goes; at the end each vCPU in turn says:
#   "cpuN: swept K msrs, reads R #GP W, writes X #GP Y"
# (R and X the reads and writes made, W and Y those that took #GP).
        .include "lib.inc"

        .set SWEEP_BASE, 0x50000000
        .set SWEEP_COUNT_MSR, 0x12345690

# Waits until `turn` is this vCPU's index (vCPUs print their last line in
# turn; only vCPU 0 prints while sweeping, so lines never interleave).
.macro WAIT_FOR_TURN
.Lturn_wait\@:
        cmp turn(%rip), %r15
        je .Lturn_done\@
        pause
        jmp .Lturn_wait\@
.Lturn_done\@:
.endm

main:
        mov $SWEEP_COUNT_MSR, %ecx
        rdmsr
        shl $32, %rdx
        mov %eax, %eax
        or %rdx, %rax
        mov %rax, %r12           # N
        # This vCPU's share: ceil((N - k) / n) MSRs; %r13 = a tenth of it.
        mov %r12, %rax
        sub %r15, %rax
        jbe 9f
        add %r14, %rax
        dec %rax
        xor %edx, %edx
        div %r14
        jmp 8f
9:      xor %eax, %eax
8:      mov %rax, %rbp           # the share
        xor %edx, %edx
        mov $10, %ecx
        div %rcx
        test %rax, %rax
        jnz 7f
        mov $1, %eax
7:      mov %rax, %r13           # progress every this many MSRs

        lea gp_counts(%rip), %rdi
        xor %r8d, %r8d           # MSRs swept
        xor %r9d, %r9d           # read #GPs
        xor %r10d, %r10d         # write #GPs
        mov %r15, %rbx           # i
        test %rbp, %rbp
        jz 5f
1:      lea SWEEP_BASE(%rbx), %ecx
        mov (%rdi,%r15,8), %rsi
        rdmsr
        cmp (%rdi,%r15,8), %rsi
        je 2f
        inc %r9
2:      lea SWEEP_BASE(%rbx), %ecx
        mov (%rdi,%r15,8), %rsi
        mov %ebx, %eax
        xor %edx, %edx
        wrmsr
        cmp (%rdi,%r15,8), %rsi
        je 3f
        inc %r10
3:      inc %r8
        test %r15, %r15
        jnz 4f
        mov %r8, %rax
        xor %edx, %edx
        div %r13
        test %rdx, %rdx
        jnz 4f
        call put_prefix
        PRINT "swept "
        mov %r8, %rax
        call put_dec
        call newline
4:      add %r14, %rbx
        cmp %rbp, %r8
        jb 1b

5:      WAIT_FOR_TURN
        call put_prefix
        PRINT "swept "
        mov %r8, %rax
        call put_dec
        PRINT " msrs, reads "
        call put_dec
        PRINT " #GP "
        mov %r9, %rax
        call put_dec
        PRINT ", writes "
        mov %r8, %rax
        call put_dec
        PRINT " #GP "
        mov %r10, %rax
        call put_dec
        call newline
        incq turn(%rip)
        STOP

        .subsection 2
turn:   .quad 0
        .subsection 0
