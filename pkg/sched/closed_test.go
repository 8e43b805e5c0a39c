package sched

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drainOwner runs the current slice of its owner a as a holder and ends
// it: a's drain begins at the returned end. It does not release.
func drainOwner(t *testing.T, c *Card, a int) uint64 {
	t.Helper()
	require.Equal(t, a, c.Owner())
	require.NoError(t, c.Hold(a, true))
	end := c.SliceEnd()
	c.Tick(end)
	require.Equal(t, a, c.Drainer())
	return end
}

// nextSliceOf ticks the card on, slice by slice, until a owns one.
func nextSliceOf(t *testing.T, c *Card, a int) {
	t.Helper()
	for i := 0; i < 64 && c.Owner() != a; i++ {
		c.Tick(max(c.SliceEnd(), c.NextChange()))
	}
	require.Equal(t, a, c.Owner())
}

// A drain of a long tail is closed: the next owner waits for it, so that
// nothing shares the engine with the tail and its time is the holder's
// alone. A drain of a short tail hands the card on at once. (Every drain
// was open before: a long tail ran on through the next owners' slices,
// and on a GPU that takes turns between contexts nobody could tell whose
// time the overlap was; kmod/core/long-tails.md.)
func TestLongTailClosesTheDrain(t *testing.T) {
	c, a, b := drainPair(t, WeightedPreemptive)
	slice := uint64(c.Config().Slice)

	// Its first drain is open: nothing says its tail is long yet.
	end := drainOwner(t, c, a)
	assert.False(t, c.Closed())
	assert.Equal(t, b, c.Owner())
	assert.True(t, c.MayRun(b, end))
	require.True(t, c.Release(a, end+4*ms))
	assert.Equal(t, 4*ms, c.Tail(a))

	// Its next one is closed: B waits, the page names nobody.
	nextSliceOf(t, c, a)
	end = drainOwner(t, c, a)
	assert.True(t, c.Closed())
	assert.Equal(t, None, c.Owner())
	assert.False(t, c.MayRun(b, end))
	assert.False(t, c.MayRun(a, end))
	assert.Equal(t, slice+8*ms, c.DrainBound(), "a slice and twice the tail")
	assert.Equal(t, end+slice+8*ms, c.NextChange())

	// B runs from A's release, its slice whole after it.
	require.True(t, c.Release(a, end+3*ms))
	assert.False(t, c.Closed())
	assert.Equal(t, b, c.Owner())
	assert.True(t, c.MayRun(b, end+3*ms))
	assert.Equal(t, end+3*ms+slice, c.SliceEnd())
	assert.Equal(t, 4*ms-4*ms/8, c.Tail(a), "a maximum that decays")
}

// Tails up to half a slice keep the drains open, and a long tail's mark
// decays: short drains open them again.
func TestShortTailsKeepTheDrainOpen(t *testing.T) {
	c, a, b := drainPair(t, WeightedPreemptive)
	slice := uint64(c.Config().Slice)
	for i := 0; i < 3; i++ {
		end := drainOwner(t, c, a)
		require.False(t, c.Closed(), "drain %d", i)
		require.True(t, c.MayRun(b, end))
		require.True(t, c.Release(a, end+slice/2))
		nextSliceOf(t, c, a)
	}
	end := drainOwner(t, c, a)
	require.True(t, c.Release(a, end+4*ms))
	closed := 0
	for i := 0; i < 20 && c.Tail(a) > slice/2; i++ {
		nextSliceOf(t, c, a)
		end = drainOwner(t, c, a)
		if c.Closed() {
			closed++
		}
		require.True(t, c.Release(a, end+ms))
	}
	assert.LessOrEqual(t, c.Tail(a), slice/2)
	assert.Equal(t, 4, closed, "4 ms decays under 2.5 ms in four drains")
	nextSliceOf(t, c, a)
	drainOwner(t, c, a)
	assert.False(t, c.Closed())
}

// A closed drain lapses at its bound: the next owner runs then, and the
// tail is forgotten, so that a holder that never releases never closes a
// drain again (it keeps the one-slice bound of an open drain).
func TestClosedDrainLapses(t *testing.T) {
	c, a, b := drainPair(t, WeightedPreemptive)
	slice := uint64(c.Config().Slice)
	end := drainOwner(t, c, a)
	require.True(t, c.Release(a, end+4*ms))
	nextSliceOf(t, c, a)
	end = drainOwner(t, c, a)
	require.True(t, c.Closed())
	bound := c.DrainBound()

	c.Tick(end + bound - 1)
	assert.Equal(t, None, c.Owner())
	c.Tick(end + bound)
	assert.False(t, c.Closed())
	assert.Equal(t, b, c.Owner())
	assert.True(t, c.MayRun(b, end+bound))
	assert.Equal(t, end+bound+slice, c.SliceEnd(), "its slice after the bound")
	assert.Zero(t, c.Tail(a))
	_, lapsed := c.LapsedSlice(a)
	assert.True(t, lapsed)

	for i := 0; i < 3; i++ {
		nextSliceOf(t, c, a)
		end = drainOwner(t, c, a)
		assert.False(t, c.Closed(), "a holder's drain %d", i)
		assert.Equal(t, end+slice, c.NextChange(), "one slice, open")
	}
}

