package schedfile

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

func TestMain(m *testing.M) { testenv.MainWithC(m) }

// tenant is gstest tenant args, gated through the schedule file under dir
// with policy, as container key's process with quota.
func tenant(dir, policy, key, quota string, args ...string) *exec.Cmd {
	cmd := exec.Command(testenv.Bin("gstest"), append([]string{"tenant"}, args...)...)
	cmd.Env = append(testenv.SimEnv(filepath.Join(dir, "sim.state"), 4096),
		"LD_PRELOAD="+testenv.Shim(), "GPUSLICE_ENFORCE=file", "GPU_POLICY="+policy,
		"GPU_IDX=0", "GPU_CONTAINER_MEM=512", "GPUSLICE_CONTEXT_MIB=4",
		"GPUSLICE_SCHED_DIR="+filepath.Join(dir, "sched"),
		"GPUSLICE_LEDGER_DIR="+filepath.Join(dir, "ledger-"+key),
		"GPUSLICE_VGPU="+key, "GPU_CONTAINER_QUOTA_PERCENT="+quota)
	return cmd
}

// holder starts a gated tenant of container key that launches once and
// keeps its context, and waits until it has.
func holder(t *testing.T, dir, key, quota string) {
	t.Helper()
	cmd := tenant(dir, "1", key, quota, "0", "1000", "1", "1", "hold")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	held := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "held" {
				held <- true
			}
		}
		close(held)
	}()
	select {
	case ok := <-held:
		require.True(t, ok, "tenant %s exited: %s", key, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("tenant %s never held: %s", key, stderr.String())
	}
}

func TestReadLiveFile(t *testing.T) {
	dir := t.TempDir()
	holder(t, dir, "ctr-a", "30")
	holder(t, dir, "ctr-b", "70")
	path := filepath.Join(dir, "sched", "card0.sched")

	// Each reported its kernel's busy time at its fence (the fencer ends
	// the slice even though the tenant launches no more).
	var c *Card
	require.Eventually(t, func() bool {
		var err error
		c, err = Read(path)
		require.NoError(t, err)
		if len(c.VGPUs) != 2 {
			return false
		}
		for _, v := range c.VGPUs {
			if v.BusyNs == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	assert.Equal(t, 1, c.Policy)
	assert.Equal(t, 20, c.MaxInst)
	assert.Equal(t, uint64(5*time.Millisecond), c.SliceNs)
	byKey := map[string]VGPU{}
	for _, v := range c.VGPUs {
		byKey[v.Key] = v
	}
	for key, quota := range map[string]int{"ctr-a": 30, "ctr-b": 70} {
		v, ok := byKey[key]
		require.True(t, ok, "vGPU %s listed: %+v", key, c.VGPUs)
		assert.Equal(t, quota, v.Quota)
		assert.Equal(t, 1, v.NProcs)
		assert.False(t, v.High)
		assert.GreaterOrEqual(t, v.Slices, uint64(1))
		// One 1 ms kernel: its span, not more than a slice and a drain.
		assert.GreaterOrEqual(t, v.BusyNs, uint64(time.Millisecond)/2, "%s", key)
		assert.Less(t, v.BusyNs, uint64(200*time.Millisecond), "%s", key)
	}
	assert.NotEqual(t, byKey["ctr-a"].ID, byKey["ctr-b"].ID)
}

func TestReadRejects(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("gssched"), 0o644))
	wrong := filepath.Join(dir, "wrong")
	require.NoError(t, os.WriteFile(wrong, make([]byte, 1<<20), 0o644))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o666))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(short, link))
	for _, tc := range []struct{ path, want string }{
		{fifo, "not a regular file"},
		{link, "too many levels of symbolic links"},
		{short, "not a gpuslice schedule file"},
		{wrong, "not a gpuslice schedule file"},
		{empty, "empty"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		_, err := Read(tc.path)
		require.Error(t, err, tc.path)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// A lone tenant under a work-conserving policy keeps the card from slice
// to slice and never releases while it has work: its busy time is
// reported as the card goes on to its next slice, not only at a release
// that may not come. Before, its vGPU showed 0 busy through 285 slices of
// a saturating run (policy 4), so xgpu_core_percentage_used read 0 %.
func TestLoneTenantBusyReported(t *testing.T) {
	dir := t.TempDir()
	cmd := tenant(dir, "4", "a", "50", "3", "1000", "2", "1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	path := filepath.Join(dir, "sched", "card0.sched")
	var busy, slices atomic.Uint64
	var gone atomic.Bool
	// Until its busy time shows, or the tenant is gone (it runs 3 s).
	ok := assert.Eventually(t, func() bool {
		select {
		case <-exited:
			gone.Store(true)
			return true
		default:
		}
		c, err := Read(path)
		if err != nil || len(c.VGPUs) != 1 {
			return false
		}
		busy.Store(c.VGPUs[0].BusyNs)
		slices.Store(c.VGPUs[0].Slices)
		return busy.Load() >= uint64(100*time.Millisecond)
	}, 2500*time.Millisecond, 20*time.Millisecond)
	require.False(t, gone.Load(), "the tenant exited before its busy time was reported: %s", stderr.String())
	require.True(t, ok, "busy %d ns reported over %d slices while it ran", busy.Load(), slices.Load())
}
