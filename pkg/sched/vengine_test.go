package sched

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A tenant of the virtual-time engine.
type vtenant struct {
	quota    int
	high     bool
	kernel   uint64 // duration of each kernel
	depth    int    // kernels in flight at most
	gap      uint64 // wait after each completion before the next launch
	id       int
	inflight int
	nextAt   uint64   // when it wants to launch again (gap)
	busy     uint64   // engine time its kernels got, in the window
	perWin   []uint64 // engine time per period, by the kernels' ends
	lat      []uint64
	launched []uint64 // launch times of its kernels in flight, FIFO
	holding  bool     // it held a slice and has not released since
	held     uint64   // start of the slice it held last
	seq      uint64   // kernels launched
	done     uint64   // kernels completed
	fence    uint64   // its last kernel of the slice held (0: still open)
	wake     uint64   // wake-up latency of its fencer and its launcher
	relAt    uint64   // its fencer releases then (0: not due)
	runAt    uint64   // it may launch from then (its launcher woke)
	runnable bool     // it could run at the last step
	queued   []uint64 // time-sliced engine: what is left of its kernels
	noted    bool     // reported its work to the core once
	pending  bool     // what it reported last
}

type vkernel struct {
	t          *vtenant
	start, end uint64
}

/*
 * engineRun drives the core as the no-module gate does, in virtual time
 * (2 us steps), against a first-come, non-preemptive engine (a kernel
 * starts when every kernel launched before it, by any tenant, is done;
 * engineRunSliced: one that takes turns, below): an owner
 * launches while it may run (its launcher wakes wake after it may), holds
 * each slice it launches in, and its fencer releases the hold wake after
 * its last kernel completed, once it may not run any more; as the shim's,
 * its fencer keeps a slice of its own that follows with work still
 * queued (no fence between), and a launch waits for a fence in flight. A
 * waiting high-priority tenant preempts. It returns each tenant's share of the
 * engine time after warm-up; perWin is each tenant's engine time in each
 * 100 ms of wall time.
 */
func engineRun(t *testing.T, policy Policy, ts []*vtenant, dur uint64) []float64 {
	t.Helper()
	return engineRunOn(t, newCard(t, policy, 20), ts, dur)
}

// engineRunOn is engineRun on a card of any configuration.
func engineRunOn(t *testing.T, c *Card, ts []*vtenant, dur uint64) []float64 {
	t.Helper()
	return runEngine(t, c, ts, dur, 0)
}

/*
 * engineRunSliced is engineRunOn against an engine that takes turns
 * between the tenants with work queued, timeslice each, as a GPU does
 * between contexts (with compute preemption, Pascal and later, even inside
 * a kernel): a tail then shares the engine with the next owner's work
 * instead of running before it. simcuda takes turns kernel by kernel.
 */
func engineRunSliced(t *testing.T, c *Card, ts []*vtenant, dur, timeslice uint64) []float64 {
	t.Helper()
	return runEngine(t, c, ts, dur, timeslice)
}

// ran books engine time [from, to) to v: busy after warm-up, and each
// 100 ms window's part.
func (v *vtenant) ran(from, to, warm uint64) {
	if to > warm {
		v.busy += to - max(from, warm)
	}
	for w := from / (100 * ms); w*100*ms < to; w++ {
		for uint64(len(v.perWin)) <= w {
			v.perWin = append(v.perWin, 0)
		}
		v.perWin[w] += min(to, (w+1)*100*ms) - max(from, w*100*ms)
	}
}

// finish completes v's oldest kernel in flight at end.
func (v *vtenant) finish(end uint64) {
	v.inflight--
	v.done++
	v.lat = append(v.lat, end-v.launched[0])
	v.launched = v.launched[1:]
	v.nextAt = end + v.gap
}

