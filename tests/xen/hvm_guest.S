/* The e2e's HVM guest (tests/xen/run-e2e.sh): 32-bit protected mode, paging
 * off, loaded at 0x1000 by xen-hvm-guest (hvm_guest.cc). It executes CPUID
 * on leaves pvemu's policy sets and on leaves it does not, and IN/OUT on
 * ports pvemud claims, and reports every value it got on its console: Xen's
 * debug port 0xe9, whose lines Xen prints as "(dN) ..." (with
 * guest_loglvl=all). Then it writes 0xdeadbeef at 0x2100 and halts.
 *
 * Console lines, one per instruction, fixed format for the e2e's checks:
 *   pvemu-guest: cpuid LEAF SUBLEAF = EAX EBX ECX EDX
 *   pvemu-guest: in PORT = VALUE
 *   pvemu-guest: done
 * (8 hex digits each.) Assembled with `as --32`, linked at 0x1000 and cut to
 * a flat binary with objcopy. */
	.code32
	.text
	.globl _start
_start:
	mov	$0x4000, %esp
	mov	$hello, %esi
	call	puts

	/* Leaves the e2e policy sets: 6 (CONST), 1 (HOST with ECX bit 31
	 * cleared), 0x7/1 (a subleaf rule). */
	mov	$6, %eax
	xor	%ecx, %ecx
	call	cpuid_line
	mov	$1, %eax
	xor	%ecx, %ecx
	call	cpuid_line
	mov	$7, %eax
	mov	$1, %ecx
	call	cpuid_line
	/* Leaves it does not: Xen's own answer (vendor; Xen's signature). */
	xor	%eax, %eax
	xor	%ecx, %ecx
	call	cpuid_line
	mov	$0x40000000, %eax
	xor	%ecx, %ecx
	call	cpuid_line

	/* Port I/O on ports pvemud claims: 0x510 (the policy grants it, no
	 * device behind), 0x520 (the policy does not grant it). Two OUTs, two
	 * INs. */
	mov	$0x510, %dx
	mov	$0x5a, %al
	outb	%al, %dx
	inl	%dx, %eax
	call	in_line
	mov	$0x520, %dx
	mov	$0xa5, %al
	outb	%al, %dx
	xor	%eax, %eax
	inb	%dx, %al
	call	in_line

	mov	$done, %esi
	call	puts
	movl	$0xdeadbeef, 0x2100
1:	cli
	hlt
	jmp	1b

/* cpuid_line: CPUID with EAX=leaf, ECX=subleaf; prints the line. */
cpuid_line:
	push	%eax
	push	%ecx
	cpuid
	push	%edx
	push	%ecx
	push	%ebx
	push	%eax
	mov	$cpuid_msg, %esi
	call	puts
	mov	20(%esp), %eax		/* leaf */
	call	hex32
	call	space
	mov	16(%esp), %eax		/* subleaf */
	call	hex32
	mov	$equals, %esi
	call	puts
	pop	%eax
	call	hex32
	call	space
	pop	%eax			/* ebx */
	call	hex32
	call	space
	pop	%eax			/* ecx */
	call	hex32
	call	space
	pop	%eax			/* edx */
	call	hex32
	call	newline
	add	$8, %esp
	ret

/* in_line: prints "in PORT = EAX" with the port in DX. */
in_line:
	push	%eax
	mov	$in_msg, %esi
	call	puts
	movzwl	%dx, %eax
	call	hex32
	mov	$equals, %esi
	call	puts
	pop	%eax
	call	hex32
	call	newline
	ret

/* hex32: EAX as 8 hex digits. Keeps EDX. */
hex32:
	push	%edx
	mov	%eax, %ebx
	mov	$8, %ecx
2:	rol	$4, %ebx
	mov	%ebx, %eax
	and	$0xf, %eax
	mov	hexdigits(%eax), %al
	outb	%al, $0xe9
	loop	2b
	pop	%edx
	ret

space:
	mov	$' ', %al
	outb	%al, $0xe9
	ret

newline:
	mov	$'\n', %al
	outb	%al, $0xe9
	ret

/* puts: the NUL-terminated string at ESI. */
puts:
	lodsb
	test	%al, %al
	jz	3f
	outb	%al, $0xe9
	jmp	puts
3:	ret

hexdigits:	.ascii "0123456789abcdef"
hello:		.asciz "pvemu-guest: start\n"
cpuid_msg:	.asciz "pvemu-guest: cpuid "
in_msg:		.asciz "pvemu-guest: in "
equals:		.asciz " = "
done:		.asciz "pvemu-guest: done\n"
