package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/simgpu"
	"github.com/gpuslice/gpuslice/pkg/status"
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

	claim := &api.Container{Id: "c2", Name: "main", Env: []string{"GPUSLICE_CLAIM=u1"}}
	_, _, err = p.CreateContainer(context.Background(), &api.PodSandbox{}, claim)
	require.Error(t, err, "a DRA claim's container too")
	assert.Contains(t, err.Error(), "cannot work")

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

// The built agent serves /metrics and /v1/status; without NVML (none on
// this machine at that path) the card figures are absent and the status
// says why. An address already taken is one log line, not a failure.
func TestObservability(t *testing.T) {
	cfg := config.Default()
	zero := 0
	cfg.SimulatedCards = []config.SimulatedCard{{Index: &zero, MemoryMiB: 16384}}
	dir := t.TempDir()
	cfg.StateDir, cfg.LedgerDir, cfg.SchedDir = filepath.Join(dir, "state"), filepath.Join(dir, "ledger"), filepath.Join(dir, "sched")
	cfg.Enforcement = config.EnforcementFile
	cfg.Shim = filepath.Join(dir, "libgpuslice.so")
	require.NoError(t, os.WriteFile(cfg.Shim, nil, 0o644))
	cfg.MetricsAddress = "127.0.0.1:0"
	cfg.StatusSocket = filepath.Join(dir, "run", "agent.sock")
	cfg.NVMLLibrary = "/nonexistent/libnvidia-ml.so.1"
	cfg.MetricsWindowMs = 100
	cfg.DeviceRoot = dir // no device nodes: a creation fails there, answered
	cfg.Guard = config.GuardOptional
	var logs bytes.Buffer
	p := &plugin{cfg: &cfg, log: slog.New(slog.NewTextHandler(&logs, nil))}
	p.build("")
	require.NoError(t, p.broken)
	require.NotNil(t, p.obs)
	defer p.obs.close()

	resp, err := http.Get("http://" + p.obs.metricsAddr + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `gpu_schedule_policy{card="0",uuid="`+simgpu.UUID(0)+`"} 2`)
	assert.Contains(t, string(body), "xgpu_node_vgpus 0")
	assert.Contains(t, string(body), `xgpu_node_guard{mode="optional",state="unavailable"} 0`)
	assert.NotContains(t, string(body), "xgpu_device_health", "no NVML: no health, not a made-up one")

	client := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return net.Dial("unix", cfg.StatusSocket)
	}}}
	resp, err = client.Get("http://agent/v1/status")
	require.NoError(t, err)
	var st status.Node
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	assert.Equal(t, "file", st.Enforce)
	// This host cannot run the guard (no BPF LSM, or no cgroup v2 for
	// it), and the status says so.
	require.NotNil(t, st.Guard)
	assert.Equal(t, "optional", st.Guard.Mode)
	assert.Equal(t, status.GuardUnavailable, st.Guard.State)
	assert.NotEmpty(t, st.Guard.Reason)
	require.Len(t, st.Cards, 1)
	assert.Nil(t, st.Cards[0].Healthy)
	require.Len(t, st.Problems, 1)
	assert.Contains(t, st.Problems[0], "NVML: /nonexistent/libnvidia-ml.so.1 not found")
	assert.Contains(t, logs.String(), "metrics: a source failed")

	// A second agent on the same addresses: both refused with a line each,
	// and the agent works.
	cfg2 := cfg
	cfg2.StateDir = filepath.Join(dir, "state2")
	cfg2.MetricsAddress = p.obs.metricsAddr
	var logs2 bytes.Buffer
	p2 := &plugin{cfg: &cfg2, log: slog.New(slog.NewTextHandler(&logs2, nil))}
	p2.build("")
	require.NoError(t, p2.broken)
	defer p2.obs.close()
	assert.Contains(t, logs2.String(), "metrics: cannot listen; the agent goes on without /metrics")
	assert.Contains(t, logs2.String(), "another agent answers on it")
	adj, _, err := p2.CreateContainer(context.Background(),
		&api.PodSandbox{Annotations: map[string]string{"gpuslice.io/gpu-memory": "1Gi"}}, &api.Container{Id: "c1", Name: "main"})
	require.Error(t, err, "no device nodes here, but the agent answered: %v", adj)
	assert.Contains(t, err.Error(), "device")
}
