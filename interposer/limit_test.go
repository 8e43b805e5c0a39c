package interposer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Context limits that take device memory (the malloc heap, the stack of
// every resident thread) are charged like allocations: raised by exactly
// the vGPU's free bytes they fit, one step more is refused, and lowering
// them or destroying their context gives the bytes back (tests/limit.c).
// The same program passes on the bare driver, against the whole device.
func TestContextLimits(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	r := m.ok("limit")
	assert.Equal(t, 768*mib, r.num(t, "free"))
	assert.NotEmpty(t, r.lines("cuCtxSetLimit", "refused"), "%s", r)
	m.unshimmed().ok("limit")
}
