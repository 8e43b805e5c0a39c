// Package ioctl32 issues the ioctl system call of a 32-bit process from
// a 64-bit one, for the guard's guest test (pkg/guard): on x86-64, "int
// $0x80" enters the kernel's i386 system call table whatever the
// process, so the kernel takes the call for a 32-bit program's
// (in_compat_syscall) and routes it through compat_sys_ioctl, where the
// LSM hook is file_ioctl_compat rather than file_ioctl (kernels from 6.8
// on and those it was backported to). The kernel needs
// CONFIG_IA32_EMULATION (Debian's has it). Pointers passed this way must
// fit in 32 bits: the test passes none.
package ioctl32
