package sched

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drainFor lets the owner hold its slice and release d after its end,
// B's slice having begun: the drain it is charged for.
func drainFor(t *testing.T, c *Card, d uint64) {
	t.Helper()
	id := c.Owner()
	require.NoError(t, c.Hold(id, true))
	end := c.SliceEnd()
	require.NotEqual(t, id, c.Tick(end))
	require.True(t, c.Release(id, end+d))
}

// toOwner ticks slice after slice until id owns the card.
func toOwner(t *testing.T, c *Card, id int) {
	t.Helper()
	for i := 0; c.Owner() != id; i++ {
		require.Less(t, i, 64, "never granted")
		c.Tick(c.SliceEnd())
	}
}

func sliceLen(c *Card) uint64 { return c.SliceEnd() - c.SliceStart() }

// Prepay (kmod/core/README.md): a vGPU whose drain was released in time
// prepays as much at its next grant, so that the card's first period
// does not run long by the drains of vGPUs that owe nothing yet.
func TestPrepaidDrain(t *testing.T) {
	slice := uint64(SliceDefault)

	t.Run("released in time: the next grant prepays it", func(t *testing.T) {
		c, a, _ := drainPair(t, WeightedPreemptive)
		drainFor(t, c, ms)
		owed, _ := c.Debt(a)
		require.Equal(t, ms, owed)
		toOwner(t, c, a)
		// 1 ms of debt repaid, 1 ms prepaid for the drain to come.
		assert.Equal(t, slice-2*ms, sliceLen(c))
		owed, _ = c.Debt(a)
		assert.Zero(t, owed)
		drainFor(t, c, ms)
		owed, total := c.Debt(a)
		assert.Zero(t, owed, "the drain was paid for")
		assert.Equal(t, 2*ms, total, "both drains charged")
	})

	t.Run("a prepayment not used is given back, never as a longer slice", func(t *testing.T) {
		c, a, _ := drainPair(t, WeightedPreemptive)
		drainFor(t, c, ms)
		toOwner(t, c, a)
		// It releases in its slice: no drain comes.
		require.NoError(t, c.Hold(a, true))
		c.Release(a, c.SliceStart()+ms)
		c.Tick(c.SliceEnd())
		assert.Equal(t, ms, uint64(c.c.vgpu[a].credit_ns))
		toOwner(t, c, a)
		assert.Equal(t, slice, sliceLen(c), "nothing to prepay, no longer slice")
		// Its next drain is set against what it was given back.
		drainFor(t, c, 2*ms)
		owed, _ := c.Debt(a)
		assert.Equal(t, ms, owed)
		assert.Zero(t, c.c.vgpu[a].credit_ns)
	})

	t.Run("nothing prepaid within a period of a lapse", func(t *testing.T) {
		c, a, b := drainPair(t, WeightedPreemptive)
		toOwner(t, c, b)
		// B holds and never releases: its drain lapses.
		require.NoError(t, c.Hold(b, true))
		end := c.SliceEnd()
		c.Tick(end)
		lapse := end + c.DrainBound()
		c.Tick(lapse)
		require.NotZero(t, c.c.vgpu[b].lapsed)
		c.Release(b, lapse+ms)
		// A drained 1 ms in time last (set before each grant): no
		// grant prepays it within a period of the lapse, one after.
		period := uint64(c.Config().MaxInst) * slice
		var within, after []uint64
		for c.SliceStart() < lapse+2*period {
			c.c.vgpu[a].last_drain_ns = 1000000
			c.Tick(c.SliceEnd())
			if c.Owner() != a {
				continue
			}
			if p := uint64(c.c.vgpu[a].prepaid_ns); c.SliceStart() < lapse+period {
				within = append(within, p)
			} else {
				after = append(after, p)
			}
		}
		require.NotEmpty(t, within)
		require.NotEmpty(t, after)
		assert.NotContains(t, within, ms, "prepaid within the period")
		assert.Contains(t, after, ms, "never prepaid after the period")
	})
}
