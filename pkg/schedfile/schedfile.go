// Package schedfile reads the schedule files of gpuslice's no-module mode:
// one per card ($GPUSLICE_SCHED_DIR/card<N>.sched), where the shims of every
// container on the card run the scheduler core together (see
// interposer/src/sched_file.c). The agent reads them for its metrics: which
// vGPUs are on the card's schedule and how much busy time each reported.
//
// A schedule file is writable by the containers, so Read never takes its
// lock: it copies the file and decodes the copy. A value being written at
// that moment may be stale; none can hang or crash the reader.
package schedfile

/*
#cgo CFLAGS: -I${SRCDIR}/../../interposer/src -I${SRCDIR}/../../kmod/core -I${SRCDIR}/../../kmod/include/uapi
#cgo CFLAGS: -D_GNU_SOURCE -std=c11 -Wall -Wextra -Werror -Wshadow
#include "schedfile_c.h"
*/
import "C"

import (
	"fmt"
	"io"
	"unsafe"

	"github.com/gpuslice/gpuslice/internal/untrusted"
)

// Card is a schedule file's view of one card.
type Card struct {
	Policy  int    // 0-6
	MaxInst int    // units per period
	SliceNs uint64 // one unit
	Owner   int    // the current slice's vGPU id; negative: none or all
	VGPUs   []VGPU
}

// VGPU is one container's vGPU on the card's schedule.
type VGPU struct {
	Key       string // GPUSLICE_VGPU: the container's id
	ID        int    // the scheduler core's id (the page's owner)
	Quota     int    // percent
	High      bool   // high priority
	NProcs    int    // processes of the container gated on the card
	BusyNs    uint64 // busy time its processes reported at their fences
	Slices    uint64 // slices granted
	OverrunNs uint64 // time its work ran past its slices, charged as debt
}

// Read decodes the schedule file at path from a copy of it. The path must
// name a regular file itself (not a link, nor a FIFO a container put in the
// shared directory to hang its reader).
func Read(path string) (*Card, error) {
	f, _, err := untrusted.OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("schedfile: %w", err)
	}
	defer f.Close()
	buf, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, fmt.Errorf("schedfile: %s: empty", path)
	}
	var out C.struct_gs_sfr_card
	var why *C.char
	if C.gs_sfr_decode(unsafe.Pointer(&buf[0]), C.size_t(len(buf)), &out, &why) != 0 {
		return nil, fmt.Errorf("schedfile: %s: %s", path, C.GoString(why))
	}
	c := &Card{Policy: int(out.policy), MaxInst: int(out.max_inst),
		SliceNs: uint64(out.slice_ns), Owner: int(out.owner)}
	for i := 0; i < int(out.nvgpus); i++ {
		v := &out.vgpu[i]
		c.VGPUs = append(c.VGPUs, VGPU{
			Key: C.GoString(&v.key[0]), ID: int(v.id), Quota: int(v.quota),
			High: v.high != 0, NProcs: int(v.nprocs), BusyNs: uint64(v.busy_ns),
			Slices: uint64(v.slices), OverrunNs: uint64(v.overrun_ns),
		})
	}
	return c, nil
}
