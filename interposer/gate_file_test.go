package interposer_test

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The compute gate without the kernel module: tenants (gstest tenant, one
// process each, a container each: its own GPUSLICE_VGPU key and ledger)
// share one simulated card (one SIMCUDA_STATE, one engine) and one
// schedule file (GPUSLICE_SCHED_DIR); their share is the engine time their
// kernels got (simcudaEngineStats). Kernels of 1 ms, two in flight, 5 ms
// slices, started together.

// shareTol is the tolerance on a share, in points: it must hold on a
// loaded 2-core machine. The measured errors are logged.
const shareTol = 5.0

const (
	tenantSeconds = "3"
	tenantKernel  = "1000"
	tenantDepth   = "2"
)

type tenantSpec struct {
	key   string
	quota string
}

// schedMachine is a card whose containers are gated by the schedule file
// under policy.
func schedMachine(t *testing.T, policy string) *machine {
	m := newMachine(t, "GPUSLICE_ENFORCE", "file", "GPU_POLICY", policy,
		"GPUSLICE_CONTEXT_MIB", "4", "GPUSLICE_LOG_LEVEL", "info")
	m.set("GPUSLICE_SCHED_DIR", filepath.Join(m.dir, "sched"))
	return m
}

// container is the machine as seen by the container of spec.
func (m *machine) container(s tenantSpec) *machine {
	return m.with("GPUSLICE_VGPU", s.key, "GPU_CONTAINER_QUOTA_PERCENT", s.quota,
		"GPUSLICE_LEDGER_DIR", filepath.Join(m.dir, "ledger-"+s.key))
}

// startTenants starts the tenants (args after the subcommand's seconds)
// and lets them go together once all are ready.
func startTenants(m *machine, seconds string, specs ...tenantSpec) []*proc {
	m.t.Helper()
	var ps []*proc
	for _, s := range specs {
		ps = append(ps, m.container(s).start("tenant", seconds, tenantKernel, tenantDepth, "1", "go"))
	}
	for _, p := range ps {
		p.await("ready", 30*time.Second)
	}
	for _, p := range ps {
		_, err := p.stdin.Write([]byte("go\n"))
		require.NoError(m.t, err)
	}
	return ps
}

// finish waits for the tenants and returns their results (each must
// succeed and have been gated).
func finish(t *testing.T, ps []*proc) []result {
	t.Helper()
	var rs []result
	for _, p := range ps {
		r := p.stop(60 * time.Second)
		require.Equal(t, 0, r.code, "%s", r)
		require.Len(t, r.lines("gpuslice[", "gated by the schedule file"), 1, "%s", r)
		rs = append(rs, r)
	}
	return rs
}

// checkShares compares each tenant's share of the engine time they got
// together with want (percent), within shareTol, and logs the errors.
func checkShares(t *testing.T, specs []tenantSpec, rs []result, want []float64) {
	t.Helper()
	var total float64
	busy := make([]float64, len(rs))
	for i, r := range rs {
		busy[i] = float64(r.num(t, "busy_ns"))
		total += busy[i]
	}
	require.NotZero(t, total)
	var log []string
	worst := 0.0
	for i := range rs {
		got := 100 * busy[i] / total
		err := got - want[i]
		worst = math.Max(worst, math.Abs(err))
		log = append(log, fmt.Sprintf("%s(%s%%): %.1f%% want %.0f%% (%+.1f), %.1f%% of wall",
			specs[i].key, specs[i].quota, got, want[i], err,
			100*busy[i]/float64(rs[i].num(t, "wall_ns"))))
	}
	t.Logf("shares: %s; worst error %.1f points", strings.Join(log, "; "), worst)
	for i := range rs {
		assert.InDelta(t, want[i], 100*busy[i]/total, shareTol, "%s\n%s", log[i], rs[i])
	}
}

func TestFileGateWeighted(t *testing.T) {
	m := schedMachine(t, "4")
	specs := []tenantSpec{{"a", "5"}, {"b", "5"}, {"c", "10"}}
	rs := finish(t, startTenants(m, tenantSeconds, specs...))
	checkShares(t, specs, rs, []float64{25, 25, 50})
}

func TestFileGateFixed(t *testing.T) {
	m := schedMachine(t, "1")
	specs := []tenantSpec{{"a", "30"}, {"b", "70"}}
	rs := finish(t, startTenants(m, tenantSeconds, specs...))
	checkShares(t, specs, rs, []float64{30, 70})
}

// A tenant that queues 64 kernels of 20 ms (1.28 s of work, far past the
// drain's 100 ms bound) is held near its share by the launch budget:
// without it, it took 92 % of the wall time where 25 % was due. Its tails
// are long, so its drains are closed (kmod/core/README.md, "Draining"):
// its neighbours wait for its tail, which it is charged in full. Each case
// runs the tenants in one order of joining (an idle process per container
// joins first, in that order), on the engine as a T4 or a V100 is
// (compute preemption, simcuda's default) and on one without preemption
// (SIMCUDA_PREEMPT_US=0).
//
// With every drain open (the early handover alone) the tail ran on in
// the next owner's slice, and the table's order decided whose: the two 5 %
// vGPUs' units are adjacent, in the order of their ids, which the schedule
// file gives in the order their first processes arrive. The long tenant
// then took 24-41 % of wall time preempted, and 26.5-27.5 % or 35-40 %
// on whole kernels, where its 1 ms neighbour b got 7 % or 11.6-16.3 %.
//
// Checked: the long tenant at most 34 % and b at least 17 % of wall time,
// in every case (closed: 26.8-28.5 % and 23.7-26.1 % in three runs of
// the four cases). The 10 % tenant's share is logged, not checked: on a
// loaded machine the 1 ms tenants cannot launch fast enough to fill their
// slices (34 % for a with two CPU hogs running, 22.9 % of wall, on the
// engine without preemption), which says nothing of the gate.
// benchmarks/shares has the precise figures.
func TestFileGateLongDeepQueue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		order   []string // containers in the order their vGPUs join
		preempt bool     // simcuda's default; false: SIMCUDA_PREEMPT_US=0
		limit   float64  // the long tenant's most, % of wall time
		victim  float64  // b's least, % of wall time
	}{
		{"preempted, a b c", []string{"a", "b", "c"}, true, 34, 17},
		{"preempted, b c a", []string{"b", "c", "a"}, true, 34, 17},
		// Table c a b c: a's unit is followed by b's.
		{"whole kernels, followed by the other 5 %", []string{"a", "b", "c"}, false, 34, 17},
		// Table c b a c: by c's.
		{"whole kernels, followed by the 10 %", []string{"b", "c", "a"}, false, 34, 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := schedMachine(t, "4")
			if !tc.preempt {
				m.set("SIMCUDA_PREEMPT_US", "0")
			}
			longDeepQueue(t, m, tc.order, tc.limit, tc.victim)
		})
	}
}

