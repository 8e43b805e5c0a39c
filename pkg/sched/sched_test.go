package sched

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = uint64(time.Millisecond)

// activity of a simulated vGPU.
type activity int

const (
	busy    activity = iota // a process, work always waiting
	noProc                  // no process holds the GPU
	stale                   // a process, but no work for longer than the reclaim window
	drained                 // a process, last work just now, queue drained
)

type vg struct {
	quota int
	high  bool
	act   activity
}

func newCard(t testing.TB, policy Policy, maxInst int) *Card {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Policy = policy
	if maxInst != 0 {
		cfg.MaxInst = maxInst
	}
	c, err := New(cfg)
	require.NoError(t, err)
	return c
}

// setAct sets vGPU id's activity as seen at now.
func setAct(t testing.TB, c *Card, id int, a activity, now uint64) {
	t.Helper()
	switch a {
	case busy:
		require.NoError(t, c.SetProcs(id, 1))
		require.NoError(t, c.NoteWork(id, now, true))
	case noProc:
		require.NoError(t, c.SetProcs(id, 0))
	case stale:
		require.NoError(t, c.SetProcs(id, 2))
		require.NoError(t, c.NoteWork(id, 0, false))
	case drained:
		require.NoError(t, c.SetProcs(id, 1))
		require.NoError(t, c.NoteWork(id, now, false))
	}
}

// run ticks the card once per slice for n slices from start and returns
// the slices each owner got (by id; None and All under their own keys).
func run(t testing.TB, c *Card, start uint64, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	slice := uint64(c.Config().Slice)
	for i := 0; i < n; i++ {
		now := start + uint64(i)*slice
		o := c.Tick(now)
		require.Equal(t, now+slice, c.SliceEnd())
		got[o]++
		// The fast path agrees with the owner.
		if o >= 0 {
			require.True(t, c.MayRun(o, now))
			require.False(t, c.MayRun(o, now+slice))
		}
		for id := 0; id < 3; id++ {
			if id != o && o != All {
				require.False(t, c.MayRun(id, now))
			}
		}
	}
	return got
}

