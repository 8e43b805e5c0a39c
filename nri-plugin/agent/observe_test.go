//go:build cgo

package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/gpu"
	"github.com/gpuslice/gpuslice/pkg/kmod"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// statsKmod is the fake module with statistics the test sets.
type statsKmod struct {
	*fakeKmod
	mu    sync.Mutex
	stats map[[2]uint32]kmod.VGPUStats
	err   error
}

func (s *statsKmod) Stats(card, id uint32) (kmod.VGPUStats, error) {
	st, err := s.fakeKmod.Stats(card, id)
	if err != nil {
		return st, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return kmod.VGPUStats{}, s.err
	}
	if v, ok := s.stats[[2]uint32{card, id}]; ok {
		return v, nil
	}
	return st, nil
}

func (s *statsKmod) set(card, id uint32, st kmod.VGPUStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats[[2]uint32{card, id}] = st
}

type fixedCards []gpu.CardSample

func (f fixedCards) Sample() []gpu.CardSample { return f }

func ptrTo[T any](v T) *T { return &v }

func onlyVGPU(t *testing.T, n *status.Node, card int) status.VGPU {
	t.Helper()
	for _, c := range n.Cards {
		if c.Index == card {
			require.Len(t, c.VGPUs, 1)
			return c.VGPUs[0]
		}
	}
	t.Fatalf("no card %d", card)
	return status.VGPU{}
}

// Module mode: figures from gpuslice.ko's statistics; compute used is the
// busy time's growth over the wall time between two samples; a failing
// Stats leaves the figures out with a problem line.
func TestObserveModule(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(2, 4)...)
	fk := &statsKmod{fakeKmod: n.opts.Kmod.(*fakeKmod), stats: map[[2]uint32]kmod.VGPUStats{}}
	n.opts.Kmod = fk
	n.restart(t)
	_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "2Gi", "gpuslice.io/gpu-cores": "25"})
	require.NoError(t, err)

	ob := &Observer{a: n.agent, o: ObserveOptions{Node: "n1"}, prev: map[busyKey]busySample{}, problems: map[string]bool{}}
	t0 := time.Unix(1000, 0)
	v := onlyVGPU(t, ob.Sample(t0), 0)
	assert.Equal(t, status.VGPU{ID: -1, Namespace: "ns", Pod: "p", Container: "main", ContainerID: "c1",
		Mode: "compute", QuotaPercent: 25, MemoryCapBytes: 2 * gib}, v, "not started: nothing to read")

	n.cgroup(t, "c1")
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), ctr("c1")))
	fk.set(0, 0, kmod.VGPUStats{MemUsed: 300 << 20, BusyNs: 1e9, NProcs: 2})
	v = onlyVGPU(t, ob.Sample(t0.Add(time.Second)), 0)
	assert.Equal(t, 0, v.ID)
	assert.Equal(t, uint64(300<<20), *v.MemoryUsedBytes)
	assert.Equal(t, 2, *v.Processes)
	assert.Nil(t, v.CoreUsedPercent, "the first sample has no rate")

	fk.set(0, 0, kmod.VGPUStats{MemUsed: 100 << 20, BusyNs: 1e9 + 5e8, NProcs: 1})
	v = onlyVGPU(t, ob.Sample(t0.Add(3*time.Second)), 0)
	assert.InDelta(t, 25.0, *v.CoreUsedPercent, 1e-9, "0.5 s busy in 2 s")
	assert.Equal(t, uint64(100<<20), *v.MemoryUsedBytes)

	fk.mu.Lock()
	fk.err = &kmod.Error{Op: "read vGPU 0 on card 0", Errno: syscall.EIO}
	fk.mu.Unlock()
	s := ob.Sample(t0.Add(4 * time.Second))
	v = onlyVGPU(t, s, 0)
	assert.Nil(t, v.MemoryUsedBytes)
	assert.Nil(t, v.CoreUsedPercent)
	assert.Nil(t, v.Processes)
	require.Len(t, s.Problems, 1)
	assert.Contains(t, s.Problems[0], "gpuslice.ko: statistics of vGPU 0 on card 0")
	assert.Equal(t, "module", s.Enforce)
	assert.Equal(t, "n1", s.Node)
}

// A memory-only vGPU is not gated: its compute figure is absent, not 0.
func TestObserveUngatedHasNoCompute(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(1, 4)...)
	fk := &statsKmod{fakeKmod: n.opts.Kmod.(*fakeKmod), stats: map[[2]uint32]kmod.VGPUStats{}}
	n.opts.Kmod = fk
	n.restart(t)
	_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi"})
	require.NoError(t, err)
	n.cgroup(t, "c1")
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), ctr("c1")))
	ob := &Observer{a: n.agent, prev: map[busyKey]busySample{}, problems: map[string]bool{}}
	ob.Sample(time.Unix(1, 0))
	v := onlyVGPU(t, ob.Sample(time.Unix(2, 0)), 0)
	assert.Equal(t, "memory", v.Mode)
	assert.NotNil(t, v.MemoryUsedBytes)
	assert.Nil(t, v.CoreUsedPercent)
}

