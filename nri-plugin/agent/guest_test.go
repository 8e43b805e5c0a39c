package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/kmod"
)

// guestNode is an agent in module mode over the guest's gpuslice.ko and
// cgroup v2 hierarchy, and the module's admin client.
func guestNode(t *testing.T, cards ...Card) (*testNode, *kmod.Client) {
	t.Helper()
	testenv.InGuest(t)
	n := newNode(t, EnforceModule, cards...)
	kc, err := kmod.Open("")
	require.NoError(t, err)
	t.Cleanup(func() { kc.Close() })
	n.opts.Kmod = kc
	n.opts.CgroupID = kmod.CgroupID
	n.opts.Layout.CgroupRoot = "/sys/fs/cgroup"
	n.opts.Layout.PreloadHost = filepath.Join(n.dir, "ld.so.preload")
	n.restart(t)
	return n, kc
}

// TestGuestModuleMode runs the agent's module mode against the real
// gpuslice.ko: kmod/guest runs it in its qemu guest (tests/GO), where the
// module is loaded and cgroup v2 is at /sys/fs/cgroup.
func TestGuestModuleMode(t *testing.T) {
	n, kc := guestNode(t, cards16(2, 4)...)

	// The runtime's cgroup for the container (cgroupfs driver).
	dir := "/sys/fs/cgroup/gpuslice-agent/c1"
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Cleanup(func() { os.Remove(dir); os.Remove(filepath.Dir(dir)) })
	c := ctr("c1")
	c.Linux.CgroupsPath = "/gpuslice-agent/c1"

	_, _, err := n.agent.CreateContainer(context.Background(), pod(map[string]string{
		"gpuslice.io/gpu-memory": "256Mi", "gpuslice.io/gpu-cores": "25"}), c)
	require.NoError(t, err)
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), c))

	al, ok := n.opts.Store.Get("c1")
	require.True(t, ok)
	require.Len(t, al.VGPUs, 1)
	v := al.VGPUs[0]
	cg, err := kmod.CgroupID(dir)
	require.NoError(t, err)
	s, err := kc.Stats(uint32(v.Card), uint32(v.KmodID))
	require.NoError(t, err)
	assert.Equal(t, kmod.VGPU{Card: uint32(v.Card), ID: uint32(v.KmodID), CgroupID: cg,
		MemCap: 256 << 20, Quota: 25, Mode: kmod.ModeCompute}, s.Spec)
	card, err := kc.GetCard(uint32(v.Card))
	require.NoError(t, err)
	assert.Equal(t, kmod.PolicyWeighted, card.Policy, "the agent configured the card")

	// A process of the container finds its vGPU by its cgroup.
	pid := []byte(strconv.Itoa(os.Getpid()))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0))
	cl, err := kmod.Open("")
	require.NoError(t, err)
	at, err := cl.Attach(uint32(v.Card))
	require.NoError(t, os.WriteFile("/sys/fs/cgroup/cgroup.procs", pid, 0))
	require.NoError(t, err)
	assert.Equal(t, uint64(256<<20), at.MemCap)
	require.NoError(t, cl.Close())

	// Removal destroys it in the module.
	require.NoError(t, n.agent.RemoveContainer(context.Background(), pod(nil), c))
	_, err = kc.Stats(uint32(v.Card), uint32(v.KmodID))
	assert.ErrorIs(t, err, syscall.ENOENT)
}

// TestGuestClaimOnThePodCgroup binds a DRA claim's vGPU to its pod's
// cgroup in the real gpuslice.ko: processes of two containers of the pod
// find that one vGPU (ATTACH's nearest ancestor), and unpreparing the
// claim destroys it.
func TestGuestClaimOnThePodCgroup(t *testing.T) {
	n, kc := guestNode(t, cards16(1, 1)...)

	// The kubelet's cgroupfs layout: the pod's directory, a container's below.
	podDir := "/sys/fs/cgroup/kubepods/besteffort/podpa"
	ctrs := []string{"c1", "c2"}
	for _, id := range ctrs {
		require.NoError(t, os.MkdirAll(filepath.Join(podDir, id), 0o755))
	}
	t.Cleanup(func() {
		for _, id := range ctrs {
			os.Remove(filepath.Join(podDir, id))
		}
		for d := podDir; d != "/sys/fs/cgroup"; d = filepath.Dir(d) {
			os.Remove(d)
		}
	})
	r := claimReq("u1", 0, 1, 25)
	r.VGPUs[0].MemoryBytes = 256 << 20
	_, err := n.agent.PrepareClaim(r)
	require.NoError(t, err)

	p := claimPod("pa", nil)
	pid := []byte(strconv.Itoa(os.Getpid()))
	var ids []uint32
	for _, id := range ctrs {
		c := claimCtr(id, "pa", "u1")
		_, _, err := n.agent.CreateContainer(context.Background(), p, c)
		require.NoError(t, err)
		require.NoError(t, n.agent.StartContainer(context.Background(), p, c))
		// A process of the container finds the claim's vGPU.
		require.NoError(t, os.WriteFile(filepath.Join(podDir, id, "cgroup.procs"), pid, 0))
		cl, err := kmod.Open("")
		require.NoError(t, err)
		at, err := cl.Attach(0)
		require.NoError(t, os.WriteFile("/sys/fs/cgroup/cgroup.procs", pid, 0))
		require.NoError(t, err, "container %s", id)
		assert.Equal(t, uint64(256<<20), at.MemCap)
		ids = append(ids, at.ID)
		require.NoError(t, cl.Close())
	}
	assert.Equal(t, ids[0], ids[1], "one vGPU for the pod's containers")
	al, _ := n.agent.Claim("u1")
	pcg, err := kmod.CgroupID(podDir)
	require.NoError(t, err)
	s, err := kc.Stats(0, uint32(al.VGPUs[0].KmodID))
	require.NoError(t, err)
	assert.Equal(t, pcg, s.Spec.CgroupID, "bound to the pod's cgroup")

	n.agent.UnprepareClaim("u1")
	_, err = kc.Stats(0, uint32(al.VGPUs[0].KmodID))
	assert.ErrorIs(t, err, syscall.ENOENT)
}
