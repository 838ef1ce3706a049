# triple_fault: no lib.inc, so no IDT (the runner's IDTR limit is 0). UD2
# at the image's first byte cannot be delivered: #UD, then #DF, then a
# triple fault (KVM_EXIT_SHUTDOWN). The runner must exit with status 3 and
# name the exit and RIP 0x100000 on stderr.
        .code64
        .text
        ud2
