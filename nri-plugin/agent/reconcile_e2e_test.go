//go:build cgo

package agent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/ledger"
)

// The reconciliation end to end, no-module mode: a container's process
// under the shim on the simulated GPU loads a module whose PTX defines a
// .global array, which the driver takes and the shim cannot see. The
// agent's observer, on the real simulated NVML (running processes, found
// by their cgroup), shows the driver's figure and the unseen bytes in
// /metrics and writes them into the ledger, after which the process's
// next allocation past the cap with them counted is refused: at the
// byte, and, once the driver's figure passes the cap, every one (logged
// once). The stack the driver grows at launch is found the same way.
func TestReconcileEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the C artifacts")
	}
	require.NoError(t, testenv.BuildC())
	sim := map[string]string{"SIMCUDA_STATE": filepath.Join(t.TempDir(), "sim.state"), "SIMCUDA_DEVICES": "1",
		"SIMCUDA_MEM_MIB": "16384", "SIMCUDA_CONTEXT_MIB": strconv.Itoa(ctxMiB)}
	for k, v := range sim {
		t.Setenv(k, v)
	}
	n := newNode(t, EnforceFile, cards16(1, 0)...)
	logs := &lockedBuffer{}
	n.opts.Log = newLogger(logs)
	n.restart(t)
	rt := startRuntime(t, n)
	url := observing(t, n, []int{0}, ObserveOptions{})

	// The container's cgroup is this test's own, so the processes the
	// test starts are the container's, as the agent finds them.
	env := rt.createIn(t, "c-recon", "recon", ownCgroup(t), map[string]string{"gpuslice.io/gpu-memory": "1Gi"}, n, sim)
	labels := map[string]string{"container": "recon", "card": "0"}
	const capBytes, charged = 1 << 30, ctxMiB<<20 + 4096 // the context, and the module's PTX text

	// 64 MiB unseen: what is left is cap - charged - 64 MiB, to the byte.
	p := startProc(t, env, "unseen", "64M")
	p.await(t, "ready")
	waitMetric(t, url, "xgpu_memory_unseen", labels, func(v float64) bool { return v == 64<<20 })
	waitMetric(t, url, "xgpu_memory_used", labels, func(v float64) bool { return v == charged })
	waitMetric(t, url, "xgpu_memory_driver_used", labels, func(v float64) bool { return v == charged+64<<20 })
	room := uint64(capBytes - charged - 64<<20)
	assert.Equal(t, fmt.Sprintf("alloc %d rc=CUDA_ERROR_OUT_OF_MEMORY free=%d", room+1, room), p.ask(t, room+1))
	assert.Equal(t, fmt.Sprintf("alloc %d rc=CUDA_SUCCESS free=0", room), p.ask(t, room), "filled to the byte")
	p.stop(t)
	waitMetric(t, url, "xgpu_memory_unseen", labels, func(v float64) bool { return v == 0 })
	assert.NotContains(t, logs.String(), "more than the cap", "within the cap all along")

	// The stack the driver grows at launch for a kernel with a deep frame
	// (by the driver's own figures, as gstest read them) is unseen too.
	p = startProc(t, env, "unseen", "0", "4096")
	stack := p.awaitNum(t, "stack_bytes")
	p.await(t, "ready")
	require.NotZero(t, stack)
	waitMetric(t, url, "xgpu_memory_unseen", labels, func(v float64) bool { return v == float64(stack) })
	p.stop(t)
	waitMetric(t, url, "xgpu_memory_unseen", labels, func(v float64) bool { return v == 0 })

	// 1100 MiB unseen: the driver's figure passes the 1 GiB cap; logged,
	// and not one more byte is allocated.
	p = startProc(t, env, "unseen", "1100M")
	p.await(t, "ready")
	waitMetric(t, url, "xgpu_memory_unseen", labels, func(v float64) bool { return v == 1100<<20 })
	assert.Equal(t, "alloc 1 rc=CUDA_ERROR_OUT_OF_MEMORY free=0", p.ask(t, 1))
	snap, err := ledger.Peek(filepath.Join(n.opts.Layout.LedgerRoot, "c-recon", "card0.ledger"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1100<<20), snap.Unseen, "the ledger holds what the metric shows")
	time.Sleep(time.Second) // five more windows
	assert.Equal(t, 1, strings.Count(logs.String(), "more than the cap"), "logged once:\n%s", logs)
	p.stop(t)
	waitMetric(t, url, "xgpu_memory_unseen", labels, func(v float64) bool { return v == 0 })
	waitLog(t, logs, "within the cap again")
}

// ownCgroup is this process's deepest cgroup path, of any hierarchy.
func ownCgroup(t *testing.T) string {
	t.Helper()
	paths, err := procCgroups(uint32(os.Getpid()))
	require.NoError(t, err)
	best := ""
	for _, p := range paths {
		if len(p) > len(best) {
			best = p
		}
	}
	require.NotEmpty(t, best, "no cgroup in /proc/self/cgroup")
	return best
}

// awaitNum waits for gstest's key=value line and returns the value.
func (p *proc) awaitNum(t *testing.T, key string) uint64 {
	t.Helper()
	l := p.next(t, key+"=", func(l string) bool { return strings.HasPrefix(l, key+"=") })
	n, err := strconv.ParseUint(strings.TrimPrefix(l, key+"="), 10, 64)
	require.NoError(t, err)
	return n
}

// ask sends gstest unseen a size and returns its answer.
func (p *proc) ask(t *testing.T, n uint64) string {
	t.Helper()
	_, err := fmt.Fprintf(p.in, "%d\n", n)
	require.NoError(t, err)
	prefix := fmt.Sprintf("alloc %d ", n)
	return p.next(t, "an answer to "+prefix, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitLog(t *testing.T, logs *lockedBuffer, sub string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), sub) {
		require.True(t, time.Now().Before(deadline), "no %q in the log:\n%s", sub, logs)
		time.Sleep(50 * time.Millisecond)
	}
}