func TestShares(t *testing.T) {
	const n = 10000 // 500 periods of 20 units
	const stalePast = 200 * ms
	tests := []struct {
		name    string
		policy  Policy
		maxInst int
		vgpus   []vg
		want    map[int]int // slices per owner, None for idle slices
		delta   float64     // tolerance in slices
	}{
		{"native", Native, 0, []vg{{30, false, busy}, {0, false, noProc}},
			map[int]int{All: n}, 0},
		{"fixed 30/70", Fixed, 0, []vg{{30, false, busy}, {70, false, busy}},
			map[int]int{0: 3000, 1: 7000}, 0},
		{"fixed lone 30", Fixed, 0, []vg{{30, false, busy}},
			map[int]int{0: 3000, None: 7000}, 0},
		{"fixed 30/70, the 70 without work: its units stay its own", Fixed, 0,
			[]vg{{30, false, busy}, {70, false, stale}},
			map[int]int{0: 3000, 1: 7000}, 0},
		{"fixed 30/20 and 50 unassigned, 20 without process", Fixed, 0, []vg{{30, false, busy}, {20, false, noProc}},
			map[int]int{0: 3000, None: 7000}, 0},
		{"average 2 at max_inst 20", Average, 0, []vg{{30, false, busy}, {50, false, busy}},
			map[int]int{0: 500, 1: 500, None: 9000}, 0},
		{"average 2 at max_inst 10, one without process", Average, 10, []vg{{0, false, busy}, {100, false, noProc}},
			map[int]int{0: 1000, None: 9000}, 0},
		{"preemptive 3 active", Preemptive, 0, []vg{{5, false, busy}, {50, false, busy}, {0, false, busy}},
			map[int]int{0: 3334, 1: 3333, 2: 3333}, 1},
		{"preemptive 2 of 3 active (no process)", Preemptive, 0,
			[]vg{{5, false, busy}, {50, false, noProc}, {0, false, busy}},
			map[int]int{0: 5000, 2: 5000}, 0},
		{"preemptive 2 of 3 active (no work past reclaim)", Preemptive, 0,
			[]vg{{5, false, busy}, {50, false, stale}, {0, false, busy}},
			map[int]int{0: 5000, 2: 5000}, 0},
		{"preemptive none active", Preemptive, 0,
			[]vg{{5, false, stale}, {50, false, noProc}},
			map[int]int{None: n}, 0},
		{"weighted preemptive 5/5/10", WeightedPreemptive, 0,
			[]vg{{5, false, busy}, {5, false, busy}, {10, false, busy}},
			map[int]int{0: 2500, 1: 2500, 2: 5000}, 0},
		{"weighted preemptive 5/5/10, third idle: its units stay idle", WeightedPreemptive, 0,
			[]vg{{5, false, busy}, {5, false, busy}, {10, false, noProc}},
			map[int]int{0: 2500, 1: 2500, None: 5000}, 0},
		{"weighted preemptive 5/10 at max_inst 10", WeightedPreemptive, 10,
			[]vg{{20, false, busy}, {40, false, busy}},
			map[int]int{0: 3334, 1: 6666}, 1},
		{"hybrid 30 + two quota 0", Hybrid, 0,
			[]vg{{30, false, busy}, {0, false, busy}, {0, false, busy}},
			map[int]int{0: 3000, 1: 3500, 2: 3500}, 0},
		{"hybrid 30 + two quota 0, one idle", Hybrid, 0,
			[]vg{{30, false, busy}, {0, false, busy}, {0, false, stale}},
			map[int]int{0: 3000, 1: 7000}, 0},
		{"hybrid 30 idle + two quota 0: its units are not lent", Hybrid, 0,
			[]vg{{30, false, noProc}, {0, false, busy}, {0, false, busy}},
			map[int]int{None: 3000, 1: 3500, 2: 3500}, 0},
		{"hybrid 30/20, no quota 0 vGPU", Hybrid, 0,
			[]vg{{30, false, busy}, {20, false, busy}},
			map[int]int{0: 3000, 1: 2000, None: 5000}, 0},
		{"hybrid three quota 0", Hybrid, 0,
			[]vg{{0, false, busy}, {0, false, busy}, {0, false, busy}},
			map[int]int{0: 3334, 1: 3333, 2: 3333}, 1},
		{"weighted weak 5/5/10", WeightedWeak, 0,
			[]vg{{5, false, busy}, {5, false, busy}, {10, false, busy}},
			map[int]int{0: 2500, 1: 2500, 2: 5000}, 0},
		{"weighted weak 5/5/10, third without process", WeightedWeak, 0,
			[]vg{{5, false, busy}, {5, false, busy}, {10, false, noProc}},
			map[int]int{0: 5000, 1: 5000}, 0},
		{"weighted weak 5/5/10, third without work", WeightedWeak, 0,
			[]vg{{5, false, busy}, {5, false, busy}, {10, false, stale}},
			map[int]int{0: 5000, 1: 5000}, 0},
		{"weighted weak 5/5/10, third drained but within reclaim", WeightedWeak, 0,
			[]vg{{5, false, busy}, {5, false, busy}, {10, false, drained}},
			map[int]int{0: 2500, 1: 2500, 2: 5000}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCard(t, tc.policy, tc.maxInst)
			for i, v := range tc.vgpus {
				id, err := c.AddVGPU(v.quota, v.high)
				require.NoError(t, err)
				require.Equal(t, i, id)
				setAct(t, c, id, v.act, stalePast)
			}
			// "drained" needs its work to stay recent: a short run.
			cnt, start := n, stalePast
			for _, v := range tc.vgpus {
				if v.act == drained {
					cnt = 0
				}
			}
			if cnt == 0 {
				// 20 slices of 5 ms = the reclaim window.
				got := run(t, c, start, 20)
				want := map[int]int{}
				for k, v := range tc.want {
					want[k] = v / 500
				}
				assert.Equal(t, want, got)
				return
			}
			got := run(t, c, start, cnt)
			require.Len(t, got, len(tc.want), "owners: %v", got)
			for k, v := range tc.want {
				assert.InDelta(t, v, got[k], tc.delta, "owner %d: %v", k, got)
			}
			for id := range tc.vgpus {
				if id >= 0 {
					assert.Equal(t, uint64(got[id]), c.Slices(id))
				}
			}
			st := c.Stats()
			assert.Equal(t, uint64(n), st.Handovers)
			assert.Equal(t, uint64(got[None]), st.IdleSlices)
			assert.Zero(t, st.MissedSlices)
		})
	}
}

