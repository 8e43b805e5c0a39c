package interposer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Entry points obtained through cuGetProcAddress and cuGetProcAddress_v2,
// for several CUDA versions and each stream flag (the per-thread flag
// selects the _ptsz variants), and through a cuGetProcAddress that was
// itself looked up, are the shim's: with the vGPU full and the device
// nearly empty every allocator is refused, managed memory is not
// supported, and the memory queries show the cap (tests/procaddr.c).
// TestPassThrough/procaddr shows the same run failing without a cap.
//
// A real driver may hand out internal entry points rather than its exported
// symbols; SIMCUDA_PROCADDR=private makes the simulated driver do that, and
// the shim must then recognise the function by name, version and flags.
func TestProcAddress(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exported", "private"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			m := newMachine(t, "SIMCUDA_PROCADDR", mode)
			r := m.ok("procaddr", "768M")
			assert.Equal(t, 768*mib, r.num(t, "fill"))
			assert.Equal(t, 1024*mib, r.num(t, "total"))
			// 21 queries x 3 flags x 3 lookups.
			assert.Equal(t, uint64(189), r.num(t, "calls"))
			assert.Empty(t, r.lines("FAIL"), "%s", r)
		})
	}
}

// The same with the shim loaded after the driver instead of preloaded
// (gstest dlopen()s it and takes its exports): the driver's own
// cuGetProcAddress then hands out the driver's functions, and the shim must
// swap each for its wrapper.
func TestProcAddressLateShim(t *testing.T) {
	t.Parallel()
	m := newMachine(t).unshimmed().set("GSTEST_LATE_SHIM", shim)
	r := m.ok("procaddr", "768M")
	assert.NotEmpty(t, r.lines("late shim"), "%s", r)
	assert.Equal(t, uint64(189), r.num(t, "calls"))
	m.ok("cap", "async_ptsz")
	m.ok("cap", "context")
}

// Every entry point the shim wraps, asked of cuGetProcAddress by each row
// of the driver's version table that names it (tests/procall.c): with a
// driver that hands out private trampolines, only the table leads the
// shim to its wrapper, so a wrapped _ptsz or versioned variant missing
// from it would go unwrapped.
func TestProcAddressEveryHook(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"exported", "private"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := newMachine(t, "SIMCUDA_PROCADDR", mode).ok("procall")
			assert.Equal(t, r.num(t, "rows"), r.num(t, "checked"), "%s", r)
			assert.Greater(t, r.num(t, "rows"), uint64(60), "%s", r)
		})
	}
}
