// Package agent is gpuslice's node agent as an NRI plugin: it reads a
// container's vGPU request from its annotations, places it on the node's
// cards, records the allocation durably, and adjusts the container
// (devices, the xGPU environment variables, the shim and its preload). In
// kernel-module mode it creates the container's vGPUs in gpuslice.ko,
// bound to the container's cgroup, before the container's process runs;
// in no-module mode it gives each container its own ledger directory.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpuslice/gpuslice/pkg/kmod"
	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/quota"
	"github.com/gpuslice/gpuslice/pkg/state"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// Enforcement modes.
const (
	EnforceModule = "module" // gpuslice.ko: identity by cgroup, kernel ledger
	EnforceFile   = "file"   // no module: the shim's shared ledger file
)

// Card is one of the node's cards with its scheduling settings.
type Card struct {
	Index       int
	UUID        string
	Model       string // the product name, for the status
	Minor       int
	MemoryBytes uint64
	Policy      int
	MaxInst     int
	// DriverVersion is the NVIDIA driver's ("" unknown), for the DRA
	// driver's ResourceSlice.
	DriverVersion string
}

// Options are the agent's resolved settings (package config reads them
// from the file and flags; main maps them here).
type Options struct {
	Cards     []Card
	SliceNs   uint64 // the cards' slice length (module mode)
	ReclaimNs uint64 // the cards' reclaim window, idle after it without work (0: 100 ms)
	Strategy  placement.Strategy
	Enforce   string    // EnforceModule or EnforceFile
	Kmod      KmodAdmin // module mode: gpuslice.ko's admin calls
	// Guard (module mode, optional) keeps the NVIDIA device nodes from
	// the processes of vGPU containers that are not attached
	// (pkg/guard): each bound container's cgroup is added to it.
	Guard GuardAdmin
	// GuardErr, when set, is why the node's guard is not running although
	// the configuration requires it: vGPU containers are refused with it.
	GuardErr error
	// GuardStatus is the guard's configured mode and state, as the status
	// and metrics report it (nil: not reported); the observer adds its
	// counters while it runs.
	GuardStatus *status.Guard
	Store       *state.Store
	Layout      Layout      // where things are on the host and in containers
	CDI         CDIResolver // nil: device nodes only
	Log         *slog.Logger
	// CgroupID finds a cgroup directory's v2 id (default kmod.CgroupID).
	CgroupID func(dir string) (uint64, error)
}

// Agent is the plugin. Its handlers are serialised: placement reads and
// writes the whole node's allocations.
type Agent struct {
	opts     Options
	mu       sync.Mutex
	cards    []placement.Card
	byIdx    map[int]Card
	onChange []func() // see OnChange
}

// New checks the options and, in module mode, configures every card in
// gpuslice.ko (policy, max_inst, slice length, reclaim window).
func New(opts Options) (*Agent, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.CgroupID == nil {
		opts.CgroupID = kmod.CgroupID
	}
	if opts.Store == nil {
		return nil, errors.New("agent: no state store")
	}
	switch opts.Enforce {
	case EnforceModule:
		if opts.Kmod == nil {
			return nil, errors.New("agent: module mode without gpuslice.ko")
		}
	case EnforceFile:
		// 0700: containers reach their own directory through its bind
		// mount; nobody on the host but root reaches any.
		if err := os.MkdirAll(opts.Layout.LedgerRoot, 0o700); err != nil {
			return nil, fmt.Errorf("agent: ledger directory: %w", err)
		}
		if err := os.Chmod(opts.Layout.LedgerRoot, 0o700); err != nil {
			return nil, fmt.Errorf("agent: ledger directory: %w", err)
		}
		// Shared by every container of a card, whatever its users: 1777
		// like /tmp (no-module mode is cooperative; interposer/README.md).
		if err := os.MkdirAll(opts.Layout.SchedRoot, 0o755); err != nil {
			return nil, fmt.Errorf("agent: schedule directory: %w", err)
		}
		if err := os.Chmod(opts.Layout.SchedRoot, 0o777|os.ModeSticky); err != nil {
			return nil, fmt.Errorf("agent: schedule directory: %w", err)
		}
	default:
		return nil, fmt.Errorf("agent: enforcement %q: want %q or %q", opts.Enforce, EnforceModule, EnforceFile)
	}
	a := &Agent{opts: opts, byIdx: map[int]Card{}}
	for _, c := range opts.Cards {
		a.cards = append(a.cards, placement.Card{Index: c.Index, MemoryBytes: c.MemoryBytes,
			Policy: c.Policy, MaxInst: c.MaxInst})
		a.byIdx[c.Index] = c
	}
	sort.Slice(a.cards, func(i, j int) bool { return a.cards[i].Index < a.cards[j].Index })
	if opts.Enforce == EnforceModule {
		if err := a.configureCards(); err != nil {
			return nil, err
		}
	}
	if err := a.reconcileGuard(); err != nil {
		return nil, err
	}
	return a, nil
}