// The units of a vGPU are spread across the period, not one block.
func TestInterleave(t *testing.T) {
	for _, tc := range []struct {
		policy  Policy
		maxInst int
		quotas  []int
	}{
		{Fixed, 20, []int{30, 70}},
		{Fixed, 20, []int{30}},
		{Fixed, 20, []int{5, 10, 15, 20, 50}},
		{WeightedPreemptive, 20, []int{5, 5, 10}},
		{Hybrid, 20, []int{30, 0, 0}},
		{Hybrid, 20, []int{45, 5, 0}},
		{Fixed, 64, []int{35, 15, 50}},
		{Average, 64, []int{0, 0, 0, 0}},
	} {
		c := newCard(t, tc.policy, tc.maxInst)
		for _, q := range tc.quotas {
			_, err := c.AddVGPU(q, false)
			require.NoError(t, err)
		}
		table := c.Table()
		pos := map[int][]int{}
		for i, o := range table {
			pos[o] = append(pos[o], i)
		}
		for o, p := range pos {
			if o < 0 {
				continue // nobody's units may bunch: nobody waits on them
			}
			k := len(p)
			// Cyclic gaps between a vGPU's units are within 2 of the
			// ideal max_inst/k (each owner's units sit at the ideal
			// points (j+1/2)*max_inst/k, in rank order).
			lo, hi := tc.maxInst/k, (tc.maxInst+k-1)/k
			for i := range p {
				gap := (p[(i+1)%k] - p[i] + tc.maxInst) % tc.maxInst
				if k == 1 {
					gap = tc.maxInst
				}
				assert.True(t, gap >= lo-2 && gap <= hi+2,
					"%v %v: owner %d gap %d outside %d..%d: %v", tc.policy, tc.quotas, o, gap, lo, hi, table)
			}
		}
	}
}

// A fixed 30 % vGPU never runs more than 2 units in a row (6 of 20,
// interleaved), unlike a contiguous block of 6.
func TestInterleaveRuns(t *testing.T) {
	c := newCard(t, Fixed, 0)
	_, err := c.AddVGPU(30, false)
	require.NoError(t, err)
	table := c.Table()
	for i := range table {
		if table[i] == 0 {
			assert.NotEqual(t, 0, table[(i+1)%20], "table %v", table)
		}
	}
}

func Test64VGPUs(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		quota  int
	}{
		{Average, 5}, {Preemptive, 100}, {Hybrid, 0}, {Native, 5},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c := newCard(t, tc.policy, 64)
			for i := 0; i < 64; i++ {
				id, err := c.AddVGPU(tc.quota, false)
				require.NoError(t, err)
				require.Equal(t, i, id)
				setAct(t, c, id, busy, 0)
			}
			_, err := c.AddVGPU(tc.quota, false)
			require.ErrorIs(t, err, ErrNoSpace)
			got := run(t, c, 0, 64*100)
			if tc.policy == Native {
				assert.Equal(t, map[int]int{All: 6400}, got)
				return
			}
			require.Len(t, got, 64)
			for id := 0; id < 64; id++ {
				assert.Equal(t, 100, got[id], "vGPU %d", id)
			}
		})
	}
}

