package interposer_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without the kernel module (the file ledger's mode) and without a
// GPU_POLICY launches are not gated: a tenant keeps the simulated engine
// busy and the shim says nothing about launches. The module's gate is
// tested in the qemu guest (kmod/guest/tests/gate.c), the schedule file's
// in gate_file_test.go.
func TestLaunchesUngatedWithoutModule(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	r := m.ok("tenant", "1", "1000", "8")
	assert.NotZero(t, r.num(t, "launches"), "%s", r)
	assert.Equal(t, r.num(t, "launches"), r.num(t, "kernels"), "%s", r)
	// Eight in flight back to back: the engine was busy much of the
	// second, gaps only where a loaded machine left the tenant waiting
	// for a CPU longer than 8 ms.
	assert.Greater(t, r.num(t, "busy_ns"), uint64(250_000_000), "%s", r)
	assert.Empty(t, r.lines("gpuslice[", "launch"), "%s", r)
}

// GPUSLICE_ENFORCE=module with no module to attach to: a launch is never
// let through ungated. The context is free here (GPUSLICE_CONTEXT_MIB=0);
// a module's image is device memory, refused like every other byte, so the
// kernel comes from a library loaded before any context (charged nothing):
// only the gate can refuse the launch.
func TestLaunchesRefusedWithoutAttachableModule(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "GPUSLICE_ENFORCE", "module", "GPUSLICE_CONTEXT_MIB", "0")
	r := m.run("tenant", "1", "1000", "2")
	require.Equal(t, 1, r.code, "%s", r)
	assert.Len(t, r.lines("gpuslice[", "cuModuleLoadData of", "refused on card 0"), 1, "%s", r)
	r = m.run("libgate")
	assert.Equal(t, "CUDA_SUCCESS", r.kv()["load.rc"], "%s", r)
	assert.Equal(t, "CUDA_ERROR_NOT_PERMITTED", r.kv()["launch.rc"], "%s", r)
	assert.Len(t, r.lines("gpuslice[", "card 0: kernel launches are refused"), 1, "%s", r)
	assert.Len(t, r.lines("gpuslice[", "cuLaunchKernel refused on card 0"), 1, "%s", r)
	m.with("GPUSLICE_ENFORCE", "file").ok("tenant", "1", "1000", "2")
}

// The busy span a slice's fence reports (src/gate_span.h), in the cases a
// loaded machine produces and a test of whole tenants meets only by
// chance: a process descheduled between its acquire and its launch
// launches after its slice's end, and a fencer that comes late finds the
// work already run. That work ran in the drain and must be reported, not
// dropped (a lone 1 ms kernel reported as 0 ns).
func TestFenceSpan(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	const ms = 1_000_000
	for _, tc := range []struct {
		name             string
		first, end, done uint64
		waited           bool
		want             uint64
	}{
		{"nothing launched", 0, 10 * ms, 12 * ms, false, 0},
		{"waited: up to the fence's end", 2 * ms, 10 * ms, 12 * ms, true, 10 * ms},
		{"found done: up to the slice's end", 2 * ms, 10 * ms, 12 * ms, false, 8 * ms},
		{"found done before the end", 2 * ms, 10 * ms, 6 * ms, false, 4 * ms},
		{"launched after the end, found done", 12 * ms, 10 * ms, 15 * ms, false, 3 * ms},
		{"launched at the end, found done", 10 * ms, 10 * ms, 11 * ms, false, ms},
		{"launched after the end, waited", 12 * ms, 10 * ms, 15 * ms, true, 3 * ms},
		{"end unknown", 2 * ms, 0, 5 * ms, false, 3 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waited := "0"
			if tc.waited {
				waited = "1"
			}
			r := m.ok("span", fmt.Sprint(tc.first), fmt.Sprint(tc.end), fmt.Sprint(tc.done), waited)
			assert.Equal(t, tc.want, r.num(t, "span_ns"), "%s", r)
		})
	}
}
