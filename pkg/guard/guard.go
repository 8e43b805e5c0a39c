package guard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/pkg/kmod"
)

// Where the node's device numbers come from.
const (
	ProcDevices = "/proc/devices"
	GpusliceDev = "/sys/class/misc/gpuslice/dev"
)

// Guard is the loaded and attached guard. Its programs stay in the kernel
// until Close (or the process's exit, which closes its links): the guard
// is on exactly while the agent that loaded it runs. Its methods may be
// called from several goroutines.
type Guard struct {
	objs  guardMaps
	progs *ebpf.Collection // the programs (the maps are in objs)
	links []link.Link

	mu     sync.Mutex // majors
	majors []uint32

	ledgers ledgerDirs

	events *ringbuf.Reader
}

// optionalHooks are the LSM hooks the guard attaches where the running
// kernel has them, and goes without where it has not:
// file_ioctl_compat, which 32-bit ioctls take instead of file_ioctl from
// 6.8 on (and on the stable kernels it was backported to, Debian 12's 6.1
// among them); a kernel without it sends them through file_ioctl.
var optionalHooks = map[string]bool{"file_ioctl_compat": true}

// dropMissingHooks removes from spec the programs of optional hooks that
// kernel (the running kernel's BTF) lacks, and says which a required one
// lacks: an LSM program attaches to the kernel function bpf_lsm_<hook>,
// the rescan's iterator to bpf_iter_task_file (missingIter).
func dropMissingHooks(spec *ebpf.CollectionSpec, kernel *btf.Spec) error {
	for name, p := range spec.Programs {
		if p.Type == ebpf.Tracing && p.AttachType == ebpf.AttachTraceIter {
			if err := missingIter(kernel, p.AttachTo); err != nil {
				return err
			}
			continue
		}
		if p.Type != ebpf.LSM {
			continue
		}
		var fn *btf.Func
		err := kernel.TypeByName("bpf_lsm_"+p.AttachTo, &fn)
		switch {
		case err == nil:
		case errors.Is(err, btf.ErrNotFound) && optionalHooks[p.AttachTo]:
			delete(spec.Programs, name)
		case errors.Is(err, btf.ErrNotFound):
			return &UnsupportedError{
				Reason: fmt.Sprintf("the kernel has no LSM hook %s (no bpf_lsm_%s in its BTF)", p.AttachTo, p.AttachTo),
				Fix:    "run a kernel of 5.11 or later built with CONFIG_BPF_LSM=y",
			}
		default:
			return fmt.Errorf("guard: looking up the LSM hook %s in the kernel's BTF: %w", p.AttachTo, err)
		}
	}
	return nil
}

// Load checks that the kernel can run the guard (Supported), loads its
// programs and maps, sets the device numbers (ReadDevices of the node's
// files) and attaches the programs: from its return on, the processes of
// the cgroups added with AddCgroup are guarded.
func Load() (*Guard, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	d, err := ReadDevices(ProcDevices, GpusliceDev)
	if err != nil {
		return nil, err
	}
	return load(d)
}

func load(d Devices) (*Guard, error) {
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("guard: lifting RLIMIT_MEMLOCK (needs CAP_SYS_RESOURCE): %w", err)
	}
	spec, err := loadGuard()
	if err != nil {
		return nil, fmt.Errorf("guard: the embedded programs: %w", err)
	}
	if err := spec.Variables[guardVarGsAttachCmd].Set(uint32(kmod.IocAttach)); err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("guard: reading the kernel's BTF: %w", err)
	}
	if err := dropMissingHooks(spec, kernel); err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("guard: the kernel's verifier refused the programs (a kernel older than "+
				"the guard supports, or a bug of the guard's): %+v", ve)
		}
		return nil, fmt.Errorf("guard: loading the programs (needs CAP_BPF and CAP_SYS_ADMIN): %w", err)
	}
	g := &Guard{progs: coll}
	if err := coll.Assign(&g.objs); err != nil {
		g.Close()
		return nil, fmt.Errorf("guard: %w", err)
	}
	g.ledgers.m = g.objs.LedgerDirs
	if err := g.SetDevices(d); err != nil {
		g.Close()
		return nil, err
	}
	if g.events, err = ringbuf.NewReader(g.objs.Events); err != nil {
		g.Close()
		return nil, fmt.Errorf("guard: the refusals' ring buffer: %w", err)
	}
	// The state keepers first, the checks last: a check never runs
	// without the records it reads being kept.
	for _, name := range []string{
		guardProgGuardFileFree, guardProgGuardExec, guardProgGuardFork,
		guardProgGuardIoctl, guardProgGuardIoctlCompat, guardProgGuardMmap, guardProgGuardOpen,
	} {
		p := coll.Programs[name]
		if p == nil {
			continue // an optional hook this kernel lacks (dropMissingHooks)
		}
		l, err := link.AttachLSM(link.LSMOptions{Program: p})
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("guard: attaching %s: %w", p, err)
		}
		g.links = append(g.links, l)
	}
	return g, nil
}

// Close detaches the programs and frees the maps: the guard is off.
func (g *Guard) Close() error {
	var errs []error
	for i := len(g.links) - 1; i >= 0; i-- {
		errs = append(errs, g.links[i].Close())
	}
	g.links = nil
	if g.events != nil {
		errs = append(errs, g.events.Close())
	}
	if g.progs != nil {
		g.progs.Close()
	}
	errs = append(errs, g.objs.Close())
	return errors.Join(errs...)
}