// Weighted weak: an idle vGPU's share is reclaimed within the reclaim
// window, and given back within one period when it works again.
func TestWeightedWeakReclaim(t *testing.T) {
	c := newCard(t, WeightedWeak, 0)
	slice := uint64(SliceDefault)
	for _, q := range []int{5, 5, 10} {
		id, err := c.AddVGPU(q, false)
		require.NoError(t, err)
		setAct(t, c, id, busy, 0)
	}
	got := run(t, c, 0, 2000)
	require.Equal(t, map[int]int{0: 500, 1: 500, 2: 1000}, got)

	// vGPU 2 drains its queue at t0 and submits nothing more.
	t0 := 2000*slice + 2*ms
	require.NoError(t, c.NoteWork(2, t0, false))
	last := uint64(0)
	now := 2000 * slice
	for ; now < t0+time2ns(time.Second); now += slice {
		if c.Tick(now) == 2 {
			last = now
		}
	}
	assert.Less(t, last, t0+uint64(ReclaimDefault), "still served past the reclaim window")
	assert.GreaterOrEqual(t, last, t0, "served while within the reclaim window")
	got = run(t, c, now, 1000)
	assert.Equal(t, map[int]int{0: 500, 1: 500}, got)
	now += 1000 * slice

	// It works again, mid-slice: it runs within one period of 20 units.
	t1 := now + slice/2
	require.NoError(t, c.NoteWork(2, t1, true))
	first := uint64(0)
	for i := 0; i < 20; i++ {
		now += slice
		if c.Tick(now) == 2 {
			first = now
			break
		}
	}
	require.NotZero(t, first, "not served within one period")
	assert.LessOrEqual(t, first-t1, 20*slice)
	got = run(t, c, now+slice, 2000)
	assert.InDelta(t, 500, got[0], 1)
	assert.InDelta(t, 500, got[1], 1)
	assert.InDelta(t, 1000, got[2], 1)

	// Losing its last process makes it idle at the next boundary.
	now += 2001 * slice
	require.NoError(t, c.SetProcs(2, 0))
	assert.False(t, c.Active(2, now))
	assert.NotEqual(t, 2, c.PeekNext(now))
	got = run(t, c, now, 100)
	assert.Equal(t, map[int]int{0: 50, 1: 50}, got)
}

func time2ns(d time.Duration) uint64 { return uint64(d) }

// Preemptive: a vGPU that stops working stops being served within the
// reclaim window.
func TestPreemptiveReclaim(t *testing.T) {
	c := newCard(t, Preemptive, 0)
	slice := uint64(SliceDefault)
	for i := 0; i < 3; i++ {
		id, err := c.AddVGPU(0, false)
		require.NoError(t, err)
		setAct(t, c, id, busy, 0)
	}
	run(t, c, 0, 30)
	now := 30 * slice
	require.NoError(t, c.NoteWork(1, now, false))
	assert.True(t, c.Active(1, now+uint64(ReclaimDefault)-1))
	assert.False(t, c.Active(1, now+uint64(ReclaimDefault)))
	got := run(t, c, now+uint64(ReclaimDefault), 100)
	assert.Equal(t, map[int]int{0: 50, 2: 50}, got)
}

// A runnable high-priority vGPU takes the card at the next slice boundary,
// under every policy but 0 and 5, and gives it back once it has been idle
// for the reclaim window.
func TestHighPriority(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		quotas []int
	}{
		{Fixed, []int{30, 10}},
		{Average, []int{30, 10}},
		{Preemptive, []int{30, 10}},
		{WeightedPreemptive, []int{30, 10}},
		{WeightedWeak, []int{30, 10}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c := newCard(t, tc.policy, 0)
			slice := uint64(SliceDefault)
			lo, err := c.AddVGPU(tc.quotas[0], false)
			require.NoError(t, err)
			hi, err := c.AddVGPU(tc.quotas[1], true)
			require.NoError(t, err)
			setAct(t, c, lo, busy, 0)
			require.NoError(t, c.SetProcs(hi, 1))
			require.NoError(t, c.NoteWork(hi, 0, false))

			// Until lo owns a slice.
			now := uint64(0)
			for c.Tick(now) != lo {
				now += slice
			}
			// Mid-slice, hi gets work: lo keeps its slice to the end.
			mid := now + slice/2
			require.NoError(t, c.NoteWork(hi, mid, true))
			assert.Equal(t, lo, c.Tick(mid))
			assert.True(t, c.MayRun(lo, mid))
			assert.False(t, c.MayRun(hi, mid))
			assert.Equal(t, hi, c.PeekNext(mid))
			// At the boundary hi takes it, and keeps it while it has work.
			now += slice
			for i := 0; i < 50; i++ {
				require.Equal(t, hi, c.Tick(now+uint64(i)*slice))
				assert.True(t, c.MayRun(hi, now+uint64(i)*slice))
				assert.False(t, c.MayRun(lo, now+uint64(i)*slice))
			}
			now += 50 * slice
			// Drained: hi keeps the card for the reclaim window, then
			// the period resumes.
			drained := now - 1
			require.NoError(t, c.NoteWork(hi, drained, false))
			idle := drained + uint64(ReclaimDefault)
			for ; now < idle; now += slice {
				require.Equal(t, hi, c.Tick(now), "%d ms after it drained", (now-drained)/1e6)
			}
			got := run(t, c, now, 2000)
			assert.Greater(t, got[lo], 0)
			if tc.policy == Preemptive || tc.policy == WeightedWeak {
				// Idle: its own units are skipped too.
				assert.Zero(t, got[hi])
			}
		})
	}
	t.Run("native ignores priority", func(t *testing.T) {
		c := newCard(t, Native, 0)
		id, err := c.AddVGPU(10, true)
		require.NoError(t, err)
		setAct(t, c, id, busy, 0)
		assert.Equal(t, All, c.Tick(0))
		assert.True(t, c.MayRun(id, 0))
		assert.True(t, c.MayRun(5, 0))
	})
	t.Run("two high-priority vGPUs alternate", func(t *testing.T) {
		c := newCard(t, Fixed, 0)
		a, err := c.AddVGPU(10, true)
		require.NoError(t, err)
		b, err := c.AddVGPU(10, true)
		require.NoError(t, err)
		l, err := c.AddVGPU(50, false)
		require.NoError(t, err)
		for _, id := range []int{a, b, l} {
			setAct(t, c, id, busy, 0)
		}
		got := run(t, c, 0, 1000)
		assert.Equal(t, map[int]int{a: 500, b: 500}, got)
	})
}

