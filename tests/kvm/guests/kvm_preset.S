# kvm_preset: what a guest sees under the shipped `kvm` policy preset
# (policy/defaults/kvm.textproto, pvemu-vm --policy=kvm): the
# IA32_ENERGY_PERF_BIAS / IA32_THERM_CONTROL vendor rule, per-VM ignore_msrs,
# the runner's scratch register granted, and EFER, APIC_BASE and the TSC left
# to KVM. 4 RDMSR exits and 1 WRMSR exit: the last three reads stay in KVM.
        .include "lib.inc"

main:
        RDMSR_PRINT 0x1b0
        WRMSR_PRINT 0x1b0, 0x1
        RDMSR_PRINT 0x1b0
        RDMSR_PRINT 0x19a
        RDMSR_PRINT 0x87654321
        OUT_PRINT 4, 0x510, 0xcafe
        IN_PRINT 4, 0x510
        .irp msr, 0xc0000080, 0x1b, 0x10
        mov $\msr, %ecx
        rdmsr
        .endr
        GP_PRINT
        STOP
