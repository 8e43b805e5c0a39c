package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/config"
)

// An agent that cannot be built stays registered and refuses the
// containers that ask for a vGPU, saying why, and leaves the others alone:
// exiting would let the runtime create them without their isolation.
func TestBrokenAgentRefuses(t *testing.T) {
	cfg := config.Default()
	zero := 0
	cfg.SimulatedCards = []config.SimulatedCard{{Index: &zero, MemoryMiB: 16384}}
	cfg.StateDir, cfg.LedgerDir = t.TempDir(), t.TempDir()
	cfg.Enforcement = config.EnforcementFile
	cfg.Shim = "/nonexistent/libgpuslice.so"
	p := &plugin{cfg: &cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	_, err := p.Configure(context.Background(), "", "test", "v0")
	require.NoError(t, err, "the runtime keeps the plugin")
	require.Error(t, p.broken)

	ctr := &api.Container{Id: "c1", Name: "main"}
	vgpu := &api.PodSandbox{Annotations: map[string]string{"gpuslice.io/gpu-memory": "1Gi"}}
	_, _, err = p.CreateContainer(context.Background(), vgpu, ctr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot work")
	assert.Contains(t, err.Error(), "/nonexistent/libgpuslice.so")

	adj, _, err := p.CreateContainer(context.Background(), &api.PodSandbox{}, ctr)
	require.NoError(t, err)
	assert.Nil(t, adj)
	for _, f := range []func() error{
		func() error { return p.StartContainer(context.Background(), vgpu, ctr) },
		func() error { return p.RemoveContainer(context.Background(), vgpu, ctr) },
		func() error { _, err := p.StopContainer(context.Background(), vgpu, ctr); return err },
		func() error { _, err := p.Synchronize(context.Background(), nil, nil); return err },
	} {
		assert.NoError(t, f())
	}
}
