# exit_status: prints a line and ends the run with OUT 0x1234 to port 0xf4:
# the runner must exit with 0x1234 & 0xff = 0x34 (52).
        .include "lib.inc"

main:
        SAY "exiting with 0x1234"
        mov $0x1234, %eax
        mov $0xf4, %dx
        out %ax, %dx
        SAY "still running after the exit port"
        EXIT GUEST_FAILED
