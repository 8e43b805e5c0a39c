package main

import (
	"errors"
	"log/slog"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/guard"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// errNoModuleProof is why the guard does not run without gpuslice.ko:
// its proof that a process is attached to its vGPU is the module's ATTACH.
var errNoModuleProof = errors.New("the guard proves that a process is attached to its vGPU through " +
	"gpuslice.ko's ATTACH, which the no-module mode (enforcement: file) does not have: " +
	"load gpuslice.ko (enforcement: module or auto), or set guard: optional to run vGPU containers unguarded")

// guardSetup is the node's guard as the configuration asked for it.
type guardSetup struct {
	g *guard.Guard // nil when it does not run
	// refuse is why vGPU containers are refused: guard: required, and
	// the guard could not run.
	refuse error
	status status.Guard
}

// loadGuard loads the eBPF guard (pkg/guard) as cfg.Guard asks, in the
// agent's enforcement mode, and logs how it stands. The guard's programs
// stay in the kernel while the agent runs (its links are the agent's):
// a stopped agent leaves the GPU unguarded, and a restarted one guards
// its containers again from its state (agent.New).
func loadGuard(cfg *config.Config, enforce string, load func() (*guard.Guard, error), log *slog.Logger) guardSetup {
	s := guardSetup{status: status.Guard{Mode: string(cfg.Guard)}}
	if cfg.Guard == config.GuardOff {
		s.status.State = status.GuardOff
		s.status.Reason = "configured off (guard: off): a process of a vGPU container that bypasses the shim uses the GPU without a cap or a quota"
		log.Warn("the eBPF guard is off (guard: off): processes that bypass the shim are not kept from the GPU")
		return s
	}
	var err error
	if enforce == agent.EnforceModule {
		s.g, err = load()
	} else {
		err = errNoModuleProof
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
