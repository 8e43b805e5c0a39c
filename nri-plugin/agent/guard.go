package agent

import (
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpuslice/gpuslice/pkg/guard"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// GuardAdmin is what the agent asks of the eBPF guard (*guard.Guard does
// it; tests use a fake).
type GuardAdmin interface {
	AddCgroup(id uint64) error
	RemoveCgroup(id uint64) error
	// AddLedgerDir registers a no-module container's ledger directory as
	// its processes' proof of attachment (an open file in it), for the
	// container's cgroup; RemoveLedgerDir forgets it.
	AddLedgerDir(path string, cgroupID uint64) error
	RemoveLedgerDir(path string) error
	// Rescan records the attachments of processes that attached before
	// the guard loaded (after the ledger directories are registered,
	// before any cgroup is added).
	Rescan() error
	// Refresh rereads the node's NVIDIA majors: nvidia-uvm and
	// nvidia-caps register theirs when first loaded, which may be after
	// the guard.
	Refresh() error
	// Refusals are the refused uses by guarded cgroup, for the status.
	Refusals() (map[uint64]uint64, error)
	// Stats are what the guard lost, for the status.
	Stats() (guard.Stats, error)
}

var _ GuardAdmin = (*guard.Guard)(nil)

// guardRefusal is why no vGPU may be given out: the guard the
// configuration requires is not running (GuardErr).
func (a *Agent) guardRefusal() error {
	if a.opts.GuardErr == nil {
		return nil
	}
	return fmt.Errorf("the node's eBPF guard is not running, and the configuration (guard: required) "+
		"refuses vGPU containers without it: %w", a.opts.GuardErr)
}

// guarded says whether the allocation's cgroup is one the guard guards:
// module mode, once its vGPUs are bound to it; file mode, once its start
// added it (CgroupID is recorded then, and only with a guard).
func guarded(al state.Allocation) bool {
	if al.CgroupID == 0 {
		return false
	}
	return al.Enforce == EnforceFile || bound(al)
}

// reconcileGuard guards every guarded allocation again: a guard loaded by
// a (re)started agent knows none. The ledger directories first, then what
// the running processes attached before the guard loaded (Rescan), then
// the cgroups: no running process is guarded before its proof is known,
// so an agent restart or upgrade leaves its containers' jobs on the GPU.
func (a *Agent) reconcileGuard() error {
	if a.opts.Guard == nil {
		return nil
	}
	all := a.opts.Store.All()
	for _, al := range all {
		if guarded(al) && al.Enforce == EnforceFile {
			if err := a.opts.Guard.AddLedgerDir(al.LedgerDir, al.CgroupID); err != nil {
				return fmt.Errorf("agent: container %s's ledger directory: %w", al.Container, err)
			}
		}
	}
	if err := a.opts.Guard.Rescan(); err != nil {
		return fmt.Errorf("agent: the attachments made before the guard loaded: %w", err)
	}
	for _, al := range all {
		if !guarded(al) {
			continue
		}
		if err := a.opts.Guard.AddCgroup(al.CgroupID); err != nil {
			return fmt.Errorf("agent: guarding container %s's cgroup: %w", al.Container, err)
		}
	}
	return nil
}

// cgroupGuardedElsewhere says whether another guarded allocation shares
// al's cgroup (it stays guarded for that one).
func (a *Agent) cgroupGuardedElsewhere(al state.Allocation) bool {
	for _, o := range a.opts.Store.All() {
		if o.Container != al.Container && o.CgroupID == al.CgroupID && guarded(o) {
			return true
		}
	}
	return false
}

// unguard stops guarding the allocation's cgroup (unless another shares
// it) and forgets its ledger directory.
func (a *Agent) unguard(al state.Allocation) {
	if a.opts.Guard == nil || !guarded(al) {
		return
	}
	if !a.cgroupGuardedElsewhere(al) {
		if err := a.opts.Guard.RemoveCgroup(al.CgroupID); err != nil {
			a.opts.Log.Error("unguarding a container's cgroup", "container", al.Container,
				"cgroup", al.CgroupID, "error", err)
		}
	}
	if al.Enforce == EnforceFile && al.LedgerDir != "" {
		if err := a.opts.Guard.RemoveLedgerDir(al.LedgerDir); err != nil {
			a.opts.Log.Error("forgetting a container's ledger directory", "container", al.Container,
				"dir", al.LedgerDir, "error", err)
		}
	}
}

// guardCgroup guards a starting container's cgroup (none without a
// guard), the node's NVIDIA majors read again first: nvidia-uvm and
// nvidia-caps register theirs at first use, after the guard loaded.
func (a *Agent) guardCgroup(id uint64) error {
	if a.opts.Guard == nil {
		return nil
	}
	if err := a.opts.Guard.Refresh(); err != nil {
		return err
	}
	return a.opts.Guard.AddCgroup(id)
}

// guardFile guards a no-module allocation's cgroup, the host directory
// dir, before its first process runs: the ledger directory registered as
// its processes' proof, then the cgroup added, then the cgroup's id
// recorded; on failure nothing is left guarded. a.mu held.
func (a *Agent) guardFile(al *state.Allocation, dir string) error {
	if a.opts.Guard == nil || guarded(*al) {
		return nil
	}
	id, err := a.opts.CgroupID(dir)
	if err != nil {
		return fmt.Errorf("the container's cgroup %s: %w (the guard needs a cgroup v2 host)", dir, err)
	}
	if err := a.opts.Guard.AddLedgerDir(al.LedgerDir, id); err != nil {
		return err
	}
	g := *al
	g.CgroupID = id
	if err := a.guardCgroup(id); err != nil {
		a.opts.Guard.RemoveLedgerDir(al.LedgerDir)
		return err
	}
	if err := a.opts.Store.Put(g); err != nil {
		a.unguard(g)
		return err
	}
	*al = g
	return nil
}

// LogRefusals logs each refusal next returns (the guard's NextRefusal),
// one line naming the container of the refused process's vGPU cgroup,
// until next fails (the guard closed); it returns that error.
func (a *Agent) LogRefusals(next func() (guard.Refusal, error)) error {
	for {
		r, err := next()
		if err != nil {
			return err
		}
		var who state.Allocation
		for _, al := range a.opts.Store.All() {
			if al.CgroupID == r.Cgroup && guarded(al) {
				who = al
				break
			}
		}
		a.opts.Log.Warn("the eBPF guard refused a GPU device to a process not attached to its vGPU "+
			"(started without libgpuslice.so, or it cleared LD_PRELOAD)",
			"pod", who.Namespace+"/"+who.Pod, "container", who.Name, "id", who.Container,
			"pid", r.PID, "comm", r.Comm, "op", r.Op, "device", fmt.Sprintf("%d:%d", r.Major, r.Minor),
			"cgroup", r.Cgroup)
	}
}

// startFileContainer guards (file mode, with a guard) the cgroup of a
// starting container: its own, or its pod's for a DRA claim's, which the
// claim's first container guards for all of them.
func (a *Agent) startFileContainer(ctr *api.Container) error {
	if a.opts.Guard == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	path := ctr.GetLinux().GetCgroupsPath()
	key := ctr.GetId()
	if uids := ClaimsOf(ctr.GetEnv()); len(uids) == 1 {
		key = state.ClaimKey(uids[0])
	}
	al, ok := a.opts.Store.Get(key)
	if !ok {
		return nil
	}
	if al.Claim != nil {
		path = al.CgroupPath
	}
	dir, err := cgroupDir(a.opts.Layout.CgroupRoot, path)
	if err != nil {
		return err
	}
	return a.guardFile(&al, dir)
}
