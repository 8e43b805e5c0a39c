package main

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/guard"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// The configuration's guard mode against what the node can do: the state
// reported, whether vGPU containers are refused, and the log's word.
func TestLoadGuard(t *testing.T) {
	noLSM := errors.New("guard: the BPF LSM is not active")
	for _, tc := range []struct {
		name    string
		mode    config.GuardMode
		cgroup  string // the host's cgroup v2 root, "" none
		loadErr error
		state   string
		refused bool
		reason  string // in the status's reason
		log     string
	}{
		{"required, loads", config.GuardRequired, "/sys/fs/cgroup", nil, status.GuardOn, false, "", "the eBPF guard is on"},
		{"required, no BPF LSM", config.GuardRequired, "/sys/fs/cgroup", noLSM, status.GuardUnavailable, true,
			"BPF LSM is not active", "containers asking for a vGPU are refused"},
		{"required, no cgroup v2", config.GuardRequired, "", nil, status.GuardUnavailable, true,
			"no cgroup v2 hierarchy", "containers asking for a vGPU are refused"},
		{"optional, loads", config.GuardOptional, "/sys/fs/cgroup", nil, status.GuardOn, false, "", "the eBPF guard is on"},
		{"optional, no BPF LSM", config.GuardOptional, "/sys/fs/cgroup", noLSM, status.GuardUnavailable, false,
			"BPF LSM is not active", "vGPU containers run without it"},
		{"optional, no cgroup v2", config.GuardOptional, "", nil, status.GuardUnavailable, false,
			"no cgroup v2 hierarchy", "vGPU containers run without it"},
		{"off", config.GuardOff, "/sys/fs/cgroup", nil, status.GuardOff, false, "guard: off", "the eBPF guard is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Guard = tc.mode
			loads := 0
			load := func() (*guard.Guard, error) {
				loads++
				if tc.loadErr != nil {
					return nil, tc.loadErr
				}
				return &guard.Guard{}, nil
			}
			var logs bytes.Buffer
			s := loadGuard(&cfg, tc.cgroup, load, slog.New(slog.NewTextHandler(&logs, nil)))
			assert.Equal(t, string(tc.mode), s.status.Mode)
			assert.Equal(t, tc.state, s.status.State)
			assert.Equal(t, tc.refused, s.refuse != nil, "refused: %v", s.refuse)
			assert.Equal(t, tc.state == status.GuardOn, s.g != nil)
			if tc.reason == "" {
				assert.Empty(t, s.status.Reason)
			} else {
				assert.Contains(t, s.status.Reason, tc.reason)
			}
			assert.Contains(t, logs.String(), tc.log)
			wantLoads := 0
			if tc.mode != config.GuardOff && tc.cgroup != "" {
				wantLoads = 1
			}
			assert.Equal(t, wantLoads, loads, "loads")

			var opts agent.Options
			s.apply(&opts)
			assert.Equal(t, s.g != nil, opts.Guard != nil, "no guard, no non-nil interface")
			assert.Equal(t, s.refuse, opts.GuardErr)
			assert.Equal(t, &s.status, opts.GuardStatus)
		})
	}
}
