/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shim's dlsym. glibc answers RTLD_NEXT and RTLD_DEFAULT for the
 * object its dlsym returns to (the next definition after that object; that
 * object's lookup scope). A lookup the shim leaves alone must reach libc's
 * dlsym by a jump, with the caller's return address still where libc
 * reads it: a call from C would make every such lookup the shim's, and a
 * library loaded after the shim that wraps a function with
 * dlsym(RTLD_NEXT, ...) would get its own wrapper back. gcc 12 has no
 * guaranteed tail call, hence this entry point.
 *
 * The decision is C's: gs_dlsym_route(handle, symbol, caller) (loader.c)
 * returns two words, the function to jump to with the original arguments
 * (libc's dlsym), or NULL and the answer. Other architectures get the C
 * version in loader.c.
 */
#if defined(__x86_64__)

	.text
	.globl	dlsym
	.type	dlsym, @function
	.hidden	gs_dlsym_route
	.p2align 4
dlsym:
	.cfi_startproc
#ifdef __CET__
	endbr64
#endif
	pushq	%rdi
	.cfi_adjust_cfa_offset 8
	pushq	%rsi
	.cfi_adjust_cfa_offset 8
	subq	$8, %rsp		/* the call wants rsp 16-byte aligned */
	.cfi_adjust_cfa_offset 8
	movq	24(%rsp), %rdx		/* caller: our return address */
	call	gs_dlsym_route
	addq	$8, %rsp
	.cfi_adjust_cfa_offset -8
	popq	%rsi
	.cfi_adjust_cfa_offset -8
	popq	%rdi
	.cfi_adjust_cfa_offset -8
	testq	%rax, %rax
	jz	1f
	jmp	*%rax			/* libc returns to our caller */
1:
	movq	%rdx, %rax
	ret
	.cfi_endproc
	.size	dlsym, .-dlsym

#elif defined(__aarch64__)

	.text
	.globl	dlsym
	.type	dlsym, %function
	.hidden	gs_dlsym_route
	.p2align 2
dlsym:
	.cfi_startproc
#ifdef __ARM_FEATURE_BTI_DEFAULT
	hint	34			/* bti c */
#endif
	stp	x29, x30, [sp, #-32]!
	.cfi_def_cfa_offset 32
	.cfi_offset x29, -32
	.cfi_offset x30, -24
	mov	x29, sp
	stp	x0, x1, [sp, #16]
	mov	x2, x30			/* caller: our return address */
	bl	gs_dlsym_route
	mov	x16, x0
	mov	x17, x1
	ldp	x0, x1, [sp, #16]
	ldp	x29, x30, [sp], #32
	.cfi_restore x29
	.cfi_restore x30
	.cfi_def_cfa_offset 0
	cbz	x16, 1f
	br	x16			/* x16: a call as far as BTI goes */
1:
	mov	x0, x17
	ret
	.cfi_endproc
	.size	dlsym, .-dlsym

#endif

	.section .note.GNU-stack, "", %progbits
