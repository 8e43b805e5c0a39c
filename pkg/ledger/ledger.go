// Package ledger reads and maintains the shared ledger files of gpuslice's
// no-module mode.
//
// A ledger file holds one vGPU's memory accounting on one card: its cap,
// the bytes charged by each process of the container and their total. The
// LD_PRELOAD shim charges and uncharges it on every device allocation; this
// package is the agent's (and the tests') view of it. It opens ledgers in
// observe mode only: it never charges, and it takes no process slot.
//
// The implementation is the shim's own C code (interposer/src/ledger_file.c
// and ledger_file_open.c), compiled in through cgo, so both sides always
// agree on the file format and the locking.
//
// A Ledger is safe for concurrent use. Close it when done: it holds an open
// file and a mapping.
package ledger

/*
#cgo CFLAGS: -I${SRCDIR}/../../interposer/src -I${SRCDIR}/../../interposer/include
#cgo CFLAGS: -D_GNU_SOURCE -std=c11 -Wall -Wextra -Werror -Wshadow
#cgo LDFLAGS: -pthread
#include <stdlib.h>
#include "ledger_c.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"
)

// MaxProcs is the number of process slots of a ledger file: at most this
// many processes of one container can hold device memory at once.
const MaxProcs = 1024

// MaxProcs must be the C ledger's GS_LF_NSLOTS: a mismatch either way
// overflows the constant and fails the build.
const _ = uint(MaxProcs-C.GS_LF_NSLOTS) + uint(C.GS_LF_NSLOTS-MaxProcs)

// ErrClosed is returned by the methods of a closed Ledger.
var ErrClosed = errors.New("ledger: closed")

// Ledger is an observer's handle on one ledger file.
type Ledger struct {
	path string
	mu   sync.RWMutex // read: a call into C; write: Close
	c    *C.struct_gs_ledger
}

// Proc is one live process's share of a ledger.
type Proc struct {
	// PID is the process id in the container's pid namespace, for
	// display only: it means nothing in the agent's namespace.
	PID int32
	// Bytes is the device memory the process holds.
	Bytes uint64
}

// Open opens the existing ledger file at path.
func Open(path string) (*Ledger, error) {
	return open(path, 0, C.GS_LEDGER_OBSERVE|C.GS_LF_NOCREATE)
}

// Create opens the ledger file at path, creating it with the given cap if
// it does not exist (and its directory, one level). An existing ledger keeps
// the cap it was created with: compare Usage's cap if that matters.
// Concurrent creators, in this process or others, all end up with the same
// single file.
func Create(path string, capBytes uint64) (*Ledger, error) {
	return open(path, capBytes, C.GS_LEDGER_OBSERVE)
}

func open(path string, capBytes uint64, flags C.uint) (*Ledger, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var c *C.struct_gs_ledger
	if rc := C.gs_file_ledger_open(cpath, C.uint64_t(capBytes), flags, &c); rc != 0 {
		return nil, wrap(path, "open", rc)
	}
	return &Ledger{path: path, c: c}, nil
}

// Path returns the path the ledger was opened with.
func (l *Ledger) Path() string { return l.path }

// Usage returns what the vGPU uses, the bytes charged by all its processes
// and the unseen bytes the agent wrote (WriteUnseen), and its cap.
// It also reclaims the bytes of dead processes when the last reclaim is
// older than 250 ms, like every user of the ledger does.
func (l *Ledger) Usage() (used, capBytes uint64, err error) {
	err = l.call("usage", func(c *C.struct_gs_ledger) C.int {
		var u, cp C.uint64_t
		rc := C.gs_go_usage(c, &u, &cp)
		used, capBytes = uint64(u), uint64(cp)
		return rc
	})
	return used, capBytes, err
}

// Reap reclaims now the bytes of the processes that died holding some, and
// returns how many such processes it found.
func (l *Ledger) Reap() (int, error) {
	var n int
	err := l.call("reap", func(c *C.struct_gs_ledger) C.int {
		rc := C.gs_file_ledger_reap(c)
		if rc >= 0 {
			n, rc = int(rc), 0
		}
		return rc
	})
	return n, err
}

// Procs returns the live processes holding a slot, with their bytes. It
// reaps the dead first.
func (l *Ledger) Procs() ([]Proc, error) {
	buf := make([]C.struct_gs_ledger_proc, MaxProcs)
	var n int
	err := l.call("procs", func(c *C.struct_gs_ledger) C.int {
		rc := C.gs_file_ledger_procs(c, &buf[0], C.int(len(buf)))
		if rc >= 0 {
			n, rc = int(rc), 0
		}
		return rc
	})
	if err != nil {
		return nil, err
	}
	procs := make([]Proc, min(n, len(buf)))
	for i := range procs {
		procs[i] = Proc{PID: int32(buf[i].pid), Bytes: uint64(buf[i].bytes)}
	}
	return procs, nil
}

// Close releases the ledger. It touches nothing in the file: an observer
// holds no bytes. Closing twice is harmless.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		C.gs_go_close(l.c)
		l.c = nil
	}
	return nil
}

// call runs f on the C handle unless the ledger is closed, and turns its
// -errno into an error.
func (l *Ledger) call(op string, f func(*C.struct_gs_ledger) C.int) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.c == nil {
		return fmt.Errorf("ledger %s: %s: %w", l.path, op, ErrClosed)
	}
	if rc := f(l.c); rc != 0 {
		return wrap(l.path, op, rc)
	}
	return nil
}

// wrap turns a -errno from the C ledger into an error that says what to do;
// errors.Is works on the underlying syscall.Errno.
func wrap(path, op string, rc C.int) error {
	errno := syscall.Errno(-rc)
	if h := hint(errno); h != "" {
		return fmt.Errorf("ledger %s: %s: %w (%s)", path, op, errno, h)
	}
	return fmt.Errorf("ledger %s: %s: %w", path, op, errno)
}

func hint(errno syscall.Errno) string {
	switch errno {
	case syscall.ENOENT:
		return "no ledger there: the agent creates it before the container starts"
	case syscall.EPROTO:
		return "not a gpuslice ledger of this version: remove it once no process of the container runs, and let the agent recreate it"
	case syscall.EINVAL:
		return "the file is not a whole ledger of this version (wrong size): remove it once no process of the container runs, and let the agent recreate it"
	case syscall.EACCES, syscall.EPERM:
		return "check the permissions of the file and of its directory"
	case syscall.ETIMEDOUT:
		return "the ledger lock was held for too long: a process of the container may be stopped (SIGSTOP, cgroup freezer); retry later"
	case syscall.EIO:
		return "the ledger lock cannot be recovered: recreate the ledger once the container has stopped"
	case syscall.ESTALE:
		return "the ledger file was replaced while in use: restart the container's processes"
	case syscall.ENOSPC:
		return "no room: free space on the ledger's file system"
	}
	return ""
}
