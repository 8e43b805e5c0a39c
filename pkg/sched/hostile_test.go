package sched

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// How a hostile tenant behaves (issue 14 item 1).
type hostility int

const (
	holder  hostility = iota // acquires, holds, never releases
	late                     // holds, releases lateBy past its drain's bound
	claimer                  // reports work it does not have, holds its slices, runs nothing
)

func (h hostility) String() string { return [...]string{"holder", "late", "claimer"}[h] }

// segment: from t on (to the next segment), the hostile tenant uses the
// card at rate h (0 or 1: it owns it or its work drains) and the victim
// at rate v (it owns it and no hostile tail runs ahead of its work).
type segment struct {
	t    uint64
	h, v uint64
}

type hostileRun struct {
	segs       []segment
	victimWait uint64 // longest time between two of its slices
	maxDrain   uint64 // the longest bound a hostile drain was given
	end        uint64
}

// cumulative usage of the hostile tenant (h) or the victim at t.
func (r *hostileRun) used(t uint64, victim bool) uint64 {
	var sum uint64
	for i, s := range r.segs {
		next := r.end
		if i+1 < len(r.segs) {
			next = r.segs[i+1].t
		}
		if s.t >= t {
			break
		}
		rate := s.h
		if victim {
			rate = s.v
		}
		sum += rate * (min(next, t) - s.t)
	}
	return sum
}

/*
 * runHostile drives the core, event by event in virtual time, with a
 * hostile tenant h and a busy victim v (it holds each slice and releases
 * at its end, its work having run). It records who uses the card: the
 * hostile tenant while it owns it or its tail may run (a holder's until
 * the drain lapses, a late releaser's until it releases), the victim
 * while it owns the card and no hostile tail runs ahead of its work.
 */
func runHostile(t *testing.T, c *Card, h, v int, kind hostility, dur uint64) *hostileRun {
	t.Helper()
	r := &hostileRun{end: dur}
	bound := min(uint64(c.Config().Slice), DrainMax)
	var hHeld, vHeld uint64 = 1, 1 // slice starts held (1: none)
	var lateAt uint64
	tail := false // a late releaser's tail runs past its drain's lapse
	vEnd, vSeen := uint64(0), false
	now := uint64(0)
	c.Tick(0)
	for now < dur {
		o := c.Owner()
		if o == h && c.SliceStart() != hHeld {
			require.NoError(t, c.Hold(h, true))
			hHeld = c.SliceStart()
		}
		if o == v && c.SliceStart() != vHeld {
			require.NoError(t, c.Hold(v, true))
			vHeld = c.SliceStart()
			// It may run from now (a closed drain may have kept
			// it waiting since its slice's start).
			if vSeen {
				r.victimWait = max(r.victimWait, now-vEnd)
			}
		}
		if o == v {
			vEnd, vSeen = c.SliceEnd(), true
		}
		// The victim's work ran in its slice: it drains at once.
		if c.Drainer() == v {
			c.Release(v, now)
			continue
		}
		if c.Drainer() == h && kind == claimer {
			c.Release(h, now)
			continue
		}
		if c.Drainer() == h {
			r.maxDrain = max(r.maxDrain, c.DrainBound())
		}
		// Past its bound (long tails close its drains and lengthen
		// it), within the most a drain is charged.
		if c.Drainer() == h && kind == late && lateAt == 0 {
			lateAt = min(c.DrainStart()+c.DrainBound()+lateBy(bound),
				c.DrainStart()+DrainMax)
			tail = true
		}
		hUse := o == h || c.Drainer() == h || tail
		seg := segment{t: now}
		if hUse {
			seg.h = 1
		}
		if o == v && !(c.Drainer() == h || tail) {
			seg.v = 1
		}
		r.segs = append(r.segs, seg)
		next := c.NextChange()
		if lateAt != 0 && lateAt < next {
			next = lateAt
		}
		now = next
		if lateAt != 0 && now >= lateAt {
			c.Release(h, now)
			lateAt, tail = 0, false
		}
		c.Tick(now)
	}
	return r
}

// gapUnits is the longest run of others' units between two of id's in the
// table (cyclic), and its entitled share of the served units.
func tableShares(c *Card, h, v int, skipsFree bool) (gap int, shareH, shareV float64) {
	table := c.Table()
	var uh, uv, run, first int
	first = -1
	for i, o := range table {
		switch o {
		case h:
			uh++
		case v:
			uv++
		}
		if o == v && first < 0 {
			first = i
		}
	}
	m := len(table)
	for i := 1; i <= m; i++ {
		if o := table[(first+i)%m]; o == v {
			gap = max(gap, run)
			run = 0
		} else if !skipsFree || o >= 0 {
			run++
		}
	}
	den := m
	if skipsFree {
		den = uh + uv
	}
	return gap, float64(uh) / float64(den), float64(uv) / float64(den)
}

