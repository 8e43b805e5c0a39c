//go:build cgo

package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/gpu"
	"github.com/gpuslice/gpuslice/pkg/kmod"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// A process belongs to the container of the deepest cgroup recorded at or
// above one of its cgroups, in any hierarchy.
func TestOwner(t *testing.T) {
	allocs := []state.Allocation{{Container: "a", CgroupPath: "/kubepods/pod1/a"},
		{Container: "b", CgroupPath: "/kubepods/pod1/ab"}, {Container: "none"},
		{Container: "pod", CgroupPath: "/kubepods/pod1"}}
	for _, tc := range []struct {
		paths []string
		want  string
	}{
		{[]string{"/kubepods/pod1/a"}, "a"},
		{[]string{"/kubepods/pod1/a/sub/deeper"}, "a"},
		{[]string{"/kubepods/pod1/ab"}, "b"},
		{[]string{"/kubepods/pod1/abc"}, "pod"},
		{[]string{"/", "/kubepods/pod1/ab"}, "b"},
		{[]string{"/system.slice"}, ""},
		{[]string{"/kubepods/pod10"}, ""},
		{nil, ""},
	} {
		assert.Equal(t, tc.want, owner(tc.paths, allocs), "%q", tc.paths)
	}
}

// reconciling is a module-mode node with one container in this test's own
// cgroup (so this process is one of its processes) and an observer whose
// NVML lists what procs says.
func reconciling(t *testing.T) (*testNode, *statsKmod, *Observer, *[]gpu.ProcessMemory) {
	t.Helper()
	n := newNode(t, EnforceModule, cards16(1, 0)...)
	fk := &statsKmod{fakeKmod: n.opts.Kmod.(*fakeKmod), stats: map[[2]uint32]kmod.VGPUStats{}}
	n.opts.Kmod = fk
	n.restart(t)
	own := ownCgroup(t)
	require.NoError(t, os.MkdirAll(filepath.Join(n.opts.Layout.CgroupRoot, own), 0o755))
	c := ctr("c1")
	c.Linux = &api.LinuxContainer{CgroupsPath: own}
	_, _, err := n.agent.CreateContainer(context.Background(), pod(map[string]string{"gpuslice.io/gpu-memory": "2Gi"}), c)
	require.NoError(t, err)
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), c))
	procs := &[]gpu.ProcessMemory{}
	ob := &Observer{a: n.agent, o: ObserveOptions{Cards: samplerFunc(func() []gpu.CardSample {
		return []gpu.CardSample{{Index: 0, Processes: *procs}}
	})}, prev: map[busyKey]busySample{}, problems: map[string]bool{}}
	return n, fk, ob, procs
}

type samplerFunc func() []gpu.CardSample

func (f samplerFunc) Sample() []gpu.CardSample { return f() }

// Module mode: the driver's bytes of the container's processes less its
// charges go to gpuslice.ko; other processes are not the container's; an
// unknown list or unknown charges leave the module's figure as it was.
func TestObserveReconcileModule(t *testing.T) {
	_, fk, ob, procs := reconciling(t)
	me := uint32(os.Getpid())
	fk.set(0, 0, kmod.VGPUStats{MemUsed: 100 << 20})
	*procs = []gpu.ProcessMemory{{PID: me, Bytes: 150 << 20}, {PID: 1, Bytes: 1 << 30}}
	v := onlyVGPU(t, ob.Sample(time.Unix(1, 0)), 0)
	assert.Equal(t, uint64(150<<20), *v.MemoryDriverBytes, "pid 1 is not in the container's cgroup")
	assert.Equal(t, uint64(50<<20), *v.MemoryUnseenBytes)
	got, ok := fk.unseenOf(0, 0)
	assert.True(t, ok)
	assert.Equal(t, uint64(50<<20), got)

	// Charged more than the driver holds (the shim's estimates): none.
	*procs = []gpu.ProcessMemory{{PID: me, Bytes: 80 << 20}}
	v = onlyVGPU(t, ob.Sample(time.Unix(2, 0)), 0)
	assert.Equal(t, uint64(0), *v.MemoryUnseenBytes)
	got, _ = fk.unseenOf(0, 0)
	assert.Zero(t, got)

	// The charges unknown: the driver's figure, but nothing to compare.
	*procs = []gpu.ProcessMemory{{PID: me, Bytes: 300 << 20}}
	fk.mu.Lock()
	fk.err = &kmod.Error{Op: "read vGPU 0 on card 0", Errno: syscall.EIO}
	fk.mu.Unlock()
	v = onlyVGPU(t, ob.Sample(time.Unix(3, 0)), 0)
	assert.Equal(t, uint64(300<<20), *v.MemoryDriverBytes)
	assert.Nil(t, v.MemoryUnseenBytes)
	got, _ = fk.unseenOf(0, 0)
	assert.Zero(t, got, "left as it was")
}

// The driver's figure passing the cap is logged once, and once when it is
// back within it.
func TestObserveReconcileOverCap(t *testing.T) {
	n, fk, ob, procs := reconciling(t)
	logs := &lockedBuffer{}
	n.opts.Log = newLogger(logs)
	n.restart(t)
	ob.a = n.agent
	fk.set(0, 0, kmod.VGPUStats{MemUsed: 1 << 30})
	*procs = []gpu.ProcessMemory{{PID: uint32(os.Getpid()), Bytes: 3 << 30}}
	for i := range 3 {
		v := onlyVGPU(t, ob.Sample(time.Unix(int64(i), 0)), 0)
		assert.Equal(t, uint64(2<<30), *v.MemoryUnseenBytes)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "the driver reports more than the cap"), "%s", logs)
	*procs = []gpu.ProcessMemory{}
	v := onlyVGPU(t, ob.Sample(time.Unix(9, 0)), 0)
	assert.Equal(t, uint64(0), *v.MemoryDriverBytes, "an empty list is known: nothing")
	assert.Equal(t, 1, strings.Count(logs.String(), "within the cap again"), "%s", logs)
}

// A module without the call (ENOTTY) is a problem that says what it means.
func TestObserveReconcileOldModule(t *testing.T) {
	_, fk, ob, procs := reconciling(t)
	*procs = []gpu.ProcessMemory{{PID: uint32(os.Getpid()), Bytes: 1 << 20}}
	ob.a.opts.Kmod = oldKmod{fk}
	s := ob.Sample(time.Unix(1, 0))
	require.Len(t, s.Problems, 1)
	assert.Contains(t, s.Problems[0], "unseen bytes of container c1 on card 0")
	assert.Contains(t, s.Problems[0], "allocations past the cap are not refused")
}

type oldKmod struct{ *statsKmod }

func (oldKmod) SetUnseen(card, id uint32, bytes uint64) error {
	return &kmod.Error{Op: "set the unseen bytes", Errno: syscall.ENOTTY}
}

func newLogger(w *lockedBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// The container's cgroup is recorded at its creation, and filled in at
// Synchronize for an allocation an older agent recorded without it.
func TestCgroupRecorded(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 0)...)
	_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi"})
	require.NoError(t, err)
	al, _ := n.opts.Store.Get("c1")
	assert.Equal(t, "/k8s.io/c1", al.CgroupPath)

	al.CgroupPath = ""
	require.NoError(t, n.opts.Store.Put(al))
	_, err = n.agent.Synchronize(context.Background(), nil, []*api.Container{ctr("c1")})
	require.NoError(t, err)
	al, _ = n.opts.Store.Get("c1")
	assert.Equal(t, "/k8s.io/c1", al.CgroupPath)
}
