package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/quota"
	"github.com/gpuslice/gpuslice/pkg/simgpu"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// claimReq is a claim of one vGPU on card with mem GiB and cores.
func claimReq(uid string, card int, mem uint64, cores uint32) ClaimRequest {
	return ClaimRequest{Claim: state.Claim{UID: uid, Namespace: "ns", Name: "claim-" + uid, Pool: "node"},
		Pod: "pod-pa", PodUID: "pa",
		VGPUs: []ClaimVGPU{{Card: card, MemoryBytes: mem * gib, Cores: cores, Request: "gpu", ShareID: "share-" + uid}}}
}

// withPreload gives the node the preload file claims need.
func withPreload(t *testing.T, n *testNode) {
	n.opts.Layout.PreloadHost = filepath.Join(n.dir, "ld.so.preload")
	n.restart(t)
}

func TestPrepareClaimFileMode(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(2, 1)...)
	withPreload(t, n)
	changes := 0
	n.agent.OnChange(func() { changes++ })

	al, err := n.agent.PrepareClaim(claimReq("u1", 1, 10, 30))
	require.NoError(t, err)
	assert.Equal(t, "claim-u1", al.Container)
	assert.Equal(t, &state.Claim{UID: "u1", Namespace: "ns", Name: "claim-u1", Pool: "node"}, al.Claim)
	assert.Equal(t, []state.VGPU{{Card: 1, MemoryBytes: 10 * gib, Cores: 30, Mode: int(placement.Compute),
		KmodID: -1, Request: "gpu", ShareID: "share-u1"}}, al.VGPUs)
	assert.DirExists(t, al.LedgerDir)
	assert.Equal(t, 1, changes)
	assert.Equal(t, map[int]placement.Mode{0: placement.None, 1: placement.Compute}, n.agent.CardModes())

	in, err := n.agent.ClaimInjection(al)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"GPU_IDX": "1", "GPU_CONTAINER_MEM": "10240", "GPU_CONTAINER_QUOTA_PERCENT": "30",
		"GPU_POLICY": "1", "GPU_CONTAINER_PRIORITY": "0", "GPUSLICE_ENFORCE": "file",
		"GPUSLICE_LEDGER_DIR": "/run/gpuslice/ledger", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
		"GPUSLICE_SCHED_DIR": "/run/gpuslice/sched", "GPUSLICE_VGPU": "claim-u1",
		"GPUSLICE_MAX_INST": "20", "GPUSLICE_SLICE_MS": "5", "GPUSLICE_RECLAIM_MS": "250",
		"NVIDIA_VISIBLE_DEVICES": simgpu.UUID(1), "GPUSLICE_CARD_UUIDS": simgpu.UUID(1),
		"GPUSLICE_CLAIM": "u1", "GPUSLICE_CLAIM_u1": "u1",
	}, in.Env, "LD_PRELOAD is the NRI side's: CDI would replace the image's")
	var paths, dests []string
	for _, d := range in.Devices {
		paths = append(paths, d.Path)
	}
	for _, m := range in.Mounts {
		dests = append(dests, m.Destination)
	}
	assert.Equal(t, []string{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}, paths)
	assert.Equal(t, []string{"/usr/local/gpuslice/libgpuslice.so", "/etc/ld.so.preload",
		"/run/gpuslice/ledger", "/run/gpuslice/sched"}, dests)
	assert.Equal(t, []string{"bind", "ro", "nosuid", "nodev"}, in.Mounts[0].Options)
	assert.Equal(t, al.LedgerDir, in.Mounts[2].Source)

	n.agent.UnprepareClaim("u1")
	assert.NoDirExists(t, al.LedgerDir)
	assert.Empty(t, n.opts.Store.All())
	assert.Equal(t, 2, changes)
	n.agent.UnprepareClaim("u1") // again: nothing to do, no error
	assert.Equal(t, placement.None, n.agent.CardModes()[1])
}

// A claim prepared twice is prepared once, and after a restart the
// record answers, its ledger directory made again when /run lost it.
func TestPrepareClaimIsIdempotent(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	withPreload(t, n)
	first, err := n.agent.PrepareClaim(claimReq("u1", 0, 10, 30))
	require.NoError(t, err)
	again, err := n.agent.PrepareClaim(claimReq("u1", 0, 10, 30))
	require.NoError(t, err)
	assert.Equal(t, first, again)
	assert.Len(t, n.opts.Store.All(), 1, "10 GiB on the card once: a second record would not fit a third")

	require.NoError(t, os.RemoveAll(first.LedgerDir))
	n.restart(t)
	after, err := n.agent.PrepareClaim(claimReq("u1", 0, 10, 30))
	require.NoError(t, err)
	assert.Equal(t, first, after)
	assert.DirExists(t, first.LedgerDir)
	_, err = n.agent.PrepareClaim(claimReq("u2", 0, 7, 30))
	require.Error(t, err, "6 GiB are left")
}

