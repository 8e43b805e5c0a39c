package kmod

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Client is an open /dev/gpuslice. The administrator's calls need
// CAP_SYS_ADMIN; the client calls (Attach, Charge, ...) act for the
// calling process's cgroup. Safe for concurrent use.
type Client struct {
	f *os.File
}

// Open opens the module's device (Device when path is empty) and checks
// that the module speaks this package's ABI version.
func Open(path string) (*Client, error) {
	if path == "" {
		path = Device
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("gpuslice.ko: %s does not exist: is the module loaded? (modprobe gpuslice): %w", path, err)
		}
		return nil, fmt.Errorf("gpuslice.ko: %w", err)
	}
	c := &Client{f: f}
	v, err := c.Version()
	if err != nil {
		f.Close()
		return nil, err
	}
	if v.ABIVersion != ABIVersion {
		f.Close()
		return nil, fmt.Errorf("gpuslice.ko speaks ABI version %d, this program version %d: install matching versions of the module and the agent", v.ABIVersion, ABIVersion)
	}
	return c, nil
}

// Close closes the device; the kernel releases what this file charged.
func (c *Client) Close() error { return c.f.Close() }

// Error is a call the module refused.
type Error struct {
	Op    string // what was asked, e.g. "create vGPU on card 0"
	Errno syscall.Errno
}

func (e *Error) Error() string {
	return fmt.Sprintf("gpuslice.ko: %s: %s", e.Op, explain(e.Op, e.Errno))
}

// Unwrap lets errors.Is(err, syscall.EEXIST) and the like work.
func (e *Error) Unwrap() error { return e.Errno }

// explain says what an errno means for the calls of kmod/README.md.
func explain(op string, errno syscall.Errno) string {
	var why string
	switch errno {
	case syscall.EPERM:
		why = "needs CAP_SYS_ADMIN"
	case syscall.ENODEV:
		why = "the card is not configured (set it first) or the vGPU was destroyed"
	case syscall.ENOENT:
		why = "no such vGPU or cgroup, or the caller's cgroup has no vGPU on that card"
	case syscall.EEXIST:
		why = "that cgroup already has a vGPU on this card"
	case syscall.ENOSPC:
		why = "the card has max_inst vGPUs already, or the quotas would pass 100 %"
	case syscall.EXDEV:
		why = "the card runs vGPUs of the other isolation mode (one mode per card)"
	case syscall.EBUSY:
		why = "the card's settings cannot change while it has vGPUs"
	case syscall.EOPNOTSUPP:
		why = "high priority is not supported under policy 5 (hybrid)"
	case syscall.EINVAL:
		why = "a value out of range (policy 0-6, max_inst 1-64, slice 1-100 ms, reclaim 1 ms-10 s, card 0-31, quota 0-100 in steps of 5, priority 0/1, memory cap > 0)"
	case syscall.ENOMEM:
		why = "over the vGPU's memory cap"
	case syscall.ENOTCONN:
		why = "not attached to that card"
	case syscall.EUSERS:
		why = "the vGPU has the most files attached (1024) or threads waiting (256) the module allows"
	case syscall.ENOTTY:
		why = "the module does not know this call (an older gpuslice.ko)"
	}
	if why == "" {
		return errno.Error()
	}
	return fmt.Sprintf("%s (%s)", why, errno.Error())
}

func (c *Client) ioctl(req uint, arg unsafe.Pointer, op string) error {
	conn, err := c.f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	err = conn.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, uintptr(req), uintptr(arg))
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return &Error{Op: op, Errno: errno}
	}
	return nil
}

// Version asks the module which ABI it speaks.
func (c *Client) Version() (Version, error) {
	var v Version
	err := c.ioctl(IocVersion, unsafe.Pointer(&v), "query the ABI version")
	return v, err
}

// SetCard configures a card (identical settings are accepted at any time).
func (c *Client) SetCard(card Card) error {
	card.Mode, card.NVGPUs, card.Pad = 0, 0, 0
	return c.ioctl(IocCardSet, unsafe.Pointer(&card), fmt.Sprintf("configure card %d", card.Card))
}

