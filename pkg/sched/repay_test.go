package sched

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A drain that lapsed and ran on through the next owner's whole slice
// (whose work queued behind the tail) owes that slice to its owner, the
// victim: the unit the drainer gives up for its debt goes to the victim,
// as long as the tail took of its slice. Skipped, the unit shortened
// everyone's period alike, and the victim's loss stayed its own: a 1 ms
// tenant following a tenant of 20 ms kernels on simcuda got 4-11 % of
// wall time where 25 % was due (kmod/core/README.md, "Repaid to the
// victim").
func TestLapsedTailRepaysItsVictim(t *testing.T) {
	for _, policy := range []Policy{Fixed, WeightedPreemptive, WeightedWeak} {
		t.Run(policy.String(), func(t *testing.T) {
			c := newCard(t, policy, 4)
			var ids []int
			for _, q := range []int{25, 25, 50} {
				id, err := c.AddVGPU(q, false)
				require.NoError(t, err)
				setAct(t, c, id, busy, 0)
				ids = append(ids, id)
			}
			a := ids[0]
			c.Tick(0)
			toOwner(t, c, a)
			require.NoError(t, c.Hold(a, true))
			e := c.SliceEnd()
			victim := c.Tick(e)
			require.NotEqual(t, a, victim)
			c.Tick(e + c.DrainBound())
			_, lapsed := c.LapsedSlice(a)
			require.True(t, lapsed, "the drain lapsed in the victim's slice")
			took := c.SliceEnd() - (e + c.DrainBound())
			next := c.Tick(c.SliceEnd())
			require.NotEqual(t, a, next, "granted again before its release")
			// Its tail ran on past the victim's slice into the next.
			require.True(t, c.Release(a, c.SliceStart()+ms))
			owed, _ := c.Debt(a)
			require.GreaterOrEqual(t, owed, uint64(c.Config().Slice), "a whole unit owed")

			// a's next unit goes to the victim, as long as it lost.
			toUnitOf(t, c, a)
			assert.Equal(t, victim, c.Owner(), "a's unit repaid its victim")
			assert.Equal(t, took, sliceLen(c), "as long as the tail took")
			left, _ := c.Debt(a)
			assert.Equal(t, owed-uint64(c.Config().Slice), left, "a unit of a's debt paid")

			// Owed once: its next unit is skipped or its own.
			toUnitOf(t, c, a)
			assert.NotEqual(t, victim, c.Owner(), "repaid once")
		})
	}
}

// toUnitOf ticks slice after slice until the card serves one of id's
// units, whoever it goes to.
func toUnitOf(t *testing.T, c *Card, id int) {
	t.Helper()
	for i := 0; ; i++ {
		require.Less(t, i, 16, "its unit never came")
		c.Tick(c.SliceEnd())
		if c.Table()[c.c.pos] == id {
			return
		}
	}
}
