package ioctl32

// Supported says whether Ioctl can enter the 32-bit system call table
// on this architecture.
const Supported = true

// Ioctl is ioctl(fd, cmd, arg) through the i386 system call table; it
// returns what the kernel does: the result, or -errno.
//
//go:noescape
func Ioctl(fd, cmd, arg uint32) int32