// File mode: no ledger file yet is a true zero, a broken one a problem;
// the schedule reader's busy time gives compute used; NVML's figures and
// health reach the cards, its absence a problem.
func TestObserveFile(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(2, 1)...)
	_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "40"})
	require.NoError(t, err)
	al, ok := n.opts.Store.Get("c1")
	require.True(t, ok)

	var mu sync.Mutex
	busy := map[string]uint64{}
	var schedErr error
	reads := 0
	sched := func(path string) (map[string]uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		assert.Equal(t, filepath.Join(n.opts.Layout.SchedRoot, "card0.sched"), path)
		out := map[string]uint64{}
		for k, v := range busy {
			out[k] = v
		}
		return out, schedErr
	}
	cards := fixedCards{{Index: 0, MemoryUsedBytes: ptrTo(uint64(5 << 30)), UtilPercent: ptrTo(70.0), Healthy: ptrTo(true)},
		{Index: 1, Healthy: ptrTo(false), Problems: []string{"NVML: card 1 reported critical XID 79"}}}
	ob := &Observer{a: n.agent, o: ObserveOptions{Cards: cards, Sched: sched},
		prev: map[busyKey]busySample{}, problems: map[string]bool{}}

	t0 := time.Unix(1000, 0)
	s := ob.Sample(t0)
	v := onlyVGPU(t, s, 0)
	assert.Equal(t, -1, v.ID)
	assert.Equal(t, uint64(0), *v.MemoryUsedBytes, "no ledger yet: nothing was charged")
	assert.Equal(t, 0, *v.Processes)
	assert.Equal(t, uint64(5<<30), *s.Cards[0].MemoryUsedBytes)
	assert.Equal(t, 70.0, *s.Cards[0].UtilPercent)
	assert.True(t, *s.Cards[0].Healthy)
	assert.False(t, *s.Cards[1].Healthy)
	assert.Equal(t, []string{"NVML: card 1 reported critical XID 79"}, s.Problems)
	assert.Equal(t, 1, reads, "one read per card and sample")

	mu.Lock()
	busy["c1"] = 4e8
	mu.Unlock()
	v = onlyVGPU(t, ob.Sample(t0.Add(time.Second)), 0)
	assert.InDelta(t, 40.0, *v.CoreUsedPercent, 1e-9)

	// The counter went back (the vGPU's entry was re-created): no figure
	// for this window, a rate again at the next.
	mu.Lock()
	busy["c1"] = 1e8
	mu.Unlock()
	v = onlyVGPU(t, ob.Sample(t0.Add(2*time.Second)), 0)
	assert.Nil(t, v.CoreUsedPercent)
	mu.Lock()
	busy["c1"] = 2e8
	mu.Unlock()
	v = onlyVGPU(t, ob.Sample(t0.Add(3*time.Second)), 0)
	assert.InDelta(t, 10.0, *v.CoreUsedPercent, 1e-9)

	mu.Lock()
	schedErr = errors.New("torn")
	mu.Unlock()
	require.NoError(t, os.WriteFile(filepath.Join(al.LedgerDir, "card0.ledger"), []byte("junk"), 0o644))
	s = ob.Sample(t0.Add(4 * time.Second))
	v = onlyVGPU(t, s, 0)
	assert.Nil(t, v.CoreUsedPercent)
	assert.Nil(t, v.MemoryUsedBytes)
	assert.Len(t, s.Problems, 3, "%q", s.Problems)

	// Without NVML and without a schedule reader: said, and absent.
	ob = &Observer{a: n.agent, o: ObserveOptions{NVMLProblem: "NVML: libnvidia-ml.so.1 not found"},
		prev: map[busyKey]busySample{}, problems: map[string]bool{}}
	s = ob.Sample(t0)
	assert.Nil(t, s.Cards[0].Healthy)
	assert.Nil(t, s.Cards[0].MemoryUsedBytes)
	assert.Contains(t, s.Problems, "NVML: libnvidia-ml.so.1 not found")
	assert.Contains(t, s.Problems, "card 0: no schedule file reader: compute used is absent in no-module mode")
}

// The sampler runs in the background; a released container leaves the
// next snapshot.
func TestObserveBackground(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi"})
	require.NoError(t, err)
	ob := n.agent.Observe(ObserveOptions{Window: 10 * time.Millisecond})
	defer ob.Close()
	require.Len(t, ob.Snapshot().Cards[0].VGPUs, 1, "sampled before Observe returns")
	require.NoError(t, n.agent.RemoveContainer(context.Background(), pod(nil), ctr("c1")))
	deadline := time.Now().Add(30 * time.Second)
	for len(ob.Snapshot().Cards[0].VGPUs) != 0 {
		require.True(t, time.Now().Before(deadline), "the removed container is still there")
		time.Sleep(5 * time.Millisecond)
	}
	ob.Close()
	ob.Close()
}

// ReadSchedFile opens nothing a container could plant in the shared
// schedule directory to hang or mislead the agent.
func TestReadSchedFileRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "card0.sched")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, err := ReadSchedFile(fifo)
	require.ErrorContains(t, err, "not a regular file")
	link := filepath.Join(dir, "card1.sched")
	require.NoError(t, os.Symlink("/etc/hostname", link))
	_, err = ReadSchedFile(link)
	require.ErrorIs(t, err, syscall.ELOOP)
	_, err = ReadSchedFile(filepath.Join(dir, "card2.sched"))
	require.ErrorIs(t, err, os.ErrNotExist)
	junk := filepath.Join(dir, "card3.sched")
	require.NoError(t, os.WriteFile(junk, []byte("junk"), 0o644))
	_, err = ReadSchedFile(junk)
	require.ErrorContains(t, err, "schedfile")
}
