//go:build !amd64

package ioctl32

import "golang.org/x/sys/unix"

// Supported says whether Ioctl can enter the 32-bit system call table
// on this architecture: here it cannot.
const Supported = false

// Ioctl answers -ENOSYS here.
func Ioctl(fd, cmd, arg uint32) int32 { return -int32(unix.ENOSYS) }
