package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/kmod"
)

// claimPod is pod uid of the kubelet's cgroupfs layout, with annotations.
func claimPod(uid string, ann map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "sb-" + uid, Name: "pod-" + uid, Namespace: "ns", Uid: uid, Annotations: ann}
}

// claimCtr is container id of pod uid, created with the CDI devices of
// claims (their variables) over an image preloading /lib/libimage.so.
func claimCtr(id, uid string, claims ...string) *api.Container {
	c := &api.Container{Id: id, Name: "ctr-" + id, PodSandboxId: "sb-" + uid,
		Env:   []string{"PATH=/bin", "LD_PRELOAD=/lib/libimage.so"},
		Linux: &api.LinuxContainer{CgroupsPath: "/kubepods/besteffort/pod" + uid + "/" + id}}
	for _, cl := range claims {
		c.Env = append(c.Env, EnvClaim+"="+cl, claimEnvKey(cl)+"="+cl)
	}
	return c
}

func (n *testNode) createIn(t *testing.T, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, error) {
	t.Helper()
	adj, upd, err := n.agent.CreateContainer(context.Background(), pod, c)
	assert.Nil(t, upd)
	return adj, err
}

// A claim's container gets the shim first in the image's LD_PRELOAD and
// nothing else from NRI (its CDI device brought the rest); the claim
// learns its pod, cgroup and containers, and outlives them.
func TestClaimContainer(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	withPreload(t, n)
	_, err := n.agent.PrepareClaim(claimReq("u1", 0, 4, 30))
	require.NoError(t, err)

	p := claimPod("pa", nil)
	adj, err := n.createIn(t, p, claimCtr("c1", "pa", "u1"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"LD_PRELOAD": "/usr/local/gpuslice/libgpuslice.so:/lib/libimage.so"}, env(adj))
	assert.Empty(t, adj.GetLinux().GetDevices())
	assert.Empty(t, adj.GetMounts())
	_, err = n.createIn(t, p, claimCtr("c2", "pa", "u1"))
	require.NoError(t, err)

	al, _ := n.agent.Claim("u1")
	assert.Equal(t, "pa", al.PodUID)
	assert.Equal(t, "pod-pa", al.Pod)
	assert.Equal(t, "ctr-c1,ctr-c2", al.Name)
	assert.Equal(t, "/kubepods/besteffort/podpa", al.CgroupPath, "the pod's cgroup: its containers' processes are the claim's")

	// Its containers' ends, and a Synchronize that finds none, keep it:
	// the kubelet unprepares it.
	_, err = n.agent.StopContainer(context.Background(), p, claimCtr("c1", "pa", "u1"))
	require.NoError(t, err)
	require.NoError(t, n.agent.RemoveContainer(context.Background(), p, claimCtr("c2", "pa", "u1")))
	n.restart(t)
	_, err = n.agent.Synchronize(context.Background(), nil, nil)
	require.NoError(t, err)
	_, ok := n.agent.Claim("u1")
	assert.True(t, ok)
}

