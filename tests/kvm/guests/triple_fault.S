# triple_fault: no lib.inc, so no IDT (the runner's IDTR limit is 0). UD2
# at the image's first byte cannot be delivered: #UD, then #DF, then a
# triple fault (KVM_EXIT_SHUTDOWN). The runner must exit with status 3 and
# name the exit and a RIP on stderr (0x100000 on VMX; on SVM, KVM resets the
# vCPU on a shutdown, so only the reset vector's is left).
        .code64
        .text
        ud2