// A tenant that holds its slices and never releases, one that releases
// late and one that claims work it does not have, next to a busy victim,
// under every gated policy, for max_inst 1-64 and slices 1-100 ms:
//   - a holder's and a claimer's drains stay open, bound one slice (they
//     never release a long tail); a late releaser's tails are long, so its
//     drains close (its neighbours wait for them), bound a slice plus twice
//     its tail, at most DrainMax: drain, below, is the longest it got;
//   - over every window of W = 4 periods after the first, the hostile
//     tenant's share of wall time is at most its quota's share plus (slice
//   - drain) / (W * period): it holds the card at most one slice and
//     one drain beyond what its debt repays (a late releaser's tail past
//     the bound, lateBy, is added: its work really ran then);
//   - the victim's longest wait between two of its slices, until it may
//     run, is at most gap x (slice + drain), gap the longest run of others'
//     units between two of its own in the table: each such unit lasts at
//     most a slice and the drain its predecessor's holder may add;
//   - over the whole run both shares are within 1 point of the quota's.
//
// (A late releaser's tail past the bound lengthens the slice it ran in:
// gs_vgpu_drained.) With the old core 262 of the 336 holder subtests
// failed (and 330 of the late ones): the holder kept the card DrainMax (100 ms)
// at every held slice, its debt capped at one period; fixed 30/50 at 20 x
// 1 ms: the holder 70 % of wall time, the victim 21.4 %, waiting 102 ms
// (bound 4 ms).
func TestHostileTenants(t *testing.T) {
	const W = 4
	type pol struct {
		p      Policy
		qh, qv int
	}
	pols := []pol{
		{Fixed, 30, 50}, {Average, 0, 0}, {Preemptive, 0, 0},
		{WeightedPreemptive, 30, 50}, {Hybrid, 30, 50},
		{WeightedWeak, 30, 50},
	}
	fails := 0
	for _, p := range pols {
		for _, m := range []int{1, 2, 3, 5, 7, 10, 20, 32, 64} {
			for _, sl := range []uint64{1, 2, 5, 10, 20, 50, 100} {
				for _, kind := range []hostility{holder, late, claimer} {
					name := fmt.Sprintf("%v-%d-%d/max_inst=%d/slice=%dms/%v", p.p, p.qh, p.qv, m, sl, kind)
					cfg := DefaultConfig()
					cfg.Policy, cfg.MaxInst = p.p, m
					cfg.Slice = time.Duration(sl) * time.Millisecond
					c, err := New(cfg)
					require.NoError(t, err)
					h, err := c.AddVGPU(p.qh, false)
					if err != nil {
						continue // refused by the policy
					}
					v, err := c.AddVGPU(p.qv, false)
					if err != nil {
						continue
					}
					if !t.Run(name, func(t *testing.T) {
						setAct(t, c, h, busy, 0)
						setAct(t, c, v, busy, 0)
						checkHostile(t, c, h, v, kind, W)
					}) {
						fails++
					}
				}
			}
		}
	}
	t.Logf("%d subtests failed", fails)
}

func checkHostile(t *testing.T, c *Card, h, v int, kind hostility, W int) {
	slice := uint64(c.Config().Slice)
	bound := min(slice, DrainMax)
	p := c.Config().Policy
	skips := p == Preemptive || p == WeightedPreemptive || p == WeightedWeak
	gap, shareH, shareV := tableShares(c, h, v, skips)
	units := len(c.Table())
	if skips {
		units = 0
		for _, o := range c.Table() {
			if o >= 0 {
				units++
			}
		}
	}
	period := uint64(units) * slice
	// Long enough that the last drain's debt, unrepaid at the end, is
	// within the long-run share's point: a late releaser's drains close
	// and grow to DrainMax.
	dur := max(50*period, 1000*slice)
	if kind == late {
		dur = max(dur, 100*DrainMax)
	}
	r := runHostile(t, c, h, v, kind, dur)

	// A holder and a claimer never release a long tail: their drains
	// stay open, one slice. A late releaser's tails are long: its
	// drains close, a slice plus twice its tail, at most DrainMax.
	if kind == late {
		assert.LessOrEqual(t, r.maxDrain, DrainMax)
	} else {
		assert.LessOrEqual(t, r.maxDrain, bound, "open drains")
	}
	drain := max(bound, r.maxDrain)
	w := uint64(W) * period
	extra := slice + drain
	if kind == late {
		extra += lateBy(bound)
	}
	limit := shareH + float64(extra)/float64(w)
	// The window's share peaks with one end at a segment's start.
	var worst float64
	var worstAt uint64
	pts := make([]uint64, 0, 2*len(r.segs))
	for _, s := range r.segs {
		pts = append(pts, s.t)
		if s.t >= w {
			pts = append(pts, s.t-w)
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i] < pts[j] })
	for _, a := range pts {
		if a < period || a+w > r.end {
			continue
		}
		got := float64(r.used(a+w, false)-r.used(a, false)) / float64(w)
		if got > worst {
			worst, worstAt = got, a
		}
	}
	assert.LessOrEqual(t, r.victimWait, uint64(gap)*(slice+drain), "victim waited %d us, gap %d units", r.victimWait/1000, gap)
	span := float64(r.end - period)
	longH := float64(r.used(r.end, false)-r.used(period, false)) / span
	longV := float64(r.used(r.end, true)-r.used(period, true)) / span
	assert.LessOrEqual(t, worst, limit+1e-9, "window share %.4f at %d ms > %.4f", worst, worstAt/ms, limit)
	assert.InDelta(t, 100*shareH, 100*longH, 1, "hostile share over the run")
	assert.InDelta(t, 100*shareV, 100*longV, 1, "victim share over the run")
}

