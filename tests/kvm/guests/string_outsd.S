# string_outsd: REP OUTSD on pvemu-vm's scratch register (port 0x510) of 1, 2,
# 3 and 1024 elements (a page), as userspace_io_test.c does with its
# REP INSB on port 0x80; the body and what it prints are string_io.inc's.
# Run under tests/kvm/policies/string-io-granted.textproto,
# string-io-denied.textproto and string-io-partial.textproto.
        .include "lib.inc"

        .set STRING_SIZE, 4
        .set STRING_IN, 0
        .include "string_io.inc"

        .subsection 1
string_name:
        .asciz "outsd"
        .subsection 0
