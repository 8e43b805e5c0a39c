package interposer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// fork: a child owns none of its parent's charges (its exit without
// freeing gives back only its own bytes), and forking while threads
// allocate never leaves a child stuck on a lock (tests/fork.c).
func TestFork(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	r := m.ok("fork")
	assert.Equal(t, uint64(0), r.num(t, "children_skipped"), "the simulated driver works in a forked child")

	l := openLedger(t, m.ledgerPath(0))
	used, _ := usage(t, l)
	assert.Zero(t, used)
}
