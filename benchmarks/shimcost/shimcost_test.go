// Package shimcost measures what libgpuslice.so adds to a driver call: the
// same program runs bare on the simulated driver and under the shim, in
// one run, and the benchmark reports the difference and the ratio.
package shimcost

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

func TestMain(m *testing.M) { testenv.MainWithC(m) }

// costs are nanoseconds per call as gsbench measured them.
type costs struct{ allocFree, launch float64 }

// setup is how gsbench runs: bare on the simulated driver, under the
// shim with a memory cap and no compute quota, or under the shim with its
// launches gated by a schedule file (policy 3, alone on the card: every
// slice is its own, so the launches measured take the in-slice fast path).
type setup int

const (
	bare setup = iota
	shimmed
	gated
)

func (s setup) String() string {
	return [...]string{"bare", "shim", "gated"}[s]
}

// run measures n iterations of gsbench under s on a private simulated card.
func run(tb testing.TB, n int, s setup) costs {
	tb.Helper()
	dir := tb.TempDir()
	cmd := exec.Command(testenv.Bin("gsbench"), strconv.Itoa(n))
	cmd.Env = testenv.SimEnv(filepath.Join(dir, "sim.state"), 16384)
	if s != bare {
		cmd.Env = append(cmd.Env,
			"LD_PRELOAD="+testenv.Shim(),
			"GPU_IDX=0", "GPU_CONTAINER_MEM=8192",
			"GPUSLICE_LEDGER_DIR="+filepath.Join(dir, "ledger"))
	}
	if s == gated {
		cmd.Env = append(cmd.Env, "GPUSLICE_ENFORCE=file",
			"GPU_POLICY=3", "GPU_CONTAINER_QUOTA_PERCENT=50",
			"GPUSLICE_SCHED_DIR="+filepath.Join(dir, "sched"),
			"GPUSLICE_VGPU=gsbench", "GPUSLICE_LOG_LEVEL=info")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("gsbench (%v): %v\n%s", s, err, out)
	}
	if s == gated && !strings.Contains(string(out), "gated by the schedule file") {
		tb.Fatalf("gsbench (%v): its launches were not gated:\n%s", s, out)
	}
	var c costs
	line := string(out)
	if i := strings.Index(line, "alloc_free_ns="); i >= 0 {
		line = line[i:]
	}
	if _, err := fmt.Sscanf(line, "alloc_free_ns=%g launch_ns=%g",
		&c.allocFree, &c.launch); err != nil {
		tb.Fatalf("gsbench (%v) printed %q: %v", s, out, err)
	}
	return c
}

// TestGsbenchRuns keeps the benchmark honest in CI: every configuration
// runs and measures something. It asserts no timing.
func TestGsbenchRuns(t *testing.T) {
	for _, s := range []setup{bare, shimmed, gated} {
		c := run(t, 200, s)
		if c.allocFree <= 0 || c.launch <= 0 {
			t.Errorf("%v: measured %+v, want positive costs", s, c)
		}
	}
}

// BenchmarkShimOverhead alternates bare, shimmed and gated runs and keeps
// the best of each, so that all are measured under the same machine load.
func BenchmarkShimOverhead(b *testing.B) {
	const n = 20000
	inf := costs{math.Inf(1), math.Inf(1)}
	best := map[setup]costs{bare: inf, shimmed: inf, gated: inf}
	for i := 0; i < b.N; i++ {
		for _, s := range []setup{bare, shimmed, gated} {
			best[s] = minCosts(best[s], run(b, n, s))
		}
	}
	base, shim, gate := best[bare], best[shimmed], best[gated]
	b.ReportMetric(base.allocFree, "bare-ns/alloc-free")
	b.ReportMetric(shim.allocFree, "shim-ns/alloc-free")
	b.ReportMetric(shim.allocFree-base.allocFree, "added-ns/alloc-free")
	b.ReportMetric(shim.allocFree/base.allocFree, "ratio/alloc-free")
	b.ReportMetric(base.launch, "bare-ns/launch")
	b.ReportMetric(shim.launch, "shim-ns/launch")
	b.ReportMetric(shim.launch-base.launch, "added-ns/launch")
	b.ReportMetric(shim.launch/base.launch, "ratio/launch")
	b.ReportMetric(gate.launch, "gated-ns/launch")
	b.ReportMetric(gate.launch-base.launch, "gated-added-ns/launch")
	b.ReportMetric(gate.launch/base.launch, "gated-ratio/launch")
}

func minCosts(a, b costs) costs {
	return costs{math.Min(a.allocFree, b.allocFree), math.Min(a.launch, b.launch)}
}