// A tail that outran its open bound, its vGPU granted again before the
// release came, ran from its drain's start until that vGPU's next release
// at most: once that release comes, its next drains are closed, bound by
// it. (Else a vGPU granted often, whose late release never comes in time,
// kept open drains and its tails ran uncharged through its neighbours'
// slices.)
func TestTailThatOutranItsBoundCloses(t *testing.T) {
	c, a, b := drainPair(t, WeightedPreemptive)
	end := drainOwner(t, c, a)
	c.Tick(end + uint64(c.Config().Slice))
	_, lapsed := c.LapsedSlice(a)
	require.True(t, lapsed)
	require.Equal(t, b, c.Owner())

	nextSliceOf(t, c, a)
	_, lapsed = c.LapsedSlice(a)
	require.False(t, lapsed, "granted again: its late release owes nothing")
	assert.Zero(t, c.Tail(a))
	require.NoError(t, c.Hold(a, true))
	rel := c.SliceStart() + ms
	c.Release(a, rel)
	assert.Equal(t, rel-end, c.Tail(a), "from the lapsed drain's start")

	drainOwner(t, c, a)
	assert.True(t, c.Closed())
}

// A high-priority vGPU waits for no tail: a drain in front of it is open,
// and a closed drain it cuts opens, bounded as a cut.
func TestHighPriorityOpensTheDrain(t *testing.T) {
	c := newCard(t, WeightedPreemptive, 20)
	a, err := c.AddVGPU(40, false)
	require.NoError(t, err)
	b, err := c.AddVGPU(40, false)
	require.NoError(t, err)
	h, err := c.AddVGPU(20, true)
	require.NoError(t, err)
	setAct(t, c, a, busy, 0)
	setAct(t, c, b, busy, 0)
	require.NoError(t, c.SetProcs(h, 1))
	require.Equal(t, a, c.Tick(0))
	end := drainOwner(t, c, a)
	require.True(t, c.Release(a, end+4*ms))
	nextSliceOf(t, c, a)

	// Closed in front of B, cut by H at end+1ms.
	end = drainOwner(t, c, a)
	require.True(t, c.Closed())
	require.NoError(t, c.NoteWork(h, end+ms, true))
	require.True(t, c.Preempt(end+ms))
	assert.False(t, c.Closed())
	assert.Equal(t, h, c.Owner())
	assert.True(t, c.MayRun(h, end+ms))
	assert.Equal(t, a, c.Drainer())
	assert.Equal(t, ms+CutDrainMax, c.DrainBound())
	require.True(t, c.Release(a, end+2*ms))

	// H active: its slices come first; idle again, A's turn. A's drain
	// with H back (active at the slice's end) is open.
	require.NoError(t, c.NoteWork(h, end+2*ms, false))
	now := end + 2*ms + 200*ms
	c.Tick(now)
	nextSliceOf(t, c, a)
	require.Greater(t, c.Tail(a), uint64(c.Config().Slice)/2)
	require.NoError(t, c.Hold(a, true))
	aEnd := c.SliceEnd()
	require.NoError(t, c.NoteWork(h, aEnd-ms, true))
	c.Tick(aEnd)
	assert.Equal(t, h, c.Owner())
	assert.False(t, c.Closed())
	assert.True(t, c.MayRun(h, aEnd))
}

// A vGPU removed while its drain is closed (its last process gone, its
// tail with it) keeps nobody waiting: the next owner runs at once. (It
// kept the card closed for good: the demo's 30 % container, whose 70 %
// neighbour exited in a closed drain, never ran again.)
func TestRemovedDrainerOpensTheCard(t *testing.T) {
	c, a, b := drainPair(t, WeightedPreemptive)
	end := drainOwner(t, c, a)
	require.True(t, c.Release(a, end+4*ms))
	nextSliceOf(t, c, a)
	end = drainOwner(t, c, a)
	require.True(t, c.Closed())

	require.NoError(t, c.RemoveVGPU(a))
	assert.False(t, c.Closed())
	assert.Equal(t, b, c.Owner())
	assert.True(t, c.MayRun(b, end+ms))
	assert.Equal(t, b, c.Tick(end+ms))
}
