// Command gpuslice-nri is gpuslice's node agent: a containerd NRI plugin
// that gives containers vGPUs from their annotations (see README.md).
//
// It runs either as an external plugin (a systemd service dialing the NRI
// socket) or pre-registered, started by containerd from its NRI plugin
// directory as NN-gpuslice-nri, which hands it its connection.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/nri-plugin/dra"
	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/guard"
	"github.com/gpuslice/gpuslice/pkg/kmod"
	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/quota"
	"github.com/gpuslice/gpuslice/pkg/state"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(os.Args[1:], log)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Error("gpuslice-nri: " + err.Error())
		os.Exit(1)
	}
}

func run(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("gpuslice-nri", flag.ContinueOnError)
	var cfg config.Config
	cfg.BindFlags(fs)
	name := fs.String("name", "gpuslice", "plugin name (external plugin)")
	idx := fs.String("idx", "50", "plugin index, 00-99 (external plugin)")
	socket := fs.String("nri-socket", "", "NRI socket to dial (external plugin; default containerd's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.Resolve(fs); err != nil {
		return err
	}
	p := &plugin{cfg: &cfg, log: log}
	// A request the agent fails to answer (timeout, lost connection)
	// fails, rather than creating the container without its isolation.
	opts := []stub.Option{stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true})}
	if os.Getenv(api.PluginSocketEnvVar) == "" {
		p.build("")
		opts = append(opts, stub.WithPluginName(*name), stub.WithPluginIdx(*idx))
		if *socket != "" {
			opts = append(opts, stub.WithSocketPath(*socket))
		}
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		return fmt.Errorf("NRI: %w", err)
	}
	// SIGTERM (systemctl stop, a pod deleted or rolled by its DaemonSet)
	// ends the run cleanly: the DRA driver's sockets are removed, so the
	// kubelet sees the driver go at once rather than dialing a dead
	// socket, and the status socket goes too.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Run returns when the runtime closes the connection (containerd
	// stopped or restarted): exit and let the service manager restart us;
	// the state file carries the allocations over.
	err = s.Run(ctx)
	p.shutdown()
	if ctx.Err() != nil {
		log.Info("stopped by a signal")
		return nil
	}
	if err != nil {
		return fmt.Errorf("NRI connection: %w", err)
	}
	return nil
}

// shutdown stops the DRA driver and the observability servers.
func (p *plugin) shutdown() {
	if p.dra != nil {
		p.dra.Stop()
	}
	if p.obs != nil {
		p.obs.close()
	}
	if p.guard.g != nil {
		if err := p.guard.g.Close(); err != nil {
			p.log.Error("closing the eBPF guard", "error", err)
		}
	}
}

// plugin is what the NRI stub drives: the agent, built at start-up
// (external plugin) or when the runtime configures it (pre-registered,
// where containerd may hand over the configuration from its NRI drop-in
// directory, <plugin_config_path>/50-gpuslice-nri.conf).
//
// An agent that cannot be built (no cards found, a corrupt state file, the
// module refusing the cards' settings) stays registered and refuses every
// container that asks for a vGPU, with the reason: exiting instead would
// let the runtime create those containers without their isolation.
type plugin struct {
	cfg    *config.Config
	log    *slog.Logger
	a      *agent.Agent
	broken error
	obs    *observability // nil until the agent is built
	dra    *dra.Driver    // nil when the DRA driver does not run
	guard  guardSetup     // the eBPF guard, once the agent is built
}

// build creates the agent; text, when not empty, is the configuration
// (YAML, the file's format) and replaces the file's.
func (p *plugin) build(text string) {
	if p.a != nil {
		return
	}
	a, cfg, err := p.newAgent(text)
	if err == nil && p.guard.g != nil {
		// One line per refusal, until the guard closes at shutdown.
		go func() { _ = a.LogRefusals(p.guard.g.NextRefusal) }()
	}
	if err == nil {
		// The same agent behind both doors: one state, one placement.
		p.dra, err = startDRA(a, cfg, p.log)
	}
	if err != nil {
		p.broken = err
		p.log.Error("the agent cannot work; containers asking for a vGPU are refused", "error", err)
		return
	}
	p.a, p.broken = a, nil
	// Metrics and the status socket are extras: what fails here is
	// logged, and the agent goes on with its NRI duties.
	p.obs = startObservability(a, cfg, p.log)
}

func (p *plugin) newAgent(text string) (*agent.Agent, *config.Config, error) {
	cfg := p.cfg
	if text != "" {
		c, err := config.Parse([]byte(text))
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("the NRI drop-in configuration: %w", err)
		}
		cfg = &c
	}
	a, g, err := newAgent(cfg, p.log)
	p.guard = g
	return a, cfg, err
}

// Configure builds the agent if it is not built yet; 0 subscribes to the
// events of the handlers below.
func (p *plugin) Configure(_ context.Context, text, runtime, version string) (api.EventMask, error) {
	p.log.Info("configured by the runtime", "runtime", runtime, "version", version)
	p.build(text)
	return 0, nil
}

func (p *plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	if p.a == nil {
		return nil, nil
	}
	return p.a.Synchronize(ctx, pods, ctrs)
}

