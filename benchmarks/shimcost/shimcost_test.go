// Package shimcost measures what libgpuslice.so adds to a driver call: the
// same program runs bare on the simulated driver and under the shim, in
// one run, and the benchmark reports the difference and the ratio.
package shimcost

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

func TestMain(m *testing.M) {
	if err := testenv.BuildC(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// costs are nanoseconds per call as gsbench measured them.
type costs struct{ allocFree, launch float64 }

// run measures n iterations, bare or under the shim with a memory cap and
// no compute quota, on a private simulated card.
func run(tb testing.TB, n int, shim bool) costs {
	tb.Helper()
	dir := tb.TempDir()
	cmd := exec.Command(testenv.Bin("gsbench"), strconv.Itoa(n))
	cmd.Env = testenv.SimEnv(filepath.Join(dir, "sim.state"), 16384)
	if shim {
		cmd.Env = append(cmd.Env,
			"LD_PRELOAD="+testenv.Shim(),
			"GPU_IDX=0", "GPU_CONTAINER_MEM=8192",
			"GPUSLICE_LEDGER_DIR="+filepath.Join(dir, "ledger"))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("gsbench (shim=%v): %v\n%s", shim, err, out)
	}
	var c costs
	if _, err := fmt.Sscanf(string(out), "alloc_free_ns=%g launch_ns=%g",
		&c.allocFree, &c.launch); err != nil {
		tb.Fatalf("gsbench printed %q: %v", out, err)
	}
	return c
}

// TestGsbenchRuns keeps the benchmark honest in CI: both configurations
// run and measure something. It asserts no timing.
func TestGsbenchRuns(t *testing.T) {
	for _, shim := range []bool{false, true} {
		c := run(t, 200, shim)
		if c.allocFree <= 0 || c.launch <= 0 {
			t.Errorf("shim=%v: measured %+v, want positive costs", shim, c)
		}
	}
}

// BenchmarkShimOverhead alternates bare and shimmed runs and keeps the best
// of each, so the two are measured under the same machine load.
func BenchmarkShimOverhead(b *testing.B) {
	const n = 20000
	bare := costs{math.Inf(1), math.Inf(1)}
	shim := bare
	for i := 0; i < b.N; i++ {
		bare = minCosts(bare, run(b, n, false))
		shim = minCosts(shim, run(b, n, true))
	}
	b.ReportMetric(bare.allocFree, "bare-ns/alloc-free")
	b.ReportMetric(shim.allocFree, "shim-ns/alloc-free")
	b.ReportMetric(shim.allocFree-bare.allocFree, "added-ns/alloc-free")
	b.ReportMetric(shim.allocFree/bare.allocFree, "ratio/alloc-free")
	b.ReportMetric(bare.launch, "bare-ns/launch")
	b.ReportMetric(shim.launch, "shim-ns/launch")
	b.ReportMetric(shim.launch-bare.launch, "added-ns/launch")
	b.ReportMetric(shim.launch/bare.launch, "ratio/launch")
}

func minCosts(a, b costs) costs {
	return costs{math.Min(a.allocFree, b.allocFree), math.Min(a.launch, b.launch)}
}
