# cpuid: prints the CPUID leaves tests/kvm/policies/cpuid.textproto sets, as
# this vCPU sees them: the vendor (leaf 0), the hypervisor leaves
# 0x40000000-0x40000001 and a leaf taken from the host and masked
# (0x80000008). CPUID never exits to user space.
        .include "lib.inc"

main:
        xor %eax, %eax
        xor %ecx, %ecx
        cpuid
        # Leaf 0's vendor string is EBX, EDX, ECX.
        mov %ebx, vendor(%rip)
        mov %edx, vendor+4(%rip)
        mov %ecx, vendor+8(%rip)
        call put_prefix
        PRINT "vendor "
        lea vendor(%rip), %rsi
        call puts
        call newline

        mov $0x40000000, %eax
        call report_cpuid
        # A hypervisor's signature is EBX, ECX, EDX.
        mov %ebx, vendor(%rip)
        mov %ecx, vendor+4(%rip)
        mov %edx, vendor+8(%rip)
        call put_prefix
        PRINT "hypervisor "
        lea vendor(%rip), %rsi
        call puts
        call newline

        mov $0x40000001, %eax
        call report_cpuid
        mov $0x80000008, %eax
        call report_cpuid
        STOP

# report_cpuid: CPUID leaf %eax, subleaf 0, printed as
# "cpuN: cpuid 0xLEAF = eax 0x.. ebx 0x.. ecx 0x.. edx 0x..".
# Outputs: %eax, %ebx, %ecx, %edx as CPUID left them.
report_cpuid:
        push %r8
        push %r9
        push %r10
        push %r11
        push %r12
        mov %eax, %r12d
        xor %ecx, %ecx
        cpuid
        mov %eax, %r8d
        mov %ebx, %r9d
        mov %ecx, %r10d
        mov %edx, %r11d
        call put_prefix
        PRINT "cpuid "
        mov %r12d, %eax
        call put_hex
        PRINT " = eax "
        mov $8, %ecx
        mov %r8d, %eax
        call put_hex_digits
        PRINT " ebx "
        mov %r9d, %eax
        call put_hex_digits
        PRINT " ecx "
        mov %r10d, %eax
        call put_hex_digits
        PRINT " edx "
        mov %r11d, %eax
        call put_hex_digits
        call newline
        mov %r8d, %eax
        mov %r9d, %ebx
        mov %r10d, %ecx
        mov %r11d, %edx
        pop %r12
        pop %r11
        pop %r10
        pop %r9
        pop %r8
        ret

        .subsection 2
vendor: .fill 16, 1, 0         # 12 characters and a NUL
        .subsection 0
