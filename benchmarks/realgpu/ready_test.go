package realgpu

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestReadyShSim runs the readiness check (ready.sh) on the simulated
// driver: every check must pass there (the simulator models what each
// one tests), the report must list each of them, and the context
// footprint must be measured.
func TestReadyShSim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(testenv.Root(), "benchmarks", "realgpu", "ready.sh"),
		"--sim", "--no-build")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("ready.sh --sim: %v\n%s", time.Since(start).Round(time.Second), stdout.String())
	if err != nil {
		t.Fatalf("ready.sh: %v\n--- stderr\n%s", err, stderr.String())
	}
	checks := map[string]string{}
	for _, l := range strings.Split(stdout.String(), "\n") {
		if row := cells(l); strings.HasPrefix(l, "|") && len(row) == 3 && row[0] != "check" && !strings.HasPrefix(row[0], "---") {
			checks[row[0]] = row[1]
		}
	}
	for _, want := range []string{
		"hooks (exported entry points)", "hooks (private entry points)",
		"cap exact: alloc", "cap exact: pool_current", "cap exact: graph memory",
		"managed memory refused", "graph capture on a gated card", "graph replays gated",
		"host function waits for a later launch", "launch path gated: ctxless",
		"launch path gated: launch", "launch path gated: graph",
		"CUDA_VISIBLE_DEVICES: device to card by UUID",
	} {
		if got := checks[want]; got != "ok" {
			t.Errorf("check %q: %q, want ok", want, got)
		}
	}
	if got := checks["context footprint (NVML, no shim)"]; got != "measured" {
		t.Errorf("context footprint: %q, want measured", got)
	}
}