// GetCard reads a card's settings, isolation mode and vGPU count.
func (c *Client) GetCard(index uint32) (Card, error) {
	card := Card{Card: index}
	err := c.ioctl(IocCardGet, unsafe.Pointer(&card), fmt.Sprintf("read card %d", index))
	return card, err
}

// CreateVGPU creates a vGPU and returns its id on the card.
func (c *Client) CreateVGPU(v VGPU) (uint32, error) {
	v.Pad = 0
	err := c.ioctl(IocVGPUCreate, unsafe.Pointer(&v), fmt.Sprintf("create vGPU on card %d", v.Card))
	return v.ID, err
}

// UpdateVGPU changes a vGPU's memory cap, quota and priority.
func (c *Client) UpdateVGPU(v VGPU) error {
	v.Pad = 0
	return c.ioctl(IocVGPUUpdate, unsafe.Pointer(&v), fmt.Sprintf("update vGPU %d on card %d", v.ID, v.Card))
}

// DestroyVGPU removes a vGPU (kmod/README.md: processes still attached
// keep a detached record until they close).
func (c *Client) DestroyVGPU(card, id uint32) error {
	v := VGPU{Card: card, ID: id}
	return c.ioctl(IocVGPUDestroy, unsafe.Pointer(&v), fmt.Sprintf("destroy vGPU %d on card %d", id, card))
}

// Stats reads one vGPU's specification and statistics.
func (c *Client) Stats(card, id uint32) (VGPUStats, error) {
	s := VGPUStats{Card: card, ID: id}
	err := c.ioctl(IocVGPUStats, unsafe.Pointer(&s), fmt.Sprintf("read vGPU %d on card %d", id, card))
	return s, err
}

// Unseen reads a vGPU's unseen bytes (SetUnseen) with its charges and cap.
func (c *Client) Unseen(card, id uint32) (VGPUUnseen, error) {
	u := VGPUUnseen{Card: card, ID: id}
	err := c.ioctl(IocVGPUUnseen, unsafe.Pointer(&u), fmt.Sprintf("read the unseen bytes of vGPU %d on card %d", id, card))
	return u, err
}

// SetUnseen sets the device memory the driver holds for a vGPU's processes
// beyond what they charged; the module counts it against the vGPU's cap.
// A module older than the call answers ENOTTY.
func (c *Client) SetUnseen(card, id uint32, bytes uint64) error {
	u := VGPUUnseen{Card: card, ID: id, Bytes: bytes}
	return c.ioctl(IocVGPUSetUnseen, unsafe.Pointer(&u), fmt.Sprintf("set the unseen bytes of vGPU %d on card %d", id, card))
}

// Attach binds this file to the vGPU of the caller's cgroup on a card.
func (c *Client) Attach(card uint32) (Attach, error) {
	a := Attach{Card: card}
	err := c.ioctl(IocAttach, unsafe.Pointer(&a), fmt.Sprintf("attach to card %d", card))
	return a, err
}

// Charge adds bytes to the attached vGPU's usage, within its cap.
func (c *Client) Charge(card uint32, bytes uint64) (Charge, error) {
	ch := Charge{Card: card, Bytes: bytes}
	err := c.ioctl(IocCharge, unsafe.Pointer(&ch), fmt.Sprintf("charge %d bytes on card %d", bytes, card))
	return ch, err
}

// Uncharge gives back bytes this file charged.
func (c *Client) Uncharge(card uint32, bytes uint64) (Charge, error) {
	ch := Charge{Card: card, Bytes: bytes}
	err := c.ioctl(IocUncharge, unsafe.Pointer(&ch), fmt.Sprintf("uncharge %d bytes on card %d", bytes, card))
	return ch, err
}

// CgroupID is the cgroup v2 id of the cgroup directory at path, the id
// vGPUs are bound to (the handle name_to_handle_at returns for it).
func CgroupID(path string) (uint64, error) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
	if err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", path, err)
	}
	b := h.Bytes()
	if len(b) != 8 {
		return 0, fmt.Errorf("cgroup id of %s: a %d-byte handle: not a cgroup v2 directory", path, len(b))
	}
	return binary.NativeEndian.Uint64(b), nil
}