// A high-priority vGPU next to a low-priority holder that never releases:
// its wait is 0 from the cut (it may launch at once), and the holder
// drains behind it for the cut bound at most. With the old core the cut
// made it wait for the holder's drain (DrainMax, 100 ms, never released).
func TestPriorityCutsAHolder(t *testing.T) {
	for _, p := range []Policy{Fixed, Average, Preemptive, WeightedPreemptive, WeightedWeak} {
		for _, sl := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 100 * time.Millisecond} {
			t.Run(fmt.Sprintf("%v/slice=%v", p, sl), func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Policy, cfg.Slice = p, sl
				c, err := New(cfg)
				require.NoError(t, err)
				lo, err := c.AddVGPU(50, false)
				require.NoError(t, err)
				hi, err := c.AddVGPU(10, true)
				require.NoError(t, err)
				setAct(t, c, lo, busy, 0)
				require.NoError(t, c.SetProcs(hi, 1))
				for c.Tick(c.SliceEnd()) != lo {
				}
				require.NoError(t, c.Hold(lo, true))
				cut := c.SliceStart() + uint64(sl)/2
				require.NoError(t, c.NoteWork(hi, cut, true))
				require.True(t, c.Preempt(cut))
				c.Tick(cut)
				assert.True(t, c.MayRun(hi, cut), "waits 0 from the cut")
				bound := min(uint64(sl), CutDrainMax)
				assert.Equal(t, lo, c.Drainer())
				assert.Equal(t, bound, c.DrainBound())
				c.Tick(cut + bound)
				assert.Equal(t, None, c.Drainer(), "the holder's drain ends at the cut bound")
				assert.True(t, c.MayRun(hi, cut+bound))
				owed, _ := c.Debt(lo)
				assert.Equal(t, bound, owed)
			})
		}
	}
}

// A flood of waiters: one vGPU re-notes its work and calls Preempt every
// microsecond (as a thousand threads looping on ACQUIRE would), next to a
// busy victim and an idle high-priority vGPU: the victim's share is what
// it is without the flood, within 1 point. (The flood of issue 14 item 5
// was in the module's wake-ups; the core does no work per waiter. This
// guards that: it passes on the old core too.)
func TestWaiterFlood(t *testing.T) {
	run := func(flood bool) float64 {
		c := newCard(t, WeightedWeak, 20)
		f, err := c.AddVGPU(45, false)
		require.NoError(t, err)
		v, err := c.AddVGPU(45, false)
		require.NoError(t, err)
		hi, err := c.AddVGPU(10, true)
		require.NoError(t, err)
		require.NoError(t, c.SetProcs(hi, 1))
		setAct(t, c, f, busy, 0)
		setAct(t, c, v, busy, 0)
		var got uint64
		const us = 1000
		for now := uint64(0); now < 500*ms; now += us {
			if flood {
				require.NoError(t, c.NoteWork(f, now, true))
				c.Preempt(now)
			}
			if c.Tick(now) == v {
				got += us
			}
		}
		return 100 * float64(got) / float64(500*ms)
	}
	quiet, flooded := run(false), run(true)
	assert.InDelta(t, quiet, flooded, 1, "victim %.1f %% quiet, %.1f %% flooded", quiet, flooded)
	assert.InDelta(t, 50, quiet, 1)
}

// lateBy is how late past its drain's bound the late releaser releases:
// half a bound, within DrainMax of its slice's end (past it nothing more
// is charged: DrainMax is the most one slice is charged).
func lateBy(bound uint64) uint64 { return min(bound/2, DrainMax-bound) }
