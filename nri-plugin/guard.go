package main

import (
	"errors"
	"log/slog"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/guard"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// errNoCgroupV2 is why the guard cannot run on a host without cgroup v2.
var errNoCgroupV2 = errors.New("no cgroup v2 hierarchy is mounted: the guard identifies containers by their " +
	"cgroup v2 id (boot with systemd.unified_cgroup_hierarchy=1, or set guard: optional to run vGPU containers unguarded)")

// guardSetup is the node's guard as the configuration asked for it.
type guardSetup struct {
	g *guard.Guard // nil when it does not run
	// refuse is why vGPU containers are refused: guard: required, and
	// the guard could not run.
	refuse error
	status status.Guard
}

// loadGuard loads the eBPF guard (pkg/guard) as cfg.Guard asks, in either
// enforcement mode, and logs how it stands. The guard's programs
// stay in the kernel while the agent runs (its links are the agent's):
// a stopped agent leaves the GPU unguarded, and a restarted one guards
// its containers again from its state (agent.New).
//
// The guard knows containers by their cgroup v2 id: without the host's
// cgroup v2 hierarchy (cgroupRoot "") it cannot run.
func loadGuard(cfg *config.Config, cgroupRoot string, load func() (*guard.Guard, error), log *slog.Logger) guardSetup {
	s := guardSetup{status: status.Guard{Mode: string(cfg.Guard)}}
	if cfg.Guard == config.GuardOff {
		s.status.State = status.GuardOff
		s.status.Reason = "configured off (guard: off): a process of a vGPU container that bypasses the shim uses the GPU without a cap or a quota"
		log.Warn("the eBPF guard is off (guard: off): processes that bypass the shim are not kept from the GPU")
		return s
	}
	var err error
	if cgroupRoot == "" {
		err = errNoCgroupV2
	} else {
		s.g, err = load()
	}
	if err == nil {
		s.status.State = status.GuardOn
		log.Info("the eBPF guard is on: processes of vGPU containers without the shim get no GPU")
		return s
	}
	s.status.State = status.GuardUnavailable
	s.status.Reason = err.Error()
	if cfg.Guard == config.GuardRequired {
		s.refuse = err
		log.Error("the eBPF guard cannot run, and the configuration requires it (guard: required): "+
			"containers asking for a vGPU are refused until it can, or until guard: optional is set", "error", err)
		return s
	}
	log.Warn("the eBPF guard cannot run; vGPU containers run without it (guard: optional): "+
		"a process that bypasses the shim uses the GPU without a cap or a quota", "error", err)
	return s
}

// apply gives the agent the guard and what it says of it.
func (s *guardSetup) apply(opts *agent.Options) {
	if s.g != nil {
		opts.Guard = s.g // a nil *Guard must not become a non-nil interface
	}
	opts.GuardErr = s.refuse
	opts.GuardStatus = &s.status
}