func longDeepQueue(t *testing.T, m *machine, order []string, limit, victim float64) {
	specs := []tenantSpec{{"a", "5"}, {"b", "5"}, {"c", "10"}}
	quota := map[string]string{}
	for _, s := range specs {
		quota[s.key] = s.quota
	}
	var idle []*proc
	for _, key := range order {
		p := m.container(tenantSpec{key, quota[key]}).start("tenant", "0", tenantKernel, tenantDepth, "1", "hold")
		p.await("held", 30*time.Second)
		idle = append(idle, p)
	}
	var ps []*proc
	for i, s := range specs {
		args := []string{"tenant", tenantSeconds, tenantKernel, tenantDepth, "1", "go"}
		if i == 0 {
			args = []string{"tenant", tenantSeconds, "20000", "64", "4", "go"}
		}
		ps = append(ps, m.container(s).start(args...))
	}
	for _, p := range ps {
		p.await("ready", 30*time.Second)
	}
	for _, p := range ps {
		_, err := p.stdin.Write([]byte("go\n"))
		require.NoError(t, err)
	}
	rs := finish(t, ps)
	for _, p := range idle {
		r := p.stop(30 * time.Second)
		require.Equal(t, 0, r.code, "%s", r)
	}
	var total float64
	for _, r := range rs {
		total += float64(r.num(t, "busy_ns"))
	}
	for i, r := range rs {
		busy := float64(r.num(t, "busy_ns"))
		t.Logf("%s(%s%%): %.1f%% of the engine, %.1f%% of wall", specs[i].key,
			specs[i].quota, 100*busy/total, 100*busy/float64(r.num(t, "wall_ns")))
		assert.Positive(t, busy, "%s", r)
	}
	wall := 100 * float64(rs[0].num(t, "busy_ns")) / float64(rs[0].num(t, "wall_ns"))
	assert.LessOrEqual(t, wall, limit, "the 25 %% tenant of 20 ms kernels 64 deep took %.1f%% of wall time\n%s", wall, rs[0])
	b := 100 * float64(rs[1].num(t, "busy_ns")) / float64(rs[1].num(t, "wall_ns"))
	assert.GreaterOrEqual(t, b, victim, "b, the 1 ms tenant next to it, got %.1f%% of wall time where 25 %% is due\n%s", b, rs[1])
}