// Cards returns the agent's cards, by index.
func (a *Agent) Cards() []Card {
	out := make([]Card, 0, len(a.cards))
	for _, c := range a.cards {
		out = append(out, a.byIdx[c.Index])
	}
	return out
}

// placed is every vGPU the store holds, as placement sees them.
func (a *Agent) placed() []placement.VGPU {
	var out []placement.VGPU
	a.opts.Store.EachVGPU(func(id string, v state.VGPU) {
		out = append(out, placement.VGPU{Owner: id, Card: v.Card,
			MemoryBytes: v.MemoryBytes, Cores: v.Cores,
			Priority: quota.Priority(v.Priority), Mode: placement.Mode(v.Mode)})
	})
	return out
}

// CreateContainer places a container's request, records it, and returns
// the adjustment. A container with no request is left alone; a request
// that cannot be honoured fails the creation with one message.
func (a *Agent) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	req, err := quota.Parse(pod.GetAnnotations(), ctr.GetName(), ctr.GetAnnotations())
	if uids := ClaimsOf(ctr.GetEnv()); len(uids) > 0 {
		adj, err := a.createClaimContainer(pod, ctr, uids, req != nil || err != nil || asksByAnnotation(pod, ctr))
		if err != nil {
			return nil, nil, a.refuse(pod, ctr, err)
		}
		return adj, nil, nil
	}
	if err != nil {
		return nil, nil, a.refuse(pod, ctr, err)
	}
	if req == nil {
		return nil, nil, nil
	}
	// Refused before anything is placed, in either mode: nothing would
	// keep the container's other processes from the card.
	if err := a.guardRefusal(); err != nil {
		return nil, nil, a.refuse(pod, ctr, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	al, ok := a.opts.Store.Get(ctr.GetId())
	if !ok {
		if claim := a.podClaim(pod.GetUid()); claim != "" {
			return nil, nil, a.refuse(pod, ctr, bothWays(pod, claim))
		}
		if al, err = a.allocate(pod, ctr, req); err != nil {
			return nil, nil, a.refuse(pod, ctr, err)
		}
	}
	adj, err := a.adjustment(ctr, al)
	if err != nil {
		a.release(al)
		return nil, nil, a.refuse(pod, ctr, err)
	}
	a.opts.Log.Info("vGPU allocated", "pod", pod.GetNamespace()+"/"+pod.GetName(),
		"container", ctr.GetName(), "id", ctr.GetId(), "request", req.String(),
		"cards", cardList(al))
	return adj, nil, nil
}

// refuse logs and wraps a refusal: the message reaches the user through
// the runtime (crictl create / kubectl describe).
func (a *Agent) refuse(pod *api.PodSandbox, ctr *api.Container, err error) error {
	a.opts.Log.Warn("vGPU request refused", "pod", pod.GetNamespace()+"/"+pod.GetName(),
		"container", ctr.GetName(), "error", err)
	return fmt.Errorf("gpuslice: %w", err)
}

// allocate places the request and persists it; a.mu held.
func (a *Agent) allocate(pod *api.PodSandbox, ctr *api.Container, req *quota.Request) (state.Allocation, error) {
	ps, err := placement.Place(a.cards, a.placed(), req, a.opts.Strategy)
	if err != nil {
		return state.Allocation{}, err
	}
	al := state.Allocation{Container: ctr.GetId(), Name: ctr.GetName(), Pod: pod.GetName(),
		Namespace: pod.GetNamespace(), PodUID: pod.GetUid(), Enforce: a.opts.Enforce,
		CgroupPath: cgroupPath(ctr.GetLinux().GetCgroupsPath()), Created: time.Now().UTC()}
	for _, p := range ps {
		al.VGPUs = append(al.VGPUs, state.VGPU{Card: p.Card, MemoryBytes: p.MemoryBytes,
			Cores: p.Cores, Priority: int(req.Priority), Mode: int(p.Mode), KmodID: -1})
	}
	if a.opts.Enforce == EnforceFile {
		if al.LedgerDir, err = a.makeLedgerDir(al.Container); err != nil {
			return state.Allocation{}, err
		}
	}
	if err := a.opts.Store.Put(al); err != nil {
		a.removeLedgerDir(al)
		return state.Allocation{}, err
	}
	a.changed()
	return al, nil
}

// StartContainer binds the container's vGPUs to its cgroup in gpuslice.ko
// (module mode): the cgroup exists now and the container's process has not
// run yet. A failure fails the start: nothing runs unisolated.
func (a *Agent) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if a.opts.Enforce != EnforceModule {
		if err := a.startFileContainer(ctr); err != nil {
			return a.refuse(pod, ctr, err)
		}
		return nil
	}
	if uids := ClaimsOf(ctr.GetEnv()); len(uids) == 1 {
		if err := a.startClaimContainer(uids[0]); err != nil {
			return a.refuse(pod, ctr, err)
		}
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	al, ok := a.opts.Store.Get(ctr.GetId())
	if !ok {
		return nil
	}
	if err := a.bind(&al, ctr.GetLinux().GetCgroupsPath()); err != nil {
		return a.refuse(pod, ctr, err)
	}
	return nil
}

// StopContainer releases what the container held: a CRI container never
// runs again once stopped (its restart is a new container), and the
// kubelet keeps exited containers around long after, which must not pin
// their cards' capacity.
func (a *Agent) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	a.releaseID(ctr.GetId())
	return nil, nil
}

