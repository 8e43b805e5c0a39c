// Package sfcore compiles the shim's no-module schedule file
// (interposer/src/sched_file*.c, on the ledger file's helpers and the
// scheduler core of kmod/core) into Go, so that tests can drive several
// of its processes' slots from one process, step by step, and look at
// the core's state in the file after each step. Each Open is a process's
// slot: its own descriptor, its own record lock.
package sfcore

/*
#cgo CFLAGS: -I${SRCDIR}/../../interposer/src -I${SRCDIR}/../../interposer/include
#cgo CFLAGS: -I${SRCDIR}/../../kmod/core -I${SRCDIR}/../../kmod/include/uapi
#cgo CFLAGS: -D_GNU_SOURCE -std=c11 -Wall -Wextra -Werror -Wno-unused-function
#cgo LDFLAGS: -pthread
#include <stdlib.h>
#include "sfcore_c.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// Want is what a process asks of the file (its environment).
type Want struct {
	Policy, MaxInst uint32
	SliceNs         uint64
	Quota, High     uint32
	Key             string // GPUSLICE_VGPU
}

// File is one process's handle on the schedule file.
type File struct {
	sf *C.struct_gs_sf
	ID int // the vGPU's core id
}

// Open opens (creating) the schedule file at path for one process.
func Open(path string, w Want) (*File, error) {
	cpath, ckey := C.CString(path), C.CString(w.Key)
	defer C.free(unsafe.Pointer(cpath))
	defer C.free(unsafe.Pointer(ckey))
	want := C.struct_gs_sf_want{policy: C.uint32_t(w.Policy),
		max_inst: C.uint32_t(w.MaxInst), slice_ns: C.uint64_t(w.SliceNs),
		quota: C.uint32_t(w.Quota), high: C.uint32_t(w.High), key: ckey}
	var sf *C.struct_gs_sf
	var info C.struct_gs_sf_info
	var msg [256]C.char
	rc := C.gs_sf_open(cpath, &want, &sf, &info, &msg[0], C.size_t(len(msg)))
	if rc < 0 {
		return nil, fmt.Errorf("sfcore: open %s: %s", path, C.GoString(&msg[0]))
	}
	if rc == 0 {
		return nil, fmt.Errorf("sfcore: open %s: not gated", path)
	}
	return &File{sf: sf, ID: int(info.id)}, nil
}

// Acquire waits for a slice of the vGPU and holds it (the gate's slow path).
func (f *File) Acquire() (start, end uint64, err error) {
	var id C.int32_t
	var s, e C.uint64_t
	if rc := C.gs_sf_acquire(f.sf, &id, &s, &e); rc != 0 {
		return 0, 0, syscall.Errno(-rc)
	}
	f.ID = int(id)
	return uint64(s), uint64(e), nil
}

// Tick advances the schedule to now (the fencer at its slice's end).
func (f *File) Tick() { C.gs_sf_tick(f.sf) }

// Release says the process's work drained (the fencer after its fence).
func (f *File) Release(busyNs uint64) { C.gs_sf_release(f.sf, C.uint64_t(busyNs)) }

// State is the core's view of the card and of the process's vGPU.
type State struct {
	Owner                int
	Drainer              int // the last owner, draining; -1 none
	SliceStart, SliceEnd uint64
	Holding              bool // the card waits for the vGPU's drain
	DebtNs               uint64
}

// State reads the core's state in the file, without its lock.
func (f *File) State() State {
	var st C.struct_gs_sfc_state
	C.gs_sfc_state(f.sf, &st)
	return State{Owner: int(st.owner), Drainer: int(st.drainer), SliceStart: uint64(st.slice_start),
		SliceEnd: uint64(st.slice_end), Holding: st.holding != 0,
		DebtNs: uint64(st.debt_ns)}
}