// Policy 2 gives every vGPU one unit, whatever its quota. With the
// default 20 units a period the two tenants would run in 2 of them: some
// 30 slices each in 3 s, where one slice more or less is 3 points and a
// loaded machine's lost wake-up decides the test. With 4 units a period
// each gets a quarter of the card, some 150 slices.
func TestFileGateAverage(t *testing.T) {
	// Under the early handover the next owner's first kernels are queued
	// behind the old owner's tail; an engine that ran them inside that
	// tail (the simulated one booked a stream's kernels only as its worker
	// reached them) charged them to the old owner's drain and gave them to
	// the next owner again: with the table free, a, b, free the vGPU whose
	// drain ran into b's slice got 40 % of the engine, every run.
	m := schedMachine(t, "2").set("GPUSLICE_MAX_INST", "4")
	specs := []tenantSpec{{"a", "10"}, {"b", "40"}}
	rs := finish(t, startTenants(m, tenantSeconds, specs...))
	checkShares(t, specs, rs, []float64{50, 50})
}

// Policy 5: the 30 % vGPU gets its units, the quota-0 ones share the rest.
func TestFileGateHybrid(t *testing.T) {
	m := schedMachine(t, "5")
	specs := []tenantSpec{{"a", "30"}, {"b", "0"}, {"c", "0"}}
	rs := finish(t, startTenants(m, tenantSeconds, specs...))
	checkShares(t, specs, rs, []float64{30, 35, 35})
}

// Policy 1 lends nothing: a lone 30 % tenant gets no more than its 30 %
// of wall time (the rest of the card idles).
func TestFileGateFixedAlone(t *testing.T) {
	m := schedMachine(t, "1")
	r := finish(t, startTenants(m, tenantSeconds, tenantSpec{"a", "30"}))[0]
	share := 100 * float64(r.num(t, "busy_ns")) / float64(r.num(t, "wall_ns"))
	t.Logf("lone 30%% tenant: %.1f%% of wall time (%+.1f)", share, share-30)
	// The bound that isolation promises. How close to 30 % it comes needs
	// the CPU to wake the tenant on time, which a loaded CI machine does
	// not: that figure comes from benchmarks/shares.
	assert.LessOrEqual(t, share, 33.0, "%s", r)
	assert.Positive(t, r.num(t, "kernels"), "%s", r)
}

func TestFileGatePreemptive(t *testing.T) {
	m := schedMachine(t, "3")
	specs := []tenantSpec{{"a", "10"}, {"b", "20"}, {"c", "30"}}
	rs := finish(t, startTenants(m, tenantSeconds, specs...))
	checkShares(t, specs, rs, []float64{100.0 / 3, 100.0 / 3, 100.0 / 3})
}

// Policy 6 reclaims an idle vGPU's units: with the third tenant idle (it
// launched once and keeps its context) the other two share the card. The
// schedule itself says so: the idle vGPU, whose 2 units would give it
// twice a's slices under policy 4, is granted next to none once its
// reclaim window (100 ms) after its one launch is over: a and b start
// within it, and it keeps its units until then.
func TestFileGateWeightedWeakIdle(t *testing.T) {
	m := schedMachine(t, "6")
	idle := m.container(tenantSpec{"c", "10"}).start("tenant", "0", tenantKernel, tenantDepth, "1", "hold")
	idle.await("held", 30*time.Second)
	specs := []tenantSpec{{"a", "5"}, {"b", "5"}}
	ps := startTenants(m, tenantSeconds, specs...)
	file := filepath.Join(m.dir, "sched", "card0.sched")
	// While they run: an exited tenant's vGPU leaves the file.
	time.Sleep(300 * time.Millisecond)
	before := slicesGranted(t, m.ok("schedinfo", file).stdout)
	time.Sleep(1500 * time.Millisecond)
	after := slicesGranted(t, m.ok("schedinfo", file).stdout)
	rs := finish(t, ps)
	checkShares(t, specs, rs, []float64{50, 50})
	slices := map[string]uint64{}
	for k, n := range after {
		slices[k] = n - before[k]
	}
	t.Logf("slices granted in 1.5 s from 0.3 s into the run: %v (before: %v)", slices, before)
	assert.Less(t, 10*slices["c"], slices["a"], "the idle vGPU's units are reclaimed: %v", slices)
	for i, r := range rs {
		// About 44 % each on an idle machine; a loaded one wakes the
		// tenants late (benchmarks/shares has the figure).
		wall := 100 * float64(r.num(t, "busy_ns")) / float64(r.num(t, "wall_ns"))
		t.Logf("%s: %.1f%% of wall time", specs[i].key, wall)
	}
	r := idle.stop(30 * time.Second)
	require.Equal(t, 0, r.code, "%s", r)
}