func TestHybridRefusesHighPriority(t *testing.T) {
	c := newCard(t, Hybrid, 0)
	_, err := c.AddVGPU(30, true)
	assert.ErrorIs(t, err, ErrNotSupported)
	_, err = c.AddVGPU(0, true)
	assert.ErrorIs(t, err, ErrNotSupported)
	id, err := c.AddVGPU(30, false)
	require.NoError(t, err)
	assert.ErrorIs(t, c.UpdateVGPU(id, 30, true), ErrNotSupported)
}

func TestBadInputs(t *testing.T) {
	cfgs := []struct {
		name string
		mod  func(*Config)
	}{
		{"max_inst 0", func(c *Config) { c.MaxInst = 0 }},
		{"max_inst 65", func(c *Config) { c.MaxInst = 65 }},
		{"max_inst negative", func(c *Config) { c.MaxInst = -1 }},
		{"policy 7", func(c *Config) { c.Policy = 7 }},
		{"slice 999us", func(c *Config) { c.Slice = 999 * time.Microsecond }},
		{"slice 101ms", func(c *Config) { c.Slice = 101 * time.Millisecond }},
		{"slice negative", func(c *Config) { c.Slice = -time.Millisecond }},
		{"reclaim 0", func(c *Config) { c.Reclaim = 0 }},
		{"reclaim 11s", func(c *Config) { c.Reclaim = 11 * time.Second }},
	}
	for _, tc := range cfgs {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(&cfg)
			_, err := New(cfg)
			assert.ErrorIs(t, err, ErrInvalid)
			c := newCard(t, Fixed, 0)
			assert.ErrorIs(t, c.Configure(cfg), ErrInvalid)
		})
	}

	type add struct {
		quota int
		high  bool
		err   error
	}
	tests := []struct {
		name    string
		policy  Policy
		maxInst int
		adds    []add
	}{
		{"quota not a multiple of 5", Fixed, 0, []add{{7, false, ErrInvalid}}},
		{"quota over 100", Average, 0, []add{{105, false, ErrInvalid}}},
		{"quota negative", Preemptive, 0, []add{{-5, false, ErrInvalid}}},
		{"quota 0 under fixed", Fixed, 0, []add{{0, false, ErrInvalid}}},
		{"quota 0 under weighted preemptive", WeightedPreemptive, 0, []add{{0, false, ErrInvalid}}},
		{"quota 0 under weighted weak", WeightedWeak, 0, []add{{0, false, ErrInvalid}}},
		{"fixed quotas over 100", Fixed, 0, []add{{60, false, nil}, {45, false, ErrNoSpace}, {40, false, nil}, {5, false, ErrNoSpace}}},
		{"hybrid quotas over 100", Hybrid, 0, []add{{100, false, nil}, {5, false, ErrNoSpace}, {0, false, nil}}},
		{"weighted quotas over 100", WeightedPreemptive, 0, []add{{50, false, nil}, {55, false, ErrNoSpace}}},
		{"weighted weak quotas over 100", WeightedWeak, 0, []add{{50, false, nil}, {55, false, ErrNoSpace}}},
		{"units over max_inst after rounding", Fixed, 10, []add{
			{5, false, nil}, {5, false, nil}, {5, false, nil}, {5, false, nil}, {5, false, nil},
			{60, false, ErrNoSpace}, {50, false, nil}}},
		{"too many vGPUs", Average, 2, []add{{5, false, nil}, {5, false, nil}, {5, false, ErrNoSpace}}},
		{"too many quota-0 vGPUs", Hybrid, 2, []add{{0, false, nil}, {0, false, nil}, {0, false, ErrNoSpace}}},
		{"high priority under hybrid", Hybrid, 0, []add{{5, true, ErrNotSupported}}},
		{"preemptive ignores quota sums", Preemptive, 0, []add{{100, false, nil}, {100, true, nil}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCard(t, tc.policy, tc.maxInst)
			for i, a := range tc.adds {
				_, err := c.AddVGPU(a.quota, a.high)
				if a.err == nil {
					assert.NoError(t, err, "add %d", i)
				} else {
					assert.ErrorIs(t, err, a.err, "add %d", i)
				}
			}
		})
	}

	t.Run("vGPU ids", func(t *testing.T) {
		c := newCard(t, Fixed, 0)
		id, err := c.AddVGPU(50, false)
		require.NoError(t, err)
		for _, bad := range []int{-1, 1, 64, 1000} {
			assert.ErrorIs(t, c.RemoveVGPU(bad), ErrNotFound)
			assert.ErrorIs(t, c.UpdateVGPU(bad, 5, false), ErrNotFound)
			assert.ErrorIs(t, c.SetProcs(bad, 1), ErrNotFound)
			assert.ErrorIs(t, c.NoteWork(bad, 0, true), ErrNotFound)
			assert.False(t, c.Active(bad, 0))
			assert.False(t, c.MayRun(bad, 0))
		}
		assert.ErrorIs(t, c.SetProcs(id, -1), ErrInvalid)
		require.NoError(t, c.RemoveVGPU(id))
		assert.ErrorIs(t, c.RemoveVGPU(id), ErrNotFound)
		assert.ErrorIs(t, c.NoteWork(id, 0, true), ErrNotFound)
	})

	t.Run("update", func(t *testing.T) {
		c := newCard(t, Fixed, 0)
		a, err := c.AddVGPU(50, false)
		require.NoError(t, err)
		b, err := c.AddVGPU(40, false)
		require.NoError(t, err)
		assert.ErrorIs(t, c.UpdateVGPU(a, 65, false), ErrNoSpace)
		assert.ErrorIs(t, c.UpdateVGPU(a, 0, false), ErrInvalid)
		assert.ErrorIs(t, c.UpdateVGPU(a, 51, false), ErrInvalid)
		assert.NoError(t, c.UpdateVGPU(a, 60, true))
		assert.NoError(t, c.UpdateVGPU(b, 40, false))
		assert.Equal(t, 12, count(c.Table(), a))
		assert.Equal(t, 8, count(c.Table(), b))
		assert.Equal(t, 0, count(c.Table(), None))
	})

	t.Run("policy change while vGPUs exist", func(t *testing.T) {
		c := newCard(t, Fixed, 0)
		id, err := c.AddVGPU(50, false)
		require.NoError(t, err)
		cfg := c.Config()
		cfg.Policy = Preemptive
		assert.ErrorIs(t, c.Configure(cfg), ErrBusy)
		cfg.Policy = Fixed
		cfg.MaxInst = 40
		assert.ErrorIs(t, c.Configure(cfg), ErrBusy)
		require.NoError(t, c.RemoveVGPU(id))
		cfg.Policy = Preemptive
		require.NoError(t, c.Configure(cfg))
		assert.Equal(t, cfg, c.Config())
	})
}

