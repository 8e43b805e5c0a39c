//go:build cgo

package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/status"
)

// A claim's vGPU in the status (and so the metrics): the claim, and the
// pod and containers its NRI side learnt; the driver's processes in any
// container of the pod are the claim's.
func TestObserveClaim(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	withPreload(t, n)
	_, err := n.agent.PrepareClaim(claimReq("u1", 0, 4, 30))
	require.NoError(t, err)
	for _, id := range []string{"c1", "c2"} {
		_, err = n.createIn(t, claimPod("pa", nil), claimCtr(id, "pa", "u1"))
		require.NoError(t, err)
	}
	ob := &Observer{a: n.agent, prev: map[busyKey]busySample{}, problems: map[string]bool{}}
	v := onlyVGPU(t, ob.Sample(time.Unix(1, 0)), 0)
	assert.Equal(t, status.VGPU{ID: -1, Namespace: "ns", Pod: "pod-pa", Container: "ctr-c1,ctr-c2",
		ContainerID: "claim-u1", Claim: "ns/claim-u1", Mode: "compute", QuotaPercent: 30,
		MemoryCapBytes: 4 * gib, MemoryUsedBytes: ptrTo(uint64(0)), Processes: ptrTo(0)}, v)

	all := n.opts.Store.All()
	assert.Equal(t, "claim-u1", owner([]string{"/kubepods/besteffort/podpa/c2"}, all))
	assert.Equal(t, "", owner([]string{"/kubepods/besteffort/podpb/c9"}, all), "another pod's")
}
