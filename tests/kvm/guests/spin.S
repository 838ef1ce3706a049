# spin: prints a line and spins forever with interrupts off: only the
# runner's --timeout ends it (status 124).
        .include "lib.inc"

main:
        SAY "spinning"
1:      pause
        jmp 1b
