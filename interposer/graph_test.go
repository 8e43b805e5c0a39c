package interposer_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CUDA graphs on a gated card (tests/capture.c): what PyTorch's graph
// capture and vLLM's start-up do, 50 graphs captured in every mode while
// other threads launch, across many slice ends, then replayed. The
// simulated driver fails and invalidates a capture exactly where the real
// one does (simcuda/capture.c): a cuCtxSynchronize in the capturing
// context, a query of a captured event, an event query from another thread
// during a global capture. Every capture must succeed, and the replays
// must keep to the vGPU's quota.
func TestCaptureOnGatedCard(t *testing.T) {
	m := schedMachine(t, "1")
	a := m.container(tenantSpec{"a", "50"}).start("capture", "50",
		"global,thread_local,relaxed", "3", "1000", "2", "go")
	b := m.container(tenantSpec{"b", "50"}).start("tenant", "6", tenantKernel,
		tenantDepth, "1", "go")
	for _, p := range []*proc{a, b} {
		p.await("ready", 30*time.Second)
	}
	for _, p := range []*proc{a, b} {
		_, err := p.stdin.Write([]byte("go\n"))
		require.NoError(t, err)
	}
	rs := finish(t, []*proc{a, b})
	ra, rb := rs[0], rs[1]
	assert.Equal(t, uint64(50), ra.num(t, "captures_ok"), "%s", ra)
	assert.Zero(t, ra.num(t, "captures_failed"), "%s", ra)
	assert.Positive(t, ra.num(t, "launcher_launches"), "%s", ra)
	replay := share(t, ra, "replay_busy_ns", "replay_wall_ns")
	neighbour := share(t, rb, "busy_ns", "wall_ns")
	t.Logf("replays %d: %.1f%% of wall time; the busy neighbour %.1f%%",
		ra.num(t, "replays"), replay, neighbour)
	// Fixed policy, 50/50: nobody more than its half (the replays are
	// gated), and the replays get a fair part of theirs.
	assert.LessOrEqual(t, replay, 50+shareTol, "%s", ra)
	assert.LessOrEqual(t, neighbour, 50+shareTol, "%s", rb)
	assert.GreaterOrEqual(t, replay, 50-3*shareTol, "%s", ra)
}

// A lone capturing tenant on 30 %: its graph replays are held to it.
func TestCaptureReplaysGated(t *testing.T) {
	m := schedMachine(t, "1")
	r := m.container(tenantSpec{"a", "30"}).ok("capture", "20", "thread_local",
		"3", "1000", "1")
	assert.Equal(t, uint64(20), r.num(t, "captures_ok"), "%s", r)
	replay := share(t, r, "replay_busy_ns", "replay_wall_ns")
	t.Logf("lone 30%% capturing tenant: replays %.1f%% of wall time", replay)
	assert.LessOrEqual(t, replay, 33.0, "%s", r)
	assert.Positive(t, r.num(t, "replays"), "%s", r)
}

// share is key over wall in r, in percent of wall time.
func share(t *testing.T, r result, key, wall string) float64 {
	t.Helper()
	w := r.num(t, wall)
	require.NotZero(t, w, "%s", r)
	return 100 * float64(r.num(t, key)) / float64(w)
}

// Queued work waiting for a thread that is itself waiting in the gate (a
// host function released only after another thread's launch) must not
// deadlock: the fence waits without the gate's lock and at most until the
// drain's bound.
func TestHostFunctionWaitsForLaunch(t *testing.T) {
	m := schedMachine(t, "1").container(tenantSpec{"a", "50"})
	r := m.ok("hostwait", "3", "1000")
	assert.Zero(t, r.num(t, "deadlocks"), "%s", r)
	t.Logf("the launch the host function waited for took at most %v",
		time.Duration(r.num(t, "b_launch_max_ns")))
}

// Graph memory (tests/graphmem.c, exact to the byte), and the ledger and
// the device agree at the end: nothing left charged, nothing held.
func TestGraphMemory(t *testing.T) {
	m := newMachine(t)
	r := m.ok("graphmem")
	assert.NotEmpty(t, r.lines("cuGraphLaunch (graph memory)", "refused", "cap is 1024 MiB"), "%s", r)
	l := openLedger(t, m.ledgerPath(0))
	used, _ := usage(t, l)
	assert.Zero(t, used)
}

// Every launch path is gated on the card of the launch's stream's
// context (tests/paths.c): the legacy calls, a CUkernel with no current
// context, a stream of another device's context, graphs. Card 1 is gated
// at 30 % under policy 1, card 0 not at all (policy 0): a path that is not
// gated gets the whole engine.
func TestLaunchPathsGated(t *testing.T) {
	m := newMachine(t, "SIMCUDA_DEVICES", "2", "GPU_IDX", "0,1",
		"GPU_CONTAINER_MEM", "1024,1024", "GPUSLICE_ENFORCE", "file",
		"GPU_POLICY", "0,1", "GPU_CONTAINER_QUOTA_PERCENT", "0,30",
		"GPUSLICE_CONTEXT_MIB", "4", "GPUSLICE_VGPU", "a")
	m.set("GPUSLICE_SCHED_DIR", filepath.Join(m.dir, "sched"))
	for _, via := range []string{"kernel", "launch", "grid", "gridasync",
		"ctxless", "otherdev", "graph", "graphother"} {
		t.Run(via, func(t *testing.T) {
			r := m.ok("paths", via, "1", "1000", "2", "1")
			got := share(t, r, "busy_ns", "wall_ns")
			t.Logf("%s on card 1 (30 %%): %.1f%% of wall time", via, got)
			assert.LessOrEqual(t, got, 33.0, "%s", r)
			assert.Positive(t, r.num(t, "launches"), "%s", r)
		})
	}
	r := m.ok("paths", "kernel", "1", "1000", "2", "0")
	got := share(t, r, "busy_ns", "wall_ns")
	t.Logf("kernel on card 0 (not gated): %.1f%% of wall time", got)
	assert.Greater(t, got, 60.0, fmt.Sprintf("an ungated card is not held back\n%s", r))
}