// Every refusal names the claim and the field, records nothing and
// leaves no ledger directory; the placement's reason is there to tell.
func TestPrepareClaimRefusals(t *testing.T) {
	memoryOnly := claimReq("m", 0, 1, 0)
	for _, tc := range []struct {
		name   string
		policy int
		before []ClaimRequest // prepared first
		req    ClaimRequest
		reason placement.Reason // 0: not placement's
		want   string
	}{
		{name: "modes race for a card", policy: 1, before: []ClaimRequest{claimReq("c", 0, 1, 30)},
			req: memoryOnly, reason: placement.ModeMismatch,
			want: `claim ns/claim-m: consumedCapacity.cores="0": card 0 runs compute-isolated vGPUs (one isolation mode per card)`},
		{name: "memory left", policy: 1, before: []ClaimRequest{claimReq("c", 0, 10, 30)},
			req: claimReq("d", 0, 10, 30), reason: placement.NoMemory,
			want: `claim ns/claim-d: consumedCapacity.memory="10Gi": card 0 has 6144 MiB of 16384 MiB free`},
		{name: "no such card", policy: 1, req: claimReq("x", 3, 1, 0), reason: placement.NoSuchCard,
			want: `claim ns/claim-x: device="gpu-3": no card 3 on this node (card 0)`},
		{name: "memory mode with cores", policy: 1, req: withMode(claimReq("x", 0, 1, 30), placement.Memory),
			want: `claim ns/claim-x: parameters.mode="memory" with consumedCapacity.cores="30": a memory-only vGPU has no compute quota; drop the cores or the mode`},
		{name: "quota-0 compute off hybrid", policy: 4, req: withMode(claimReq("x", 0, 1, 0), placement.Compute),
			want: `claim ns/claim-x: parameters.mode="compute" with consumedCapacity.cores="0": a compute vGPU of quota 0 is the hybrid policy's (5); card 0 runs policy 4 (weighted preemptive): ask for cores, or drop the mode`},
		{name: "memory mode on hybrid", policy: 5, req: withMode(claimReq("x", 0, 1, 0), placement.Memory),
			want: `claim ns/claim-x: parameters.mode="memory" with consumedCapacity.cores="0": card 0 runs policy 5 (hybrid), whose vGPUs are all compute vGPUs; drop the mode`},
		{name: "high priority without cores", policy: 1, req: withPriority(claimReq("x", 0, 1, 0)), reason: placement.Invalid,
			want: `claim ns/claim-x: parameters.priority="high": ` + quota.HighNeedsCores},
		{name: "high priority under hybrid", policy: 5, req: withPriority(claimReq("x", 0, 1, 30)), reason: placement.HighPriority,
			want: `claim ns/claim-x: parameters.priority="high": card 0 runs policy 5 (hybrid), which has no high priority`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, EnforceFile, cards16(1, tc.policy)...)
			withPreload(t, n)
			for _, b := range tc.before {
				_, err := n.agent.PrepareClaim(b)
				require.NoError(t, err)
			}
			_, err := n.agent.PrepareClaim(tc.req)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
			var pe *placement.Error
			if tc.reason != 0 {
				require.True(t, errors.As(err, &pe), "wraps placement's error")
				assert.Equal(t, tc.reason, pe.Reason)
			} else {
				assert.False(t, errors.As(err, &pe))
			}
			_, ok := n.agent.Claim(tc.req.Claim.UID)
			assert.False(t, ok)
			entries, _ := os.ReadDir(n.opts.Layout.LedgerRoot)
			assert.Len(t, entries, len(tc.before), "no ledger directory left")
		})
	}
}

func withMode(r ClaimRequest, m placement.Mode) ClaimRequest {
	r.VGPUs[0].Mode = m
	return r
}

func withPriority(r ClaimRequest) ClaimRequest {
	r.Priority = quota.High
	return r
}

// A claim of two cards gets both, in its order; the same card twice is
// refused.
func TestPrepareClaimOfTwoCards(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(2, 1)...)
	withPreload(t, n)
	req := claimReq("u", 1, 2, 10)
	req.VGPUs = append(req.VGPUs, ClaimVGPU{Card: 0, MemoryBytes: 4 * gib, Request: "second"})
	al, err := n.agent.PrepareClaim(req)
	require.NoError(t, err)
	in, err := n.agent.ClaimInjection(al)
	require.NoError(t, err)
	assert.Equal(t, "1,0", in.Env["GPU_IDX"])
	assert.Equal(t, "2048,4096", in.Env["GPU_CONTAINER_MEM"])

	twice := claimReq("v", 0, 1, 0)
	twice.VGPUs = append(twice.VGPUs, twice.VGPUs[0])
	_, err = n.agent.PrepareClaim(twice)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `device="gpu-0,gpu-0"`)
}

// Claims need the preload file: without it their containers' processes
// could run without the shim.
func TestClaimInjectionNeedsThePreloadFile(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	al, err := n.agent.PrepareClaim(claimReq("u", 0, 1, 0))
	require.NoError(t, err)
	_, err = n.agent.ClaimInjection(al)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "preload")
}