// These tests run one at a time (no t.Parallel): each scenario's tenants
// spin on the CPU, and seven scenarios at once on a 2-core machine starve
// the launches the shares are measured from.

// A tenant killed mid-run (kill -9) does not stop the others: its vGPU
// leaves the schedule file once its process is found dead (the survivors
// reap it within 50 ms of a slice boundary), so under policy 4 its units
// stop idling the card.
func TestFileGateTenantKilled(t *testing.T) {
	m := schedMachine(t, "4")
	specs := []tenantSpec{{"a", "5"}, {"b", "5"}, {"c", "10"}}
	ps := startTenants(m, tenantSeconds, specs...)
	file := filepath.Join(m.dir, "sched", "card0.sched")
	// schedInfo is what the schedule file lists once cond holds, or fails.
	schedInfo := func(what string, cond func(info string) bool) string {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if r := m.run("schedinfo", file); r.code == 0 && cond(r.stdout) {
				return r.stdout
			}
			require.True(t, time.Now().Before(deadline), "%s: not within 10 s: %s", what, m.run("schedinfo", file))
			time.Sleep(20 * time.Millisecond)
		}
	}
	schedInfo("c registered", func(info string) bool { return strings.Contains(info, "key=c ") })
	time.Sleep(time.Second)
	ps[2].kill()
	info := schedInfo("c's vGPU leaving the schedule after its kill",
		func(info string) bool { return !strings.Contains(info, "key=c ") })
	assert.Contains(t, info, "key=a ")
	assert.Contains(t, info, "key=b ")
	for i, r := range finish(t, ps[:2]) {
		// Had c kept its units, at most 25 %; ideally about 41.7.
		wall := 100 * float64(r.num(t, "busy_ns")) / float64(r.num(t, "wall_ns"))
		t.Logf("%s after the kill of c at 1 s: %.1f%% of wall time", specs[i].key, wall)
	}
}

// Without GPU_POLICY the file mode stays ungated, and a malformed compute
// setting refuses launches (never allocations) with one line.
func TestFileGateConfig(t *testing.T) {
	m := schedMachine(t, "4")
	r := m.with("GPU_POLICY", "").ok("tenant", "1", "1000", "2")
	assert.Empty(t, r.lines("gpuslice[", "gated"), "%s", r)
	r = m.with("GPU_POLICY", "0").ok("tenant", "1", "1000", "2")
	assert.Empty(t, r.lines("gpuslice[", "gated by"), "%s", r)
	// Quota 0 outside policy 5: not gated.
	r = m.container(tenantSpec{"z", "0"}).ok("tenant", "1", "1000", "2")
	assert.Len(t, r.lines("gpuslice[", "kernel launches are not gated"), 1, "%s", r)
	r = m.container(tenantSpec{"q", "7"}).run("tenant", "1", "1000", "2")
	require.Equal(t, 1, r.code, "%s", r)
	assert.Equal(t, "CUDA_ERROR_NOT_PERMITTED", r.kv()["launch.rc"], "%s", r)
	assert.Len(t, r.lines("gpuslice[", "GPU_CONTAINER_QUOTA_PERCENT=7"), 1, "%s", r)
	// The file's settings win: one line says so.
	m.container(tenantSpec{"a", "50"}).ok("tenant", "0", "1000", "2")
	r = m.container(tenantSpec{"b", "50"}).with("GPU_POLICY", "1").ok("tenant", "0", "1000", "2")
	assert.Len(t, r.lines("gpuslice[", "the schedule file", "says policy 4"), 1, "%s", r)
	assert.Len(t, r.lines("gpuslice[", "gated by the schedule file", "policy 4"), 1, "%s", r)
}

