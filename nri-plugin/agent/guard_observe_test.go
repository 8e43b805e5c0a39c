// The observer is cgo-only (observe.go): kmod/guest builds this package
// static for its qemu guest without it.

//go:build cgo

package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/guard"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// The status carries the guard's configured state and, while it runs,
// its counters and each container's refusals; without a guard (optional,
// not loaded) the vGPUs have no refusal figure rather than a zero.
func TestGuardStatus(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(1, 4)...)
	g := newFakeGuard()
	n.opts.Guard = g
	n.opts.GuardStatus = &status.Guard{Mode: "required", State: status.GuardOn}
	n.restart(t)
	// The fake cgroup ids are the paths' lengths: names of two lengths.
	for _, c := range []string{"c1", "c22"} {
		_, err := n.create(t, c, map[string]string{"gpuslice.io/gpu-memory": "1Gi"})
		require.NoError(t, err)
		n.cgroup(t, c)
		require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), ctr(c)))
	}
	al, _ := n.opts.Store.Get("c1")
	g.refused[al.CgroupID] = 7
	g.stats = guard.Stats{LostEvents: 2}
	ob := n.agent.Observe(ObserveOptions{Window: time.Hour})
	defer ob.Close()
	s := ob.Sample(time.Now())
	require.NotNil(t, s.Guard)
	assert.Equal(t, "required", s.Guard.Mode)
	assert.Equal(t, status.GuardOn, s.Guard.State)
	require.NotNil(t, s.Guard.LostEvents)
	assert.Equal(t, uint64(2), *s.Guard.LostEvents)
	got := map[string]uint64{}
	for _, v := range s.Cards[0].VGPUs {
		require.NotNil(t, v.GuardRefusals, "%s", v.ContainerID)
		got[v.ContainerID] = *v.GuardRefusals
	}
	assert.Equal(t, map[string]uint64{"c1": 7, "c22": 0}, got)

	n.opts.Guard = nil
	n.opts.GuardStatus = &status.Guard{Mode: "optional", State: status.GuardUnavailable, Reason: "no BPF LSM"}
	n.restart(t)
	ob2 := n.agent.Observe(ObserveOptions{Window: time.Hour})
	defer ob2.Close()
	s = ob2.Sample(time.Now())
	require.NotNil(t, s.Guard)
	assert.Equal(t, status.GuardUnavailable, s.Guard.State)
	assert.Equal(t, "no BPF LSM", s.Guard.Reason)
	assert.Nil(t, s.Guard.LostEvents)
	for _, v := range s.Cards[0].VGPUs {
		assert.Nil(t, v.GuardRefusals)
	}
}