func count(xs []int, x int) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// A late caller moves to the slice covering now; missed slices are not
// granted.
func TestLateCaller(t *testing.T) {
	c := newCard(t, Preemptive, 0)
	slice := uint64(SliceDefault)
	for i := 0; i < 3; i++ {
		id, err := c.AddVGPU(0, false)
		require.NoError(t, err)
		setAct(t, c, id, busy, 0)
	}
	base := uint64(1_000_000_000)
	assert.Equal(t, 0, c.Tick(base))
	assert.Equal(t, base+slice, c.SliceEnd())
	// Before the boundary nothing changes.
	assert.Equal(t, 0, c.Tick(base+slice-1))
	// 7.5 slices later: the slice [7, 8) slices after base, the next owner.
	now := base + 7*slice + slice/2
	assert.Equal(t, 1, c.Tick(now))
	assert.Equal(t, base+8*slice, c.SliceEnd())
	assert.True(t, c.MayRun(1, now))
	assert.False(t, c.MayRun(1, base+8*slice))
	st := c.Stats()
	assert.Equal(t, uint64(2), st.Handovers)
	assert.Equal(t, uint64(6), st.MissedSlices)
	assert.Equal(t, uint64(1), c.Slices(0))
	assert.Equal(t, uint64(1), c.Slices(1))
	assert.Equal(t, uint64(0), c.Slices(2))
	// Exactly on a boundary, hours late.
	now = base + 8*slice + 3600*uint64(time.Second)
	assert.Equal(t, 2, c.Tick(now))
	assert.Equal(t, now+slice, c.SliceEnd())
	assert.Equal(t, uint64(6+720000), c.Stats().MissedSlices)
}

