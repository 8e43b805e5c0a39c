package ledger

// Test hooks. cgo cannot live in _test.go files, so the package's tests
// reach the charging side of the C ledger (and a few probes into it)
// through these unexported functions. Nothing else uses them.

/*
#include <stddef.h>
#include <stdlib.h>
#include "ledger_c.h"

// The C layout, for Peek's constants (TestPeekLayout).
static inline void gs_go_layout(uint64_t *out)
{
	out[0] = GS_LF_VERSION;
	out[1] = GS_LF_HEADER_SIZE;
	out[2] = GS_LF_SLOT_SIZE;
	out[3] = GS_LF_SIZE;
	out[4] = GS_LF_USED;
	out[5] = offsetof(struct gs_lf_header, version);
	out[6] = offsetof(struct gs_lf_header, nslots);
	out[7] = offsetof(struct gs_lf_header, size);
	out[8] = offsetof(struct gs_lf_header, cap_bytes);
	out[9] = offsetof(struct gs_lf_header, used_bytes);
	out[10] = offsetof(struct gs_lf_slot, state);
	out[11] = offsetof(struct gs_lf_slot, bytes);
	out[12] = offsetof(struct gs_lf_header, unseen_bytes);
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"time"
	"unsafe"
)

// charger is a charging (non-observe) handle, as the shim holds one.
type charger struct {
	path string
	c    *C.struct_gs_ledger
}

func openCharger(path string, capBytes uint64) (*charger, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var c *C.struct_gs_ledger
	if rc := C.gs_file_ledger_open(cpath, C.uint64_t(capBytes), 0, &c); rc != 0 {
		return nil, wrap(path, "open", rc)
	}
	return &charger{path: path, c: c}, nil
}

func errnoOf(rc C.int) error {
	if rc == 0 {
		return nil
	}
	return syscall.Errno(-rc)
}

func (ch *charger) charge(n uint64) error { return errnoOf(C.gs_go_charge(ch.c, C.uint64_t(n))) }

func (ch *charger) uncharge(n uint64) { C.gs_go_uncharge(ch.c, C.uint64_t(n)) }

func (ch *charger) usage() (used, capBytes uint64, err error) {
	var u, cp C.uint64_t
	err = errnoOf(C.gs_go_usage(ch.c, &u, &cp))
	return uint64(u), uint64(cp), err
}

func (ch *charger) close() { C.gs_go_close(ch.c) }

// lockAndHang takes the ledger lock, scribbles over the total and never
// returns: it writes "locked\n" on fd 1 and waits to be killed.
func (ch *charger) lockAndHang(scribble uint64) error {
	return errnoOf(C.gs_lf_test_lock_and_hang(ch.c, C.uint64_t(scribble)))
}

// storm runs threads C threads of iters random charges and uncharges each;
// it returns the number of unexpected results.
func (ch *charger) storm(threads int, iters, seed, maxBytes uint64) (int, error) {
	rc := C.gs_lf_test_storm(ch.c, C.int(threads), C.uint64_t(iters), C.uint64_t(seed), C.uint64_t(maxBytes))
	if rc < 0 {
		return 0, errnoOf(rc)
	}
	return int(rc), nil
}

// fork forks a child that charges bytes on a slot of its own and checks
// that the total is then expect; it returns the child's exit status.
func (ch *charger) fork(bytes, expect uint64, leak bool) (int, error) {
	l := C.int(0)
	if leak {
		l = 1
	}
	rc := C.gs_lf_test_fork(ch.c, C.uint64_t(bytes), C.uint64_t(expect), l)
	if rc < 0 {
		return 0, errnoOf(rc)
	}
	return int(rc), nil
}

// forkStorm forks forks children while threads threads hammer the ledger;
// it returns the number of failures.
func (ch *charger) forkStorm(threads, forks int) (int, error) {
	rc := C.gs_lf_test_fork_storm(ch.c, C.int(threads), C.int(forks))
	if rc < 0 {
		return 0, errnoOf(rc)
	}
	return int(rc), nil
}

// benchPairs times pairs charge/uncharge pairs in a C loop.
func (ch *charger) benchPairs(pairs, bytes uint64) (time.Duration, error) {
	ns := C.gs_lf_test_bench(ch.c, C.uint64_t(pairs), C.uint64_t(bytes))
	if ns < 0 {
		return 0, errnoOf(C.int(ns))
	}
	return time.Duration(ns), nil
}

// ledgerState is a snapshot taken under the lock, without reaping.
type ledgerState struct {
	used, sum, capBytes, inUse, ownerDead, reaped uint64
	slot                                          int
}

func stateOf(c *C.struct_gs_ledger) (ledgerState, error) {
	var st C.struct_gs_lf_test_state
	if rc := C.gs_lf_test_state(c, &st); rc != 0 {
		return ledgerState{}, errnoOf(rc)
	}
	return ledgerState{
		used: uint64(st.used), sum: uint64(st.sum), capBytes: uint64(st.cap),
		inUse: uint64(st.in_use), ownerDead: uint64(st.owner_dead),
		reaped: uint64(st.reaped), slot: int(st.slot),
	}, nil
}

func (ch *charger) state() (ledgerState, error) { return stateOf(ch.c) }

func (l *Ledger) state() (ledgerState, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.c == nil {
		return ledgerState{}, fmt.Errorf("ledger %s: %w", l.path, ErrClosed)
	}
	return stateOf(l.c)
}

// rawCharge charges through an observer handle: it must fail with EPERM.
func (l *Ledger) rawCharge(n uint64) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return errnoOf(C.gs_go_charge(l.c, C.uint64_t(n)))
}

// cLayout is the C ledger's layout, in the order of gs_go_layout.
func cLayout() [13]uint64 {
	var out [13]C.uint64_t
	C.gs_go_layout(&out[0])
	var r [13]uint64
	for i, v := range out {
		r[i] = uint64(v)
	}
	return r
}