// RemoveContainer releases what the container held, if its stop did not.
func (a *Agent) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	a.releaseID(ctr.GetId())
	return nil
}

func (a *Agent) releaseID(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if al, ok := a.opts.Store.Get(id); ok {
		a.release(al)
	}
}

// Synchronize reconciles the state with the containers the runtime has:
// an allocation whose container is gone (removed while the agent was
// down) is released; the others are kept as they are.
func (a *Agent) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	live := map[string]*api.Container{}
	for _, c := range ctrs {
		live[c.GetId()] = c
	}
	kept := 0
	for _, al := range a.opts.Store.All() {
		if al.Claim != nil {
			kept++ // the kubelet unprepares it, whatever its containers
			continue
		}
		c, ok := live[al.Container]
		if !ok {
			a.opts.Log.Info("releasing the vGPUs of a container gone while the agent was away",
				"pod", al.Namespace+"/"+al.Pod, "container", al.Name, "id", al.Container)
			a.release(al)
			continue
		}
		kept++
		a.bindStarted(a.recordCgroup(al, c), c)
	}
	if a.opts.Enforce == EnforceModule {
		a.bindClaimsStarted(ctrs)
		a.reconcileKernel()
	}
	a.opts.Log.Info("synchronized", "containers", len(ctrs), "allocations", kept)
	return nil, nil
}

// recordCgroup fills in the cgroup of an allocation recorded without one
// (by an agent of before the reconciliation); a.mu held.
func (a *Agent) recordCgroup(al state.Allocation, c *api.Container) state.Allocation {
	if al.CgroupPath != "" {
		return al
	}
	if al.CgroupPath = cgroupPath(c.GetLinux().GetCgroupsPath()); al.CgroupPath == "" {
		return al
	}
	if err := a.opts.Store.Put(al); err != nil {
		a.opts.Log.Error("recording a container's cgroup", "id", al.Container, "error", err)
	}
	return al
}

// bindStarted binds (module mode) a container that started while the
// agent was away, so its StartContainer never reached the agent.
func (a *Agent) bindStarted(al state.Allocation, c *api.Container) {
	if al.Enforce != EnforceModule || c.GetState() != api.ContainerState_CONTAINER_RUNNING {
		return
	}
	for _, v := range al.VGPUs {
		if v.KmodID < 0 {
			if err := a.bind(&al, c.GetLinux().GetCgroupsPath()); err != nil {
				a.opts.Log.Error("binding a container started while the agent was away",
					"id", al.Container, "error", err)
			}
			return
		}
	}
}

// release undoes an allocation: the module's vGPUs, the ledger directory,
// the record. Errors are logged: the record goes regardless, so a broken
// card cannot pin capacity forever. a.mu held.
func (a *Agent) release(al state.Allocation) {
	a.unbind(al)
	if al.Enforce == EnforceFile {
		a.unguard(al)
	}
	a.removeLedgerDir(al)
	if err := a.opts.Store.Delete(al.Container); err != nil {
		a.opts.Log.Error("forgetting an allocation", "id", al.Container, "error", err)
	}
	a.changed()
}

func cardList(al state.Allocation) []int {
	out := make([]int, len(al.VGPUs))
	for i, v := range al.VGPUs {
		out[i] = v.Card
	}
	return out
}