// SetDevices replaces the guarded majors and /dev/gpuslice's number. The
// agent calls it again (Refresh) when a driver registered later, as
// nvidia-uvm does on first use.
func (g *Guard) SetDevices(d Devices) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	want := map[uint32]bool{}
	one := uint32(1)
	for _, m := range d.Majors {
		want[m] = true
		if err := g.objs.Majors.Update(m, one, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("guard: guarding major %d: %w", m, err)
		}
	}
	for _, m := range g.majors {
		if !want[m] {
			if err := g.objs.Majors.Delete(m); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("guard: unguarding major %d: %w", m, err)
			}
		}
	}
	g.majors = append([]uint32(nil), d.Majors...)
	if err := g.objs.Config.Update(uint32(0), guardGuardConfig{GsDev: d.Gpuslice}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("guard: setting /dev/gpuslice's number: %w", err)
	}
	return nil
}

// Refresh rereads the node's device numbers (ReadDevices) and sets them.
func (g *Guard) Refresh() error {
	d, err := ReadDevices(ProcDevices, GpusliceDev)
	if err != nil {
		return err
	}
	return g.SetDevices(d)
}

// AddCgroup guards the processes of the cgroup v2 id (that of the
// container's cgroup directory, as kmod.CgroupID returns it) and of its
// descendants. Adding a guarded cgroup again keeps its count.
func (g *Guard) AddCgroup(id uint64) error {
	if id == 0 {
		return fmt.Errorf("guard: cgroup id 0 is no cgroup")
	}
	err := g.objs.VgpuCgroups.Update(id, guardGuardCgroup{}, ebpf.UpdateNoExist)
	if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("guard: cgroup %d: the guard holds %d vGPU cgroups already", id, g.objs.VgpuCgroups.MaxEntries())
		}
		return fmt.Errorf("guard: guarding cgroup %d: %w", id, err)
	}
	return nil
}

// RemoveCgroup stops guarding the cgroup; removing one not guarded is no
// error.
func (g *Guard) RemoveCgroup(id uint64) error {
	if err := g.objs.VgpuCgroups.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("guard: unguarding cgroup %d: %w", id, err)
	}
	return nil
}

// Refusals are the guarded cgroups, each with the number of opens,
// ioctls and mmaps of a guarded device refused to its processes since it
// was added.
func (g *Guard) Refusals() (map[uint64]uint64, error) {
	out := map[uint64]uint64{}
	var id uint64
	var v guardGuardCgroup
	it := g.objs.VgpuCgroups.Iterate()
	for it.Next(&id, &v) {
		out[id] = v.Refused
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("guard: reading the refusals: %w", err)
	}
	return out, nil
}

// Stats are node-wide counters that say the guard lost something.
type Stats struct {
	LostEvents uint64 // refusals whose Refusal record found the ring buffer full
	BadMagic   uint64 // /dev/gpuslice records without the guard's magic: gpuslice.ko too old
	FilesFull  uint64 // ATTACHes and ledger opens not recorded: too many such files open on the node
}

// Stats reads the node-wide counters.
func (g *Guard) Stats() (Stats, error) {
	var s Stats
	for i, p := range map[guardGuardStat]*uint64{
		guardGuardStatGUARD_STAT_LOST_EVENTS: &s.LostEvents,
		guardGuardStatGUARD_STAT_BAD_MAGIC:   &s.BadMagic,
		guardGuardStatGUARD_STAT_FILES_FULL:  &s.FilesFull,
	} {
		if err := g.objs.Stats.Lookup(uint32(i), p); err != nil {
			return Stats{}, fmt.Errorf("guard: reading the counters: %w", err)
		}
	}
	return s, nil
}

// Refusal is one refused use of a guarded device.
type Refusal struct {
	Cgroup    uint64 // the guarded (vGPU) cgroup
	OwnCgroup uint64 // the process's own cgroup (Cgroup or a descendant)
	PID, TID  uint32 // in the initial pid namespace
	Comm      string
	Major     uint32
	Minor     uint32
	Op        string // "open", "ioctl", "ioctl32" (a 32-bit process's) or "mmap"
}

func (r Refusal) String() string {
	return fmt.Sprintf("refused %s of device %d:%d to pid %d (%s, thread %d) of vGPU cgroup %d: "+
		"it is not attached to its vGPU (no libgpuslice.so)", r.Op, r.Major, r.Minor, r.PID, r.Comm, r.TID, r.Cgroup)
}

var ops = map[guardGuardHook]string{
	guardGuardHookGUARD_HOOK_OPEN:         "open",
	guardGuardHookGUARD_HOOK_IOCTL:        "ioctl",
	guardGuardHookGUARD_HOOK_MMAP:         "mmap",
	guardGuardHookGUARD_HOOK_IOCTL_COMPAT: "ioctl32",
}

func decodeRefusal(raw []byte) (Refusal, error) {
	var e guardGuardEvent
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &e); err != nil {
		return Refusal{}, fmt.Errorf("guard: a refusal record of %d bytes: %w", len(raw), err)
	}
	comm := make([]byte, 0, len(e.Comm))
	for _, c := range e.Comm {
		if c == 0 {
			break
		}
		comm = append(comm, byte(c))
	}
	op, ok := ops[guardGuardHook(e.Hook)]
	if !ok {
		op = fmt.Sprintf("hook %d", e.Hook)
	}
	return Refusal{Cgroup: e.Cgroup, OwnCgroup: e.OwnCgroup, PID: e.Tgid, TID: e.Pid,
		Comm: string(comm), Major: e.Dev >> 20, Minor: e.Dev & (1<<20 - 1), Op: op}, nil
}

// NextRefusal blocks until a refusal is recorded and returns it; after
// Close it returns an error wrapping ringbuf.ErrClosed.
func (g *Guard) NextRefusal() (Refusal, error) {
	rec, err := g.events.Read()
	if err != nil {
		return Refusal{}, fmt.Errorf("guard: %w", err)
	}
	return decodeRefusal(rec.RawSample)
}
