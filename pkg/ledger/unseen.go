package ledger

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// WriteUnseen records in the ledger file at path the device memory the
// driver holds for the container's processes beyond what they charged:
// the agent finds it by reconciling the ledger with the driver's
// per-process figures, and the shim counts it against the cap at every
// charge (and in what cuMemGetInfo reports free).
//
// It is one atomic 64-bit store into the mapped header, without the
// file's lock, which the container's processes may hold as long as they
// like; like Peek it follows no symbolic link, never blocks on a FIFO and
// survives a file truncated under it. The file is the container's: it can
// overwrite the figure (the no-module mode is cooperative).
func WriteUnseen(path string, bytes uint64) error {
	const op = "ledger unseen"
	f, mem, err := mapLedger(path, op, true)
	if err != nil {
		return err
	}
	defer f.Close()
	defer unix.Munmap(mem)
	if err := storeUnseen(mem, bytes); err != nil {
		return fmt.Errorf("%s %s: %w", op, path, err)
	}
	return nil
}

// storeUnseen writes into a mapped ledger whose header checks out; a
// fault on the mapping (the file shrank under it) is an error.
func storeUnseen(mem []byte, bytes uint64) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = errTruncated
		}
	}()
	if err := checkHeader(mem); err != nil {
		return err
	}
	atomic.StoreUint64(word64(mem, offUnseen), bytes)
	return nil
}
