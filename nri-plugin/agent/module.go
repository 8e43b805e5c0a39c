package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpuslice/gpuslice/pkg/kmod"
	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// KmodAdmin is what the agent asks of gpuslice.ko (*kmod.Client does it;
// tests use a fake).
type KmodAdmin interface {
	SetCard(kmod.Card) error
	CreateVGPU(kmod.VGPU) (uint32, error)
	DestroyVGPU(card, id uint32) error
	Stats(card, id uint32) (kmod.VGPUStats, error)
	// SetUnseen sets the driver's bytes the vGPU's processes did not
	// charge (the reconciliation, reconcile.go).
	SetUnseen(card, id uint32, bytes uint64) error
}

// bound says whether any of the allocation's vGPUs is in the module.
func bound(al state.Allocation) bool {
	for _, v := range al.VGPUs {
		if v.KmodID >= 0 {
			return true
		}
	}
	return false
}

// reconcileKernel destroys the vGPUs the module has on the agent's cards
// that no allocation records: left by an agent killed between creating a
// vGPU and recording it, they would hold the card's mode and units.
func (a *Agent) reconcileKernel() {
	known := map[[2]int]bool{}
	a.opts.Store.EachVGPU(func(_ string, v state.VGPU) {
		if v.KmodID >= 0 {
			known[[2]int{v.Card, v.KmodID}] = true
		}
	})
	for _, c := range a.opts.Cards {
		for id := 0; id < kmod.MaxVGPUs; id++ {
			if known[[2]int{c.Index, id}] {
				continue
			}
			s, err := a.opts.Kmod.Stats(uint32(c.Index), uint32(id))
			if err != nil {
				continue // ENOENT: no such vGPU
			}
			a.opts.Log.Warn("destroying a vGPU no allocation records", "card", c.Index,
				"id", id, "cgroup", s.Spec.CgroupID)
			if err := a.opts.Kmod.DestroyVGPU(uint32(c.Index), uint32(id)); err != nil {
				a.opts.Log.Error("destroying an unrecorded vGPU", "card", c.Index, "id", id, "error", err)
			}
		}
	}
}

// configureCards sets every card's policy, max_inst, slice length and
// reclaim window. The module accepts identical settings at any time, so a
// restarted agent with running containers passes; changed settings while
// a card has vGPUs fail with the module's reason.
func (a *Agent) configureCards() error {
	for _, c := range a.opts.Cards {
		err := a.opts.Kmod.SetCard(kmod.Card{Card: uint32(c.Index), Policy: kmod.Policy(c.Policy),
			MaxInst: uint32(c.MaxInst), SliceNs: a.opts.SliceNs, ReclaimNs: a.opts.ReclaimNs})
		if err != nil {
			return fmt.Errorf("agent: card %d (policy %d, max_inst %d): %w", c.Index, c.Policy, c.MaxInst, err)
		}
	}
	return nil
}

// bind creates the allocation's vGPUs in the module, bound to the
// container's cgroup, and records their ids; on failure none is left.
func (a *Agent) bind(al *state.Allocation, cgroupsPath string) error {
	dir, err := cgroupDir(a.opts.Layout.CgroupRoot, cgroupsPath)
	if err != nil {
		return err
	}
	return a.bindDir(al, dir)
}

// bindDir creates the allocation's vGPUs not created yet, bound to the
// cgroup of host directory dir, and records their ids; on failure none
// is left.
func (a *Agent) bindDir(al *state.Allocation, dir string) error {
	if err := a.guardRefusal(); err != nil {
		return err
	}
	id, err := a.opts.CgroupID(dir)
	if err != nil {
		return fmt.Errorf("the container's cgroup %s: %w (module mode needs a cgroup v2 host)", dir, err)
	}
	al.CgroupID = id
	for i := range al.VGPUs {
		v := &al.VGPUs[i]
		if v.KmodID >= 0 {
			continue // bound before the agent restarted
		}
		kid, err := a.opts.Kmod.CreateVGPU(kmod.VGPU{Card: uint32(v.Card), CgroupID: id,
			MemCap: v.MemoryBytes, Quota: v.Cores, Priority: uint32(v.Priority),
			Mode: kmodMode(v.Mode)})
		if err != nil {
			a.unbind(*al)
			return err
		}
		v.KmodID = int(kid)
	}
	// Guarded before the container's first process runs: StartContainer
	// (or the claim's preparation) returns only after this.
	if err := a.guardCgroup(id); err != nil {
		a.unbind(*al)
		return err
	}
	if err := a.opts.Store.Put(*al); err != nil {
		a.unbind(*al)
		return err
	}
	return nil
}

// unbind destroys the allocation's vGPUs in the module (those it has).
func (a *Agent) unbind(al state.Allocation) {
	if al.Enforce != EnforceModule || a.opts.Kmod == nil {
		return
	}
	a.unguard(al)
	for _, v := range al.VGPUs {
		if v.KmodID < 0 {
			continue
		}
		err := a.opts.Kmod.DestroyVGPU(uint32(v.Card), uint32(v.KmodID))
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			a.opts.Log.Error("destroying a vGPU in gpuslice.ko", "card", v.Card,
				"id", v.KmodID, "container", al.Container, "error", err)
		}
	}
}

func kmodMode(m int) kmod.Mode {
	if placement.Mode(m) == placement.Compute {
		return kmod.ModeCompute
	}
	return kmod.ModeMemory
}

// cgroupDir is the host directory of a container's cgroup from the OCI
// cgroupsPath: "slice:prefix:name" with the systemd driver, a path under
// the cgroup v2 root otherwise.
func cgroupDir(root, path string) (string, error) {
	if path == "" {
		return "", errors.New("the container has no cgroups path")
	}
	if strings.HasPrefix(path, "/") || !strings.Contains(path, ":") {
		return filepath.Join(root, path), nil
	}
	parts := strings.Split(path, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("cgroups path %q: want slice:prefix:name", path)
	}
	slice, err := expandSlice(parts[0])
	if err != nil {
		return "", err
	}
	unit := parts[2]
	if !strings.HasSuffix(unit, ".slice") {
		unit += ".scope"
		if parts[1] != "" {
			unit = parts[1] + "-" + unit
		}
	}
	return filepath.Join(root, slice, unit), nil
}

// cgroupPath is the container's cgroup relative to the cgroup root, as the
// "0::" (or a v1 controller's) line of /proc/<pid>/cgroup names it; "" when
// the runtime gave no usable cgroupsPath.
func cgroupPath(cgroupsPath string) string {
	p, err := cgroupDir("/", cgroupsPath)
	if err != nil {
		return ""
	}
	return p
}

// expandSlice turns systemd's "a-b-c.slice" into "a.slice/a-b.slice/a-b-c.slice".
func expandSlice(slice string) (string, error) {
	if slice == "" || slice == "-.slice" {
		return "", nil
	}
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || strings.Contains(name, "/") || strings.HasPrefix(name, "-") ||
		strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return "", fmt.Errorf("cgroups path: %q is not a systemd slice", slice)
	}
	var dirs []string
	prefix := ""
	for _, part := range strings.Split(name, "-") {
		prefix += part
		dirs = append(dirs, prefix+".slice")
		prefix += "-"
	}
	return filepath.Join(dirs...), nil
}
