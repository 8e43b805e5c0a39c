#include "textflag.h"

// func Ioctl(fd, cmd, arg uint32) int32
TEXT ·Ioctl(SB), NOSPLIT, $0-20
	MOVL	$54, AX		// __NR_ioctl in the i386 table
	MOVL	fd+0(FP), BX
	MOVL	cmd+4(FP), CX
	MOVL	arg+8(FP), DX
	INT	$0x80
	MOVL	AX, ret+16(FP)
	RET