// GPUSLICE_SLICE_MS and GPUSLICE_RECLAIM_MS are the slice and the reclaim
// window a new schedule file is created with (unset: 5 ms and 100 ms). A
// malformed value refuses launches (never allocations) with one line
// naming the variable and the range, creating no file; a container whose
// values differ from an existing file's gets one line and the file's.
func TestFileGateConfigSliceReclaim(t *testing.T) {
	for _, tc := range []struct {
		name, variable, value string
		slice, reclaim        uint64 // the new file's, ns; 0: the value is refused
	}{
		{"slice", "GPUSLICE_SLICE_MS", "7", 7e6, 100e6},
		{"reclaim", "GPUSLICE_RECLAIM_MS", "2500", 5e6, 2500e6},
		{"reclaim lowest", "GPUSLICE_RECLAIM_MS", "1", 5e6, 1e6},
		{"reclaim highest", "GPUSLICE_RECLAIM_MS", "10000", 5e6, 10000e6},
		{"slice zero", "GPUSLICE_SLICE_MS", "0", 0, 0},
		{"slice too large", "GPUSLICE_SLICE_MS", "101", 0, 0},
		{"reclaim zero", "GPUSLICE_RECLAIM_MS", "0", 0, 0},
		{"reclaim too large", "GPUSLICE_RECLAIM_MS", "10001", 0, 0},
		{"reclaim with a unit", "GPUSLICE_RECLAIM_MS", "100ms", 0, 0},
		{"reclaim negative", "GPUSLICE_RECLAIM_MS", "-5", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := schedMachine(t, "4")
			a := m.container(tenantSpec{"a", "50"}).with(tc.variable, tc.value)
			file := filepath.Join(m.dir, "sched", "card0.sched")
			if tc.slice == 0 {
				r := a.run("tenant", "0", "1000", "2")
				require.Equal(t, 1, r.code, "%s", r)
				assert.Equal(t, "CUDA_ERROR_NOT_PERMITTED", r.kv()["launch.rc"], "%s", r)
				named := r.lines("gpuslice[", tc.variable+"="+tc.value+":")
				require.Len(t, named, 1, "one line naming %s: %s", tc.variable, r)
				assert.Regexp(t, rangeRE, named[0])
				assert.NoFileExists(t, file)
				a.ok("alloc", "1M")
				return
			}
			r := a.ok("tenant", "0", "1000", "2")
			assert.Len(t, r.lines("gpuslice[", "gated by the schedule file"), 1, "%s", r)
			assert.Empty(t, r.lines("gpuslice[", "do not apply"), "%s", r)
			kv := m.ok("schedinfo", file).kv()
			assert.Equal(t, fmt.Sprint(tc.slice), kv["slice_ns"])
			assert.Equal(t, fmt.Sprint(tc.reclaim), kv["reclaim_ns"])

			// The same settings again: no line; others: the file's win.
			r = m.container(tenantSpec{"b", "50"}).with(tc.variable, tc.value).ok("tenant", "0", "1000", "2")
			assert.Empty(t, r.lines("gpuslice[", "do not apply"), "%s", r)
			r = m.container(tenantSpec{"c", "50"}).with(tc.variable, "3").ok("tenant", "0", "1000", "2")
			differs := r.lines("gpuslice[", "the schedule file", "do not apply")
			require.Len(t, differs, 1, "%s", r)
			assert.Contains(t, differs[0], fmt.Sprintf("says policy 4, 20 units of %d ms, reclaim %d ms;",
				tc.slice/1e6, tc.reclaim/1e6))
			assert.Len(t, r.lines("gpuslice[", "gated by the schedule file"), 1, "%s", r)
			kv = m.ok("schedinfo", file).kv()
			assert.Equal(t, fmt.Sprint(tc.slice), kv["slice_ns"])
			assert.Equal(t, fmt.Sprint(tc.reclaim), kv["reclaim_ns"])
		})
	}
}

// slicesGranted reads each vGPU's slice count (by key) from schedinfo's output.
func slicesGranted(t *testing.T, info string) map[string]uint64 {
	t.Helper()
	slices := map[string]uint64{}
	for _, l := range strings.Split(info, "\n") {
		if !strings.HasPrefix(l, "vgpu ") {
			continue
		}
		var key string
		var quota, nprocs, n uint64
		_, err := fmt.Sscanf(l, "vgpu key=%s quota=%d nprocs=%d slices=%d", &key, &quota, &nprocs, &n)
		require.NoError(t, err, l)
		slices[key] = n
	}
	return slices
}
