package ledger

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/untrusted"
)

// The file layout Peek reads (interposer/src/ledger_file_layout.h; the
// constants are checked against the C header by TestPeekLayout).
const (
	peekMagic      = "gsledger"
	peekVersion    = 1
	peekHeaderSize = 256
	peekSlotSize   = 64
	peekFileSize   = peekHeaderSize + MaxProcs*peekSlotSize
	peekSlotUsed   = 0x55534544 // "USED"

	offVersion = 8
	offNSlots  = 12
	offSize    = 16
	offCap     = 24
	offUsed    = 128 // the header's total, kept under the lock
	offUnseen  = 192 // the agent's unseen bytes (WriteUnseen)
	offSlotSt  = 0   // within a slot: its state
	offSlotB   = 16  // within a slot: the bytes its owner charged
)

// Snapshot is what Peek read from a ledger file.
type Snapshot struct {
	// Used is the bytes charged by the live processes: those that still
	// hold their slot's record lock. A dead process's bytes, which the
	// ledger's users reclaim at their next operation, are not counted.
	Used uint64
	// Cap is the vGPU's cap, fixed when the file was created.
	Cap uint64
	// Procs is the number of live processes holding a slot.
	Procs int
	// Total is the header's running total, dead processes included until
	// they are reaped (for diagnostics).
	Total uint64
	// Unseen is what the agent last wrote with WriteUnseen (a container
	// can write it too: the file is its own).
	Unseen uint64
}

// Peek reads the usage of the ledger file at path without its lock and
// without changing anything: the agent's metrics read every container's
// ledger at each sample, and the file is writable by the container, whose
// processes may hold the lock (or be stopped holding it) for as long as
// they like; Open and Usage would wait for it.
//
// The file is mapped read-only and its 64-bit words read with atomic
// loads, each consistent on its own; the snapshot as a whole is not
// (a charge may land between two slots' reads). Liveness is the slot's
// record lock, tested with F_OFD_GETLK, which never blocks. The path must
// name a regular file (no symbolic link, no FIFO: a container controls
// the directory); a file truncated while read gives an error, not a crash.
func Peek(path string) (Snapshot, error) {
	f, mem, err := mapLedger(path, "ledger peek", false)
	if err != nil {
		return Snapshot{}, err
	}
	defer f.Close()
	defer unix.Munmap(mem)
	s, err := peekMapped(int(f.Fd()), mem)
	if err != nil {
		return Snapshot{}, fmt.Errorf("ledger peek %s: %w", path, err)
	}
	return s, nil
}

// mapLedger opens the ledger file at path (a regular file itself, of a
// ledger's size) and maps it whole, read-only or writable; op names the
// caller in errors. The caller closes the file and unmaps.
func mapLedger(path, op string, write bool) (*os.File, []byte, error) {
	open, prot := untrusted.OpenRegular, unix.PROT_READ
	if write {
		open, prot = untrusted.OpenRegularWrite, unix.PROT_READ|unix.PROT_WRITE
	}
	f, fi, err := open(path)
	switch {
	case errors.Is(err, untrusted.ErrNotRegular):
		return nil, nil, notLedger(op, path)
	case err != nil:
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	if fi.Size() != peekFileSize {
		f.Close()
		return nil, nil, notLedger(op, path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, peekFileSize, prot, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, &os.PathError{Op: op + ": mmap", Path: path, Err: err}
	}
	return f, mem, nil
}

func notLedger(op, path string) error {
	return fmt.Errorf("%s %s: not a ledger file of this version (want a regular file of %d bytes): %w",
		op, path, peekFileSize, syscall.EINVAL)
}

// errTruncated is a fault on the mapping: the file shrank under us.
var errTruncated = errors.New("the file was truncated while read")

// peekMapped reads the mapped file. A page gone from under the mapping
// (a truncation by the container) raises SIGBUS; SetPanicOnFault turns it
// into a panic of this goroutine, recovered here.
func peekMapped(fd int, mem []byte) (s Snapshot, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			s, err = Snapshot{}, errTruncated
		}
	}()
	if err := checkHeader(mem); err != nil {
		return s, err
	}
	s.Cap = atomic.LoadUint64(word64(mem, offCap))
	s.Total = atomic.LoadUint64(word64(mem, offUsed))
	s.Unseen = atomic.LoadUint64(word64(mem, offUnseen))
	for i := 0; i < MaxProcs; i++ {
		off := peekHeaderSize + i*peekSlotSize
		if atomic.LoadUint64(word64(mem, off+offSlotSt)) != peekSlotUsed {
			continue
		}
		live, err := slotHeld(fd, off)
		if err != nil {
			return Snapshot{}, err
		}
		if live {
			s.Used += atomic.LoadUint64(word64(mem, off+offSlotB))
			s.Procs++
		}
	}
	return s, nil
}

// checkHeader checks that the mapped file is a ledger of this layout.
func checkHeader(mem []byte) error {
	if string(mem[:len(peekMagic)]) != peekMagic {
		return fmt.Errorf("no ledger magic: %w", syscall.EPROTO)
	}
	if v := atomic.LoadUint32(word32(mem, offVersion)); v != peekVersion {
		return fmt.Errorf("ledger version %d, this agent reads %d: %w", v, peekVersion, syscall.EPROTO)
	}
	if n := atomic.LoadUint32(word32(mem, offNSlots)); n != MaxProcs {
		return fmt.Errorf("%d slots, want %d: %w", n, MaxProcs, syscall.EPROTO)
	}
	if n := atomic.LoadUint64(word64(mem, offSize)); n != peekFileSize {
		return fmt.Errorf("size field %d, want %d: %w", n, peekFileSize, syscall.EPROTO)
	}
	return nil
}

// slotHeld says whether another open file description (a live process)
// holds the record lock of the slot at off.
func slotHeld(fd, off int) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(off), Len: peekSlotSize}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk); err != nil {
		return false, fmt.Errorf("testing a slot's lock: %w", err)
	}
	return lk.Type != unix.F_UNLCK, nil
}

// word64 and word32 point at naturally aligned words of the mapping (it
// is page-aligned and every offset used is a multiple of the size).
func word64(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
func word32(mem []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