func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if p.a == nil {
		req, err := quota.Parse(pod.GetAnnotations(), ctr.GetName(), ctr.GetAnnotations())
		if req == nil && err == nil && len(agent.ClaimsOf(ctr.GetEnv())) == 0 {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("gpuslice: the node agent cannot work (%v): containers asking for a vGPU are refused until it is fixed", p.broken)
	}
	return p.a.CreateContainer(ctx, pod, ctr)
}

func (p *plugin) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if p.a == nil {
		return nil
	}
	return p.a.StartContainer(ctx, pod, ctr)
}

func (p *plugin) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	if p.a == nil {
		return nil, nil
	}
	return p.a.StopContainer(ctx, pod, ctr)
}

func (p *plugin) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if p.a == nil {
		return nil
	}
	return p.a.RemoveContainer(ctx, pod, ctr)
}

// newAgent builds the agent from the configuration, with the eBPF guard
// it asks for (closed again when the agent cannot be built).
func newAgent(cfg *config.Config, log *slog.Logger) (*agent.Agent, guardSetup, error) {
	opts, err := agentOptions(cfg, log)
	if err != nil {
		return nil, guardSetup{}, err
	}
	g := loadGuard(cfg, opts.Layout.CgroupRoot, guard.Load, log)
	g.apply(&opts)
	a, err := agent.New(opts)
	if err != nil && g.g != nil {
		g.g.Close()
		g.g = nil
	}
	return a, g, err
}

// agentOptions resolves the configuration into the agent's options.
func agentOptions(cfg *config.Config, log *slog.Logger) (agent.Options, error) {
	disc, err := cfg.Discoverer()
	if err != nil {
		return agent.Options{}, err
	}
	found, err := disc.Cards()
	if err != nil {
		return agent.Options{}, err
	}
	cards := make([]agent.Card, 0, len(found))
	for _, c := range found {
		policy, maxInst := cfg.CardSettings(c.Index)
		cards = append(cards, agent.Card{Index: c.Index, UUID: c.UUID, Model: c.Name, Minor: c.Minor,
			MemoryBytes: c.MemoryBytes, Policy: policy, MaxInst: maxInst, DriverVersion: c.DriverVersion})
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return agent.Options{}, err
	}
	strategy, err := placement.ParseStrategy(string(cfg.Placement))
	if err != nil {
		return agent.Options{}, err
	}
	opts := agent.Options{Cards: cards, SliceNs: uint64(cfg.SliceMs) * 1e6,
		ReclaimNs: uint64(cfg.ReclaimMs) * 1e6, Strategy: strategy, Store: store, Log: log,
		Enforce: string(cfg.EffectiveEnforcement())}
	if opts.Layout, err = layout(cfg); err != nil {
		return opts, err
	}
	if opts.CDI, err = cdi(cfg, cards); err != nil {
		return opts, err
	}
	if opts.Enforce == agent.EnforceModule {
		if opts.Kmod, err = kmod.Open(filepath.Join(cfg.DeviceRoot, kmod.Device)); err != nil {
			return opts, err
		}
		if opts.Layout.CgroupRoot, err = agent.CgroupV2Root(); err != nil {
			return opts, err
		}
	} else if cfg.Guard != config.GuardOff {
		// The guard's (file mode): without it, loadGuard says why.
		opts.Layout.CgroupRoot, _ = agent.CgroupV2Root()
	}
	log.Info("gpuslice node agent", "cards", len(cards), "enforcement", opts.Enforce,
		"placement", strategy, "state", store.Path(), "guard", cfg.Guard)
	return opts, nil
}

func layout(cfg *config.Config) (agent.Layout, error) {
	l := agent.Layout{ShimHost: cfg.Shim, ShimContainer: cfg.ShimMountPath,
		LedgerRoot: cfg.LedgerDir, LedgerContainer: "/run/gpuslice/ledger",
		SchedRoot: cfg.SchedDir, SchedContainer: "/run/gpuslice/sched",
		DeviceRoot: cfg.DeviceRoot}
	if _, err := os.Stat(cfg.Shim); err != nil {
		return l, fmt.Errorf("shim: %w (install libgpuslice.so there or set shim in the config)", err)
	}
	// A file naming the shim, mounted as the container's
	// /etc/ld.so.preload (a scrubbed environment does not escape it): in
	// the containers of DRA claims always, in the others with preloadFile.
	l.PreloadHost = filepath.Join(cfg.StateDir, "ld.so.preload")
	l.PreloadAnnotated = cfg.PreloadFile
	if err := os.WriteFile(l.PreloadHost, []byte(cfg.ShimMountPath+"\n"), 0o644); err != nil {
		return l, err
	}
	return l, nil
}

func cdi(cfg *config.Config, cards []agent.Card) (agent.CDIResolver, error) {
	if cfg.CDI == config.CDINever {
		return nil, nil
	}
	resolve, n := agent.CDISpecs(cfg.CDISpecDirs)
	if cfg.CDI == config.CDIAlways {
		if err := agent.RequireCDI(resolve, cards, cfg.CDISpecDirs); err != nil {
			return nil, err
		}
	}
	if n == 0 {
		return nil, nil
	}
	return resolve, nil
}
