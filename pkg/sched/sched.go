// Package sched is the Go face of gpuslice's compute scheduler: which vGPU
// owns a card's compute, slice by slice, under the policies 0-6 of the
// reference.
//
// The implementation is the portable C core of kmod/core (gs_sched.c and
// gs_drain.c),
// compiled in through cgo: the kernel module and the shim's no-module mode
// compile the same source, so there is one scheduler, written once. See
// kmod/core/README.md for the policies as implemented.
//
// Time is virtual: every call that needs it takes now, in nanoseconds from
// any fixed origin, and the core never reads a clock. A Card is not safe
// for concurrent use: callers serialise, as the core requires.
package sched

/*
#cgo CFLAGS: -I${SRCDIR}/../../kmod/core
#cgo CFLAGS: -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
#include "sched_c.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// The core's error codes are Linux's errno values, so that the module can
// return them as they are: a mismatch overflows a constant and fails the
// build.
const (
	_ = uint(C.GS_ENOENT-syscall.ENOENT) + uint(syscall.ENOENT-C.GS_ENOENT)
	_ = uint(C.GS_EBUSY-syscall.EBUSY) + uint(syscall.EBUSY-C.GS_EBUSY)
	_ = uint(C.GS_EINVAL-syscall.EINVAL) + uint(syscall.EINVAL-C.GS_EINVAL)
	_ = uint(C.GS_ENOSPC-syscall.ENOSPC) + uint(syscall.ENOSPC-C.GS_ENOSPC)
	_ = uint(C.GS_EOPNOTSUPP-syscall.EOPNOTSUPP) + uint(syscall.EOPNOTSUPP-C.GS_EOPNOTSUPP)
)

// Policy is a card's scheduling policy, numbered as in the reference.
type Policy uint32

// The policies of reference.md section 3.
const (
	Native             Policy = C.GS_POLICY_NATIVE
	Fixed              Policy = C.GS_POLICY_FIXED
	Average            Policy = C.GS_POLICY_AVERAGE
	Preemptive         Policy = C.GS_POLICY_PREEMPTIVE
	WeightedPreemptive Policy = C.GS_POLICY_WEIGHTED
	Hybrid             Policy = C.GS_POLICY_HYBRID
	WeightedWeak       Policy = C.GS_POLICY_WEIGHTED_WEAK
)

func (p Policy) String() string {
	names := [...]string{"native", "fixed", "average", "preemptive",
		"weighted-preemptive", "hybrid", "weighted-weak"}
	if int(p) < len(names) {
		return names[p]
	}
	return fmt.Sprintf("policy(%d)", uint32(p))
}

// Limits and defaults of the core.
const (
	MaxInstMin     = C.GS_MAX_INST_MIN
	MaxInstMax     = C.GS_MAX_INST_MAX
	MaxInstDefault = C.GS_MAX_INST_DEFAULT
	MaxVGPUs       = C.GS_MAX_VGPUS
	QuotaStep      = C.GS_QUOTA_STEP
	QuotaMax       = C.GS_QUOTA_MAX

	SliceMin       = time.Duration(C.GS_SLICE_MIN_NS)
	SliceMax       = time.Duration(C.GS_SLICE_MAX_NS)
	SliceDefault   = time.Duration(C.GS_SLICE_DEFAULT_NS)
	ReclaimMin     = time.Duration(C.GS_RECLAIM_MIN_NS)
	ReclaimMax     = time.Duration(C.GS_RECLAIM_MAX_NS)
	ReclaimDefault = time.Duration(C.GS_RECLAIM_DEFAULT_NS)
)

// Owners that are not a vGPU id.
const (
	// None: the card is idle for this slice, nobody may run.
	None = C.GS_OWNER_NONE
	// All: policy 0, every vGPU may always run.
	All = C.GS_OWNER_ALL
)

// Errors, one per negative code of the core.
var (
	ErrInvalid      = errors.New("sched: value out of range")
	ErrNoSpace      = errors.New("sched: too many vGPUs or quotas over the card")
	ErrBusy         = errors.New("sched: card setting changed while vGPUs exist")
	ErrNotFound     = errors.New("sched: no such vGPU")
	ErrNotSupported = errors.New("sched: high priority is not supported under policy 5 (hybrid)")
)

func errOf(rc C.int) error {
	switch -rc {
	case C.GS_EINVAL:
		return ErrInvalid
	case C.GS_ENOSPC:
		return ErrNoSpace
	case C.GS_EBUSY:
		return ErrBusy
	case C.GS_ENOENT:
		return ErrNotFound
	case C.GS_EOPNOTSUPP:
		return ErrNotSupported
	}
	return fmt.Errorf("sched: error %d", int(rc))
}

// Config is a card's configuration.
type Config struct {
	MaxInst int           // units per period, 1-64
	Policy  Policy        // 0-6
	Slice   time.Duration // one unit's length, 1-100 ms
	Reclaim time.Duration // a vGPU without work this long is idle
}

// DefaultConfig is 20 units of 5 ms, policy 0, 100 ms reclaim window.
func DefaultConfig() Config {
	var c C.struct_gs_sched_config
	C.gs_config_default(&c)
	return fromC(c)
}

func fromC(c C.struct_gs_sched_config) Config {
	return Config{
		MaxInst: int(c.max_inst),
		Policy:  Policy(c.policy),
		Slice:   time.Duration(c.slice_ns),
		Reclaim: time.Duration(c.reclaim_ns),
	}
}

func (cfg Config) toC() (C.struct_gs_sched_config, error) {
	var c C.struct_gs_sched_config
	if cfg.MaxInst < 0 || cfg.MaxInst > 1<<31 || cfg.Slice < 0 || cfg.Reclaim < 0 {
		return c, ErrInvalid
	}
	c.max_inst = C.u32(cfg.MaxInst)
	c.policy = C.u32(cfg.Policy)
	c.slice_ns = C.u64(cfg.Slice)
	c.reclaim_ns = C.u64(cfg.Reclaim)
	return c, nil
}

// Card is one card's scheduler state. It lives in Go memory and holds no
// pointers; do not copy it once in use.
type Card struct {
	c C.struct_gs_card
}

// New returns an empty card configured with cfg.
func New(cfg Config) (*Card, error) {
	cc, err := cfg.toC()
	if err != nil {
		return nil, err
	}
	c := new(Card)
	if rc := C.gs_card_init(&c.c, &cc); rc != 0 {
		return nil, errOf(rc)
	}
	return c, nil
}

// Configure changes the configuration of a card that has no vGPU
// (ErrBusy otherwise). The schedule restarts at the next Tick.
func (c *Card) Configure(cfg Config) error {
	cc, err := cfg.toC()
	if err != nil {
		return err
	}
	if rc := C.gs_card_configure(&c.c, &cc); rc != 0 {
		return errOf(rc)
	}
	return nil
}

// Config returns the card's configuration.
func (c *Card) Config() Config { return fromC(c.c.cfg) }

func prio(high bool) C.u32 {
	if high {
		return 1
	}
	return 0
}

func quotaC(quota int) C.u32 {
	if quota < 0 || quota > QuotaMax {
		return C.u32(QuotaMax + 1) // refused by the core
	}
	return C.u32(quota)
}

// AddVGPU adds a vGPU with a compute quota (percent, 0-100 in steps of 5)
// and a priority, and returns its id (0 to MaxInst-1, the lowest free).
func (c *Card) AddVGPU(quota int, high bool) (int, error) {
	rc := C.gs_vgpu_add(&c.c, quotaC(quota), prio(high))
	if rc < 0 {
		return 0, errOf(rc)
	}
	return int(rc), nil
}

// UpdateVGPU changes a vGPU's quota and priority.
func (c *Card) UpdateVGPU(id, quota int, high bool) error {
	if rc := C.gs_vgpu_update(&c.c, cid(id), quotaC(quota), prio(high)); rc != 0 {
		return errOf(rc)
	}
	return nil
}

// RemoveVGPU removes a vGPU; its id may be reused at once.
func (c *Card) RemoveVGPU(id int) error {
	if rc := C.gs_vgpu_remove(&c.c, cid(id)); rc != 0 {
		return errOf(rc)
	}
	return nil
}

func cid(id int) C.int {
	if id < 0 || id >= MaxVGPUs {
		return -1
	}
	return C.int(id)
}

// SetProcs records how many processes hold the GPU in vGPU id.
func (c *Card) SetProcs(id, n int) error {
	if n < 0 || n > 1<<31 {
		return ErrInvalid
	}
	if rc := C.gs_vgpu_set_procs(&c.c, cid(id), C.u32(n)); rc < 0 {
		return errOf(rc)
	}
	return nil
}

// NoteWork records that vGPU id submitted work at now, and whether work is
// still waiting for the GPU (pending) or its queue has drained.
func (c *Card) NoteWork(id int, now uint64, pending bool) error {
	if rc := C.gs_vgpu_note_work(&c.c, cid(id), C.u64(now), C.bool(pending)); rc != 0 {
		return errOf(rc)
	}
	return nil
}

// Hold records that vGPU id was granted the current slice and may have
// work queued in it (holding), or not. When a holding owner's slice ends,
// the card is handed on at once and the owner drains behind the next one
// (Drainer), until its Release, at most DrainBound.
func (c *Card) Hold(id int, holding bool) error {
	if rc := C.gs_vgpu_hold(&c.c, cid(id), C.bool(holding)); rc != 0 {
		return errOf(rc)
	}
	return nil
}

// Watch records that vGPU id's processes watch for a cut slice and drain
// what they queued (the shim's fencers): Preempt may then end its slices
// before it holds them. Off for a new vGPU.
func (c *Card) Watch(id int, watches bool) error {
	if rc := C.gs_vgpu_watch(&c.c, cid(id), C.bool(watches)); rc != 0 {
		return errOf(rc)
	}
	return nil
}

// Release says vGPU id's work has drained at now (the card is advanced to
// now first). From the drainer it ends the drain, the time past its
// slice's end becomes its debt and the current slice ends a slice after
// now: it reports true (republish), as when advancing began a slice. A
// late release, after the drain lapsed and before the vGPU was granted a
// new slice, owes its real overrun (at most DrainMax past its slice), and
// the current slice ends as much later as the late work ran in it (true).
func (c *Card) Release(id int, now uint64) bool {
	return bool(C.gs_vgpu_drained(&c.c, cid(id), C.u64(now)))
}

// Preempt ends a low-priority (or idle) slice at now when a high-priority
// vGPU has work waiting; it reports whether it did.
func (c *Card) Preempt(now uint64) bool { return bool(C.gs_preempt(&c.c, C.u64(now))) }

// NextChange is when the card changes next: the drain's bound while a
// drain is on, else the slice's end.
func (c *Card) NextChange() uint64 { return uint64(C.gs_next_change(&c.c)) }

// Drainer is the vGPU draining behind the current slice's owner (its
// slice ended while it held), or None.
func (c *Card) Drainer() int { return int(C.gs_drainer(&c.c)) }

// DrainStart is when the current drain began (the drainer's slice end).
func (c *Card) DrainStart() uint64 { return uint64(c.c.drain_start) }

// DrainSlice is the start of the slice the current drainer held: a
// caller releases the drain for a hold of that slice only.
func (c *Card) DrainSlice() uint64 { return uint64(c.c.drain_slice) }

// LapsedSlice is the start of the slice whose drain lapsed unreleased for
// vGPU id (its late release is for a hold of it), and whether there is one.
func (c *Card) LapsedSlice(id int) (uint64, bool) {
	if id < 0 || id >= MaxVGPUs || c.c.vgpu[id].in_use == 0 || c.c.vgpu[id].lapsed == 0 {
		return 0, false
	}
	return uint64(c.c.vgpu[id].lapse_slice), true
}

// DrainBound is how long the card waits for the current drainer (with
// none, for a holder whose slice ends): min(slice, DrainMax) for an open
// drain, that plus twice the vGPU's tail (at most DrainMax) for a closed
// one, and after a priority cut at most CutDrainMax.
func (c *Card) DrainBound() uint64 { return uint64(C.gs_drain_bound(&c.c)) }

// Closed reports whether the current drain is closed: the slice's owner
// waits for it (Owner is None, MayRun false) because the drainer's tails
// are long.
func (c *Card) Closed() bool { return c.c.closed != 0 }

// Tail is vGPU id's drains' decaying maximum, which decides whether its
// next drain is closed (over half a slice).
func (c *Card) Tail(id int) uint64 {
	if id < 0 || id >= MaxVGPUs || c.c.vgpu[id].in_use == 0 {
		return 0
	}
	return uint64(c.c.vgpu[id].tail_ns)
}

// Granted is the time vGPU id owned the card until now: its slices from
// start to end (or cut, or now), its drains and the late overrun charged
// at late releases. 0 for an unknown id.
func (c *Card) Granted(id int, now uint64) uint64 {
	return uint64(C.gs_vgpu_granted_ns(&c.c, cid(id), C.u64(now)))
}

// Overrun is the drain overrun vGPU id was charged in all.
func (c *Card) Overrun(id int) uint64 {
	return uint64(C.gs_vgpu_overrun_ns(&c.c, cid(id)))
}

// Debt is the overrun vGPU id still owes its next slices, and the overrun
// it was charged in all.
func (c *Card) Debt(id int) (owed, total uint64) {
	if id < 0 || id >= MaxVGPUs || c.c.vgpu[id].in_use == 0 {
		return 0, 0
	}
	return uint64(c.c.vgpu[id].debt_ns), uint64(c.c.vgpu[id].overrun_ns)
}

// DrainMax is the most overrun one slice is ever charged, and the longest
// drain bound (a slice of 100 ms).
const DrainMax = uint64(C.GS_DRAIN_MAX_NS)

// CutDrainMax bounds the drain of a slice a high-priority vGPU cut short.
const CutDrainMax = uint64(C.GS_CUT_DRAIN_MAX_NS)

// Active reports whether vGPU id counts as active at now: a process holds
// the GPU and it has work waiting or worked within the reclaim window.
func (c *Card) Active(id int, now uint64) bool {
	return bool(C.gs_vgpu_active(&c.c, cid(id), C.u64(now)))
}

// Tick advances the card to the slice covering now and returns its owner:
// a vGPU id, None or All.
func (c *Card) Tick(now uint64) int { return int(C.gs_tick(&c.c, C.u64(now))) }

// Owner is the owner of the current slice: None while it waits for a
// closed drain.
func (c *Card) Owner() int { return int(C.gs_owner(&c.c)) }

// SliceEnd is when the current slice ends.
func (c *Card) SliceEnd() uint64 { return uint64(C.gs_slice_end(&c.c)) }

// SliceStart is when the current slice began (it never changes after).
func (c *Card) SliceStart() uint64 { return uint64(c.c.slice_start) }

// PeekNext is who Tick would hand the card to at SliceEnd, given the
// activity at now.
func (c *Card) PeekNext(now uint64) int { return int(C.gs_peek_next(&c.c, C.u64(now))) }

// MayRun is the fast-path check: may vGPU id run at now without a Tick?
func (c *Card) MayRun(id int, now uint64) bool {
	return bool(C.gs_may_run(&c.c, cid(id), C.u64(now)))
}

// Stats are a card's counters since it was configured.
type Stats struct {
	Handovers    uint64 // slices begun
	IdleSlices   uint64 // slices nobody owned
	MissedSlices uint64 // slices skipped over by a late Tick
	ClosedDrains uint64 // drains the next owner waited for (long tails)
}

// Stats returns the card's counters.
func (c *Card) Stats() Stats {
	return Stats{
		Handovers:    uint64(c.c.handovers),
		IdleSlices:   uint64(c.c.idle_slices),
		MissedSlices: uint64(c.c.missed_slices),
		ClosedDrains: uint64(c.c.closed_drains),
	}
}

// Slices is the number of slices vGPU id has been granted since it was
// added (0 for an unknown id).
func (c *Card) Slices(id int) uint64 {
	if id < 0 || id >= MaxVGPUs || c.c.vgpu[id].in_use == 0 {
		return 0
	}
	return uint64(c.c.vgpu[id].slices)
}

// Table returns the unit table: each unit's owning vGPU id, None for a
// unit of nobody, or Shared (policy 5's quota-0 pool).
func (c *Card) Table() []int {
	t := make([]int, c.c.cfg.max_inst)
	for i := range t {
		switch u := c.c.table[i]; u {
		case C.GS_UNIT_FREE:
			t[i] = None
		case C.GS_UNIT_SHARED:
			t[i] = Shared
		default:
			t[i] = int(u)
		}
	}
	return t
}

// Shared marks, in Table, a unit of policy 5's quota-0 pool.
const Shared = -3
