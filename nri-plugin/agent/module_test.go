package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/kmod"
)

// fakeKmod is gpuslice.ko's admin side as the agent sees it: cards, vGPUs
// with ids per card, the module's refusals for a taken cgroup.
type fakeKmod struct {
	mu     sync.Mutex
	cards  map[uint32]kmod.Card
	vgpus  map[[2]uint32]kmod.VGPU
	nextID map[uint32]uint32
	unseen map[[2]uint32]uint64
}

func newFakeKmod() *fakeKmod {
	return &fakeKmod{cards: map[uint32]kmod.Card{}, vgpus: map[[2]uint32]kmod.VGPU{},
		nextID: map[uint32]uint32{}, unseen: map[[2]uint32]uint64{}}
}

func (f *fakeKmod) SetCard(c kmod.Card) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.cards[c.Card]; ok && old != c {
		for k := range f.vgpus {
			if k[0] == c.Card {
				return &kmod.Error{Op: "configure card", Errno: syscall.EBUSY}
			}
		}
	}
	f.cards[c.Card] = c
	return nil
}

func (f *fakeKmod) CreateVGPU(v kmod.VGPU) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cards[v.Card]; !ok {
		return 0, &kmod.Error{Op: "create vGPU", Errno: syscall.ENODEV}
	}
	id := f.nextID[v.Card]
	f.nextID[v.Card]++
	v.ID = id
	f.vgpus[[2]uint32{v.Card, id}] = v
	return id, nil
}

func (f *fakeKmod) DestroyVGPU(card, id uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vgpus[[2]uint32{card, id}]; !ok {
		return &kmod.Error{Op: "destroy vGPU", Errno: syscall.ENOENT}
	}
	delete(f.vgpus, [2]uint32{card, id})
	return nil
}

func (f *fakeKmod) Stats(card, id uint32) (kmod.VGPUStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vgpus[[2]uint32{card, id}]
	if !ok {
		return kmod.VGPUStats{}, &kmod.Error{Op: "read vGPU", Errno: syscall.ENOENT}
	}
	return kmod.VGPUStats{Card: card, ID: id, Spec: v}, nil
}

func (f *fakeKmod) SetUnseen(card, id uint32, bytes uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vgpus[[2]uint32{card, id}]; !ok {
		return &kmod.Error{Op: "set unseen", Errno: syscall.ENOENT}
	}
	f.unseen[[2]uint32{card, id}] = bytes
	return nil
}

func (f *fakeKmod) unseenOf(card, id uint32) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.unseen[[2]uint32{card, id}]
	return b, ok
}

func (f *fakeKmod) list() []kmod.VGPU {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []kmod.VGPU
	for _, v := range f.vgpus {
		out = append(out, v)
	}
	return out
}

func (n *testNode) cgroup(t *testing.T, id string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(n.opts.Layout.CgroupRoot, "k8s.io", id), 0o755))
}

func TestModuleMode(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(2, 4)...)
	fk := n.opts.Kmod.(*fakeKmod)
	assert.Len(t, fk.cards, 2, "every card configured at start")
	assert.Equal(t, kmod.Card{Card: 1, Policy: 4, MaxInst: 20, SliceNs: 5e6, ReclaimNs: 250e6}, fk.cards[1])

	adj, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "2Gi",
		"gpuslice.io/gpu-cores": "25", "gpuslice.io/gpu-priority": "high"})
	require.NoError(t, err)
	e := env(adj)
	assert.Equal(t, "module", e["GPUSLICE_ENFORCE"])
	assert.NotContains(t, e, "GPUSLICE_LEDGER_DIR")
	assert.Equal(t, "1", e["GPU_CONTAINER_PRIORITY"])
	assert.Contains(t, devices(adj), "/dev/gpuslice")
	assert.NotContains(t, mounts(adj), "/run/gpuslice/ledger")
	assert.Empty(t, fk.list(), "nothing in the module before the container starts")

	// At start the cgroup exists: the vGPU is created bound to it.
	n.cgroup(t, "c1")
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), ctr("c1")))
	vs := fk.list()
	require.Len(t, vs, 1)
	dir := filepath.Join(n.opts.Layout.CgroupRoot, "k8s.io", "c1")
	assert.Equal(t, kmod.VGPU{Card: 0, ID: 0, CgroupID: uint64(len(dir)), MemCap: 2 * gib,
		Quota: 25, Priority: 1, Mode: kmod.ModeCompute}, vs[0])
	al, _ := n.opts.Store.Get("c1")
	assert.Equal(t, 0, al.VGPUs[0].KmodID)

	// A restarted agent keeps the module's record and destroys it on removal.
	n.restart(t)
	require.NoError(t, n.agent.RemoveContainer(context.Background(), pod(nil), ctr("c1")))
	assert.Empty(t, fk.list())
	assert.Empty(t, n.opts.Store.All())
}