func TestOwnerBeforeStartAndRemoval(t *testing.T) {
	c := newCard(t, Fixed, 0)
	id, err := c.AddVGPU(100, false)
	require.NoError(t, err)
	require.NoError(t, c.SetProcs(id, 1))
	assert.Equal(t, None, c.Owner())
	assert.False(t, c.MayRun(id, 0), "nobody runs before the first tick")
	assert.Equal(t, id, c.PeekNext(0))
	assert.Equal(t, id, c.Tick(0))
	assert.Equal(t, id, c.Owner())
	// Removed mid-slice: the id, reused at once, does not inherit the slice.
	require.NoError(t, c.RemoveVGPU(id))
	assert.Equal(t, None, c.Owner())
	id2, err := c.AddVGPU(100, false)
	require.NoError(t, err)
	require.Equal(t, id, id2)
	require.NoError(t, c.SetProcs(id2, 1))
	assert.False(t, c.MayRun(id2, 1))
	assert.Equal(t, uint64(0), c.Slices(id2))
	assert.Equal(t, id2, c.Tick(c.SliceEnd()))
}

// The schedule file adds a vGPU at its first process: the first tenant to
// join begins the card in a unit of nobody, and the second, whose unit it
// is once added, takes the rest of that slice instead of leaving it idle
// (5-7 ms of two tenants' first 100 ms on simcuda).
func TestFirstProcessTakesItsIdleUnit(t *testing.T) {
	c := newCard(t, Fixed, 20)
	b, err := c.AddVGPU(30, false)
	require.NoError(t, err)
	require.NoError(t, c.SetProcs(b, 1))
	require.Equal(t, None, c.Tick(0), "unit 0 is nobody's yet")
	end := c.SliceEnd()
	a, err := c.AddVGPU(70, false)
	require.NoError(t, err)
	require.Equal(t, None, c.Owner(), "added without a process")
	require.Equal(t, uint8(a), uint8(c.c.table[c.c.pos]), "unit 0 is a's now")
	require.NoError(t, c.SetProcs(a, 1))
	assert.Equal(t, a, c.Owner())
	assert.True(t, c.MayRun(a, ms))
	assert.Equal(t, end, c.SliceEnd(), "the rest of the slice, no more")
	assert.Equal(t, uint64(1), c.Slices(a))
	// A second process changes nothing; nor does one of b's.
	require.NoError(t, c.SetProcs(a, 2))
	require.NoError(t, c.SetProcs(b, 2))
	assert.Equal(t, a, c.Owner())
}

func TestDefaults(t *testing.T) {
	cfg := DefaultConfig()
	assert.Equal(t, Config{MaxInst: 20, Policy: Native, Slice: 5 * time.Millisecond,
		Reclaim: 100 * time.Millisecond}, cfg)
	assert.Equal(t, "weighted-weak", WeightedWeak.String())
	assert.Equal(t, "policy(9)", Policy(9).String())
}