// Every way a claim's container could get a vGPU twice, or get another
// pod's, is refused at its creation with the reason.
func TestClaimContainerRefusals(t *testing.T) {
	mem := map[string]string{"gpuslice.io/gpu-memory": "1Gi"}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, n *testNode) // after claims u1 and u2 are prepared
		pod   *api.PodSandbox
		ctr   *api.Container
		want  string
	}{
		{name: "annotations on the pod", pod: claimPod("pa", mem), ctr: claimCtr("c1", "pa", "u1"),
			want: "pod ns/pod-pa asks for vGPUs both by gpuslice.io/gpu-* annotations and by the DRA claim ns/claim-u1"},
		{name: "annotations for another container", pod: claimPod("pa", map[string]string{"gpuslice.io/gpu-memory/container.x": "1Gi"}),
			ctr: claimCtr("c1", "pa", "u1"), want: "both by gpuslice.io/gpu-* annotations"},
		{name: "an annotated container of the pod first", setup: func(t *testing.T, n *testNode) {
			_, err := n.createIn(t, claimPod("pa", map[string]string{"gpuslice.io/gpu-memory/container.ctr-a": "1Gi"}), claimCtr("a", "pa"))
			require.NoError(t, err)
		}, pod: claimPod("pa", nil), ctr: claimCtr("c1", "pa", "u1"), want: "both by gpuslice.io/gpu-* annotations"},
		{name: "two claims", pod: claimPod("pa", nil), ctr: claimCtr("c1", "pa", "u1", "u2"),
			want: "the container uses 2 gpuslice claims (u1, u2): one claim per container"},
		{name: "a claim not prepared", pod: claimPod("pa", nil), ctr: claimCtr("c1", "pa", "nope"),
			want: `GPUSLICE_CLAIM="nope" names no claim prepared on this node`},
		{name: "another pod's claim", setup: func(t *testing.T, n *testNode) {
			_, err := n.createIn(t, claimPod("pa", nil), claimCtr("a", "pa", "u1"))
			require.NoError(t, err)
		}, pod: claimPod("pb", nil), ctr: claimCtr("c1", "pb", "u1"),
			want: "claim ns/claim-u1: serves pod ns/pod-pa already: a gpuslice claim serves the containers of one pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, EnforceFile, cards16(2, 1)...)
			withPreload(t, n)
			for i, uid := range []string{"u1", "u2"} {
				r := claimReq(uid, i, 1, 0)
				r.Pod, r.PodUID = "", "" // learnt from the first container
				_, err := n.agent.PrepareClaim(r)
				require.NoError(t, err)
			}
			if tc.setup != nil {
				tc.setup(t, n)
			}
			_, err := n.createIn(t, tc.pod, tc.ctr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A pod with a claim's container cannot then get a vGPU by annotations.
func TestAnnotationsAfterAClaim(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	withPreload(t, n)
	_, err := n.agent.PrepareClaim(claimReq("u1", 0, 1, 0))
	require.NoError(t, err)
	_, err = n.createIn(t, claimPod("pa", nil), claimCtr("c1", "pa", "u1"))
	require.NoError(t, err)
	_, err = n.createIn(t, claimPod("pa", map[string]string{"gpuslice.io/gpu-memory/container.ctr-c2": "1Gi"}), claimCtr("c2", "pa"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "both by gpuslice.io/gpu-* annotations and by the DRA claim ns/claim-u1")
	_, ok := n.opts.Store.Get("c2")
	assert.False(t, ok)
}

// Module mode: the claim's vGPU is created at its first container's start,
// bound to the pod's cgroup, shared by the pod's next containers, found
// again by Synchronize after a reboot emptied the module, and destroyed
// when the claim is unprepared.
func TestClaimModuleMode(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(1, 1)...)
	withPreload(t, n)
	fk := n.opts.Kmod.(*fakeKmod)
	_, err := n.agent.PrepareClaim(claimReq("u1", 0, 4, 30))
	require.NoError(t, err)
	p := claimPod("pa", nil)
	c1 := claimCtr("c1", "pa", "u1")
	_, err = n.createIn(t, p, c1)
	require.NoError(t, err)
	assert.Empty(t, fk.list(), "nothing in the module before a container starts")

	err = n.agent.StartContainer(context.Background(), p, c1)
	require.Error(t, err, "no pod cgroup yet: the start fails")
	podDir := filepath.Join(n.opts.Layout.CgroupRoot, "kubepods", "besteffort", "podpa")
	require.NoError(t, os.MkdirAll(podDir, 0o755))
	require.NoError(t, n.agent.StartContainer(context.Background(), p, c1))
	want := kmod.VGPU{Card: 0, ID: 0, CgroupID: uint64(len(podDir)), MemCap: 4 * gib, Quota: 30, Mode: kmod.ModeCompute}
	assert.Equal(t, []kmod.VGPU{want}, fk.list())

	c2 := claimCtr("c2", "pa", "u1")
	_, err = n.createIn(t, p, c2)
	require.NoError(t, err)
	require.NoError(t, n.agent.StartContainer(context.Background(), p, c2))
	assert.Len(t, fk.list(), 1, "the pod's containers share the claim's vGPU")

	// A reboot: the module is empty, the record says vGPU 0. Synchronize
	// creates it again for the running container.
	n.opts.Kmod = newFakeKmod()
	n.restart(t)
	fk = n.opts.Kmod.(*fakeKmod)
	_, _ = fk.CreateVGPU(kmod.VGPU{Card: 0, CgroupID: 7}) // someone else's, at id 0
	running := claimCtr("c2", "pa", "u1")
	running.State = api.ContainerState_CONTAINER_RUNNING
	_, err = n.agent.Synchronize(context.Background(), nil, []*api.Container{running})
	require.NoError(t, err)
	vs := fk.list()
	require.Len(t, vs, 1, "the stray one destroyed, the claim's made again")
	assert.Equal(t, uint64(len(podDir)), vs[0].CgroupID)
	al, _ := n.agent.Claim("u1")
	assert.Equal(t, int(vs[0].ID), al.VGPUs[0].KmodID)

	n.agent.UnprepareClaim("u1")
	assert.Empty(t, fk.list())
	assert.Empty(t, n.opts.Store.All())
}

// Module mode: two claims of one pod on one card would both be the pod's
// cgroup's; their containers are refused with the reason (in file mode
// each claim has its own ledger: both run).
func TestClaimsOfAPodOnOneCard(t *testing.T) {
	for _, enforce := range []string{EnforceModule, EnforceFile} {
		n := newNode(t, enforce, cards16(1, 1)...)
		withPreload(t, n)
		for _, uid := range []string{"u1", "u2"} {
			_, err := n.agent.PrepareClaim(claimReq(uid, 0, 1, 10)) // both reserved for pod pa
			require.NoError(t, err)
		}
		p := claimPod("pa", nil)
		_, err := n.createIn(t, p, claimCtr("c1", "pa", "u1"))
		if enforce == EnforceFile {
			require.NoError(t, err)
			_, err = n.createIn(t, p, claimCtr("c2", "pa", "u2"))
			require.NoError(t, err)
			continue
		}
		require.Error(t, err)
		assert.Contains(t, err.Error(), "claim ns/claim-u1: pod ns/pod-pa has claim ns/claim-u2 on card 0 too: with gpuslice.ko a pod gets one vGPU per card")
	}
}