// A start that cannot bind fails (nothing runs unisolated) and leaves no
// half-created vGPUs behind.
func TestModuleStartFailures(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(2, 1)...)
	fk := n.opts.Kmod.(*fakeKmod)
	ann := map[string]string{"gpuslice.io/gpu-memory": "1Gi,1Gi", "gpuslice.io/gpu-cores": "10"}
	_, err := n.create(t, "c1", ann)
	require.NoError(t, err)

	err = n.agent.StartContainer(context.Background(), pod(nil), ctr("c1"))
	require.Error(t, err, "no cgroup")
	assert.Contains(t, err.Error(), "cgroup")

	n.cgroup(t, "c1")
	// The second card's vGPU fails: the first is destroyed again.
	failSecond := &secondFails{fakeKmod: fk}
	n.opts.Kmod = failSecond
	n.restart(t)
	err = n.agent.StartContainer(context.Background(), pod(nil), ctr("c1"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "other isolation mode")
	assert.Empty(t, fk.list())
	al, _ := n.opts.Store.Get("c1")
	for _, v := range al.VGPUs {
		assert.Equal(t, -1, v.KmodID)
	}
}

type secondFails struct {
	*fakeKmod
	n int
}

func (s *secondFails) CreateVGPU(v kmod.VGPU) (uint32, error) {
	if s.n++; s.n == 2 {
		return 0, fmt.Errorf("create vGPU on card %d: %w", v.Card, &kmod.Error{Op: "create", Errno: syscall.EXDEV})
	}
	return s.fakeKmod.CreateVGPU(v)
}

func TestCgroupDir(t *testing.T) {
	tests := []struct{ path, want, err string }{
		{"/k8s.io/abc", "/r/k8s.io/abc", ""},
		{"kubepods/besteffort/pod1/abc", "/r/kubepods/besteffort/pod1/abc", ""},
		{"system.slice:cri-containerd:abc", "/r/system.slice/cri-containerd-abc.scope", ""},
		{"kubepods-besteffort-pod1.slice:cri-containerd:abc",
			"/r/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-abc.scope", ""},
		{"-.slice::abc", "/r/abc.scope", ""},
		{"", "", "no cgroups path"},
		{"a:b", "", "slice:prefix:name"},
		{"bad:cri:abc", "", "not a systemd slice"},
		{"a--b.slice:cri:abc", "", "not a systemd slice"},
	}
	for _, tc := range tests {
		got, err := cgroupDir("/r", tc.path)
		if tc.err != "" {
			require.Error(t, err, tc.path)
			assert.Contains(t, err.Error(), tc.err)
			continue
		}
		require.NoError(t, err, tc.path)
		assert.Equal(t, tc.want, got, tc.path)
	}
}

// After a restart, Synchronize binds a container that started while the
// agent was away, and destroys the module's vGPUs no allocation records
// (an agent killed between creating one and recording it).
func TestSynchronizeRepairsTheModule(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(1, 1)...)
	fk := n.opts.Kmod.(*fakeKmod)
	_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "10"})
	require.NoError(t, err)
	n.cgroup(t, "c1")
	stray, err := fk.CreateVGPU(kmod.VGPU{Card: 0, CgroupID: 99, MemCap: 1, Quota: 5, Mode: kmod.ModeCompute})
	require.NoError(t, err)

	n.restart(t)
	running := ctr("c1")
	running.State = api.ContainerState_CONTAINER_RUNNING
	_, err = n.agent.Synchronize(context.Background(), nil, []*api.Container{running})
	require.NoError(t, err)
	vs := fk.list()
	require.Len(t, vs, 1, "the stray vGPU is gone, c1's is there")
	assert.NotEqual(t, stray, vs[0].ID)
	assert.Equal(t, uint64(1<<30), vs[0].MemCap)
	al, _ := n.opts.Store.Get("c1")
	assert.Equal(t, int(vs[0].ID), al.VGPUs[0].KmodID)
}