// slicedStep runs the time-sliced engine for one step from now: the
// tenant whose turn it is, or the next one with work queued.
func slicedStep(ts []*vtenant, now, step, warm, timeslice uint64, cur *int, used *uint64) {
	for tries := 0; tries <= len(ts); tries++ {
		if v := ts[*cur]; len(v.queued) > 0 && *used < timeslice {
			v.queued[0] -= min(step, v.queued[0])
			*used += step
			v.ran(now, now+step, warm)
			if v.queued[0] == 0 {
				v.queued = v.queued[1:]
				v.finish(now + step)
			}
			return
		}
		*cur, *used = (*cur+1)%len(ts), 0
	}
}

func runEngine(t *testing.T, c *Card, ts []*vtenant, dur, timeslice uint64) []float64 {
	t.Helper()
	for _, v := range ts {
		id, err := c.AddVGPU(v.quota, v.high)
		require.NoError(t, err)
		v.id = id
		require.NoError(t, c.SetProcs(id, 1))
	}
	const step = 2000 // ns
	warm := dur / 5
	var queue []vkernel
	var engineFree, used uint64
	cur := 0
	for now := uint64(0); now < dur; now += step {
		if timeslice > 0 {
			slicedStep(ts, now, step, warm, timeslice, &cur, &used)
		}
		// Kernels that completed (first-come engine).
		for len(queue) > 0 && queue[0].end <= now {
			k := queue[0]
			queue = queue[1:]
			k.t.ran(k.start, k.end, warm)
			k.t.finish(k.end)
		}
		for _, v := range ts {
			// Reported when it changes, as the gate does (ACQUIRE,
			// RELEASE): the report's time is the last work's.
			pending := v.holding || v.inflight < v.depth && now >= v.nextAt
			if !v.noted || pending != v.pending {
				require.NoError(t, c.NoteWork(v.id, now, pending))
				v.noted, v.pending = true, pending
			}
		}
		c.Preempt(now)
		c.Tick(now)
		for _, v := range ts {
			// The fence: at the end of the slice it held, the
			// fencer waits for the last kernel it launched in it
			// and releases, waking v.wake after it completed. A
			// slice of its own that follows, its work still
			// queued, is kept, held with no fence (the shim's
			// fencer, keep_slice_locked).
			if !v.holding || c.MayRun(v.id, now) && c.SliceStart() == v.held {
				continue
			}
			if v.fence == 0 && v.done < v.seq && c.MayRun(v.id, now) {
				v.held = c.SliceStart()
				require.NoError(t, c.Hold(v.id, true))
				continue
			}
			if v.fence == 0 {
				v.fence = v.seq
			}
			if v.done < v.fence {
				continue
			}
			if v.relAt == 0 {
				v.relAt = now + v.wake
			}
			if now >= v.relAt {
				v.holding, v.relAt, v.fence = false, 0, 0
				v.pending = now >= v.nextAt
				require.NoError(t, c.NoteWork(v.id, now, v.pending))
				c.Release(v.id, now)
			}
		}
		for _, v := range ts {
			runnable := c.MayRun(v.id, now)
			if runnable && !v.runnable {
				v.runAt = now + v.wake
			}
			v.runnable = runnable
			// A launch in a new slice waits for a fence in flight
			// (the shim's slow path, wait_fence_locked).
			fencing := v.holding && v.fence != 0
			for !fencing && c.MayRun(v.id, now) && now >= v.runAt && v.inflight < v.depth && now >= v.nextAt {
				// A hold is of the slice granted; a new one
				// supersedes an earlier one still draining
				// (the core charged it when it was granted).
				if !v.holding || v.held != c.SliceStart() {
					v.holding, v.held = true, c.SliceStart()
					v.fence, v.relAt = 0, 0
					require.NoError(t, c.Hold(v.id, true))
				}
				if timeslice > 0 {
					v.queued = append(v.queued, v.kernel)
				} else {
					start := max(engineFree, now)
					engineFree = start + v.kernel
					queue = append(queue, vkernel{t: v, start: start, end: engineFree})
				}
				v.inflight++
				v.seq++
				v.launched = append(v.launched, now)
			}
		}
	}
	var total uint64
	for _, v := range ts {
		total += v.busy
	}
	shares := make([]float64, len(ts))
	for i, v := range ts {
		shares[i] = 100 * float64(v.busy) / float64(total)
	}
	return shares
}
