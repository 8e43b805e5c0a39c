//go:build cgo

package agent

// The reconciliation. The shim charges each allocation before the driver
// is asked, but the driver takes device memory it never sees: a context
// larger than GPUSLICE_CONTEXT_MIB, loaded images, the stack it grows at
// launch, any process run without the shim. Every window the observer
// sums the driver's own per-process figures (NVML's running processes) of
// each container's processes on each card, found by their cgroup, and
// compares them with the vGPU's charges. The difference, the vGPU's unseen
// bytes, goes to its ledger (gpuslice.ko's record, or the ledger file),
// where the vGPU's next allocation that would pass the cap with them
// counted is refused. So a container whose real use passes its cap is
// found, and stopped, one window after its driver took the memory.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpuslice/gpuslice/pkg/gpu"
	"github.com/gpuslice/gpuslice/pkg/ledger"
	"github.com/gpuslice/gpuslice/pkg/state"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// procCgroupMax bounds what is read of /proc/<pid>/cgroup.
const procCgroupMax = 64 << 10

// procCgroups are the cgroup paths of a host process, one per hierarchy
// of /proc/<pid>/cgroup ("0::/a/b" on cgroup v2, "4:memory:/a/b" on v1).
func procCgroups(pid uint32) ([]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(io.LimitReader(f, procCgroupMax))
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), ":"); ok {
			if _, path, ok := strings.Cut(rest, ":"); ok && strings.HasPrefix(path, "/") {
				out = append(out, path)
			}
		}
	}
	return out, sc.Err()
}

// within says whether cgroup path is dir or below it.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// owner is the allocation whose cgroup holds a process in the cgroups
// paths: the deepest one recorded, as the kernel finds a vGPU by the
// nearest ancestor; "" when none does. A container can create cgroups
// below its own, not move its processes into another's.
func owner(paths []string, allocs []state.Allocation) string {
	best, depth := "", -1
	for _, al := range allocs {
		if al.CgroupPath == "" {
			continue
		}
		for _, p := range paths {
			if within(p, al.CgroupPath) && len(al.CgroupPath) > depth {
				best, depth = al.Container, len(al.CgroupPath)
			}
		}
	}
	return best
}

// driverUse is the driver's memory of each container on each card, for
// the cards whose processes NVML listed.
type driverUse struct {
	bytes map[busyKey]uint64
	known map[int]bool // cards listed
}

// measureDriver attributes the listed processes of each card to the
// allocations by cgroup. A process that vanished before its cgroup could
// be read (its memory is gone with it) or belongs to no container is
// nobody's.
func measureDriver(procs map[int][]gpu.ProcessMemory, allocs []state.Allocation) driverUse {
	u := driverUse{bytes: map[busyKey]uint64{}, known: map[int]bool{}}
	owners := map[uint32]string{} // a process may use several cards
	for card, ps := range procs {
		u.known[card] = true
		for _, p := range ps {
			id, seen := owners[p.PID]
			if !seen {
				if paths, err := procCgroups(p.PID); err == nil {
					id = owner(paths, allocs)
				}
				owners[p.PID] = id
			}
			if id != "" {
				u.bytes[busyKey{id, card}] += p.Bytes
			}
		}
	}
	return u
}

// reconcile fills a vGPU's driver figures and hands its unseen bytes to
// its ledger; it logs once when the driver's figure passes the cap.
func (ob *Observer) reconcile(s *status.VGPU, u driverUse, al state.Allocation, v state.VGPU,
	problem func(string, ...any)) {
	k := busyKey{al.Container, v.Card}
	if !u.known[v.Card] {
		return // no list: the last unseen bytes stay
	}
	if al.CgroupPath == "" {
		problem("container %s: no cgroup recorded, its driver-reported memory on card %d is unknown", al.Container, v.Card)
		return
	}
	driver := u.bytes[k]
	s.MemoryDriverBytes = &driver
	ob.overCap(k, al, v, driver)
	if s.MemoryUsedBytes == nil {
		return // its charges unknown: nothing to compare with
	}
	unseen := driver - min(driver, *s.MemoryUsedBytes)
	s.MemoryUnseenBytes = &unseen
	if err := ob.feedBack(al, v, unseen); err != nil {
		problem("unseen bytes of container %s on card %d: %v", al.Container, v.Card, err)
	}
}

// feedBack records a vGPU's unseen bytes where its charges are counted.
func (ob *Observer) feedBack(al state.Allocation, v state.VGPU, unseen uint64) error {
	if al.Enforce == EnforceModule {
		if v.KmodID < 0 {
			return nil
		}
		err := ob.a.opts.Kmod.SetUnseen(uint32(v.Card), uint32(v.KmodID), unseen)
		if errors.Is(err, syscall.ENOTTY) {
			return fmt.Errorf("%w: allocations past the cap are not refused", err)
		}
		return err
	}
	err := ledger.WriteUnseen(filepath.Join(al.LedgerDir, fmt.Sprintf("card%d.ledger", v.Card)), unseen)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no shim process yet: nothing charged to count them against
	}
	return err
}

// overCap logs once when a vGPU's driver-reported memory passes its cap,
// and once when it is back within it.
func (ob *Observer) overCap(k busyKey, al state.Allocation, v state.VGPU, driver uint64) {
	over := driver > v.MemoryBytes
	if over == ob.over[k] {
		return
	}
	if ob.over == nil {
		ob.over = map[busyKey]bool{}
	}
	ob.over[k] = over
	args := []any{"pod", al.Namespace + "/" + al.Pod, "container", al.Name, "id", al.Container,
		"card", v.Card, "driver_bytes", driver, "cap_bytes", v.MemoryBytes}
	if over {
		ob.a.opts.Log.Warn("vGPU memory: the driver reports more than the cap for the container's processes; its next allocations are refused until it is back within", args...)
	} else {
		ob.a.opts.Log.Info("vGPU memory: the driver's figure is within the cap again", args...)
	}
}
