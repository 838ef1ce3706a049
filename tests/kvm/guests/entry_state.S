# entry_state: each vCPU prints the state the runner entered it with
# (issue 18 section 4, "Entry state"), in vCPU order, then stops. The test
# checks every line against the contract; the other tests use this guest
# whenever any guest that runs and ends cleanly will do.
        .include "lib.inc"

main:
        mov %r15, %rax
        call wait_for_turn

        call put_prefix
        PRINT "rdi "
        mov ENTRY_RDI(%rbx), %rax
        call put_hex
        PRINT " rsi "
        mov ENTRY_RSI(%rbx), %rax
        call put_hex
        PRINT " rsp "
        lea ENTRY_RSP_ABOVE(%rbx), %rax
        call put_hex
        call newline

        # Every other general register is 0 at entry.
        call put_prefix
        PRINT "other gprs or "
        mov ENTRY_RAX(%rbx), %rax
        or ENTRY_RBX(%rbx), %rax
        or ENTRY_RCX(%rbx), %rax
        or ENTRY_RDX(%rbx), %rax
        or ENTRY_RBP(%rbx), %rax
        or ENTRY_R8(%rbx), %rax
        or ENTRY_R9(%rbx), %rax
        or ENTRY_R10(%rbx), %rax
        or ENTRY_R11(%rbx), %rax
        or ENTRY_R12(%rbx), %rax
        or ENTRY_R13(%rbx), %rax
        or ENTRY_R14(%rbx), %rax
        or ENTRY_R15(%rbx), %rax
        call put_hex
        PRINT " rflags "
        mov ENTRY_RFLAGS(%rbx), %rax
        call put_hex
        PRINT " idt limit "
        movzwl ENTRY_IDTR(%rbx), %eax
        call put_hex
        call newline

        # Only the bits the contract names: the rest are the runner's choice.
        call put_prefix
        PRINT "cr0.pe|pg "
        mov %cr0, %rax
        and $0x80000001, %eax
        call put_hex
        PRINT " cr4.pae "
        mov %cr4, %rax
        and $0x20, %eax
        call put_hex
        PRINT " efer.lme|lma "
        mov $0xc0000080, %ecx
        rdmsr
        and $0x500, %eax
        call put_hex
        PRINT " cr3 "
        mov %cr3, %rax
        call put_hex
        call newline

        call put_prefix
        PRINT "cs "
        mov %cs, %ax
        movzwl %ax, %eax
        call put_hex
        PRINT " ds "
        mov %ds, %ax
        movzwl %ax, %eax
        call put_hex
        PRINT " es "
        mov %es, %ax
        movzwl %ax, %eax
        call put_hex
        PRINT " ss "
        mov %ss, %ax
        movzwl %ax, %eax
        call put_hex
        PRINT " fs "
        mov %fs, %ax
        movzwl %ax, %eax
        call put_hex
        PRINT " gs "
        mov %gs, %ax
        movzwl %ax, %eax
        call put_hex
        call newline

        # The image sits at 0x100000: where this code runs.
        call put_prefix
        PRINT "image at "
        lea pvemu_entry(%rip), %rax
        call put_hex
        call newline

        # The next vCPU's turn; this one is done.
        lock incq turn(%rip)
        STOP

# wait_for_turn: spins until `turn` equals %rax.
wait_for_turn:
1:      cmp turn(%rip), %rax
        je 2f
        pause
        jmp 1b
2:      ret

        .subsection 2
turn:   .quad 0
        .subsection 0
