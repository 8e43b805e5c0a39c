package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpuslice/gpuslice/pkg/state"
)

// Layout is where the agent finds things on the host and puts them in
// containers.
type Layout struct {
	ShimHost        string // libgpuslice.so on the host
	ShimContainer   string // where containers see it (mounted read-only)
	PreloadHost     string // "": no /etc/ld.so.preload; else the file to mount there
	LedgerRoot      string // file mode: per-container ledger directories, on the host
	LedgerContainer string // file mode: where a container sees its ledger directory
	SchedRoot       string // file mode: the cards' schedule files, on the host
	SchedContainer  string // file mode: where containers see them
	DeviceRoot      string // the host root /dev/nvidia* and /dev/gpuslice are under
	CgroupRoot      string // module mode: the host's cgroup v2 mount
}

// CDIResolver names the CDI device of a card when the host has an NVIDIA
// CDI spec for it ("nvidia.com/gpu=0"), or returns "".
type CDIResolver func(c Card) string

// The control nodes every NVIDIA container needs besides its cards.
var nvidiaControlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// adjustment is what a container with allocation al gets.
func (a *Agent) adjustment(ctr *api.Container, al state.Allocation) (*api.ContainerAdjustment, error) {
	adj := &api.ContainerAdjustment{}
	if err := a.addDevices(adj, al); err != nil {
		return nil, err
	}
	for k, v := range a.env(ctr, al) {
		adj.AddEnv(k, v)
	}
	a.addMounts(adj, al)
	return adj, nil
}

// env is the xGPU variables (reference.md section 2), one list entry per
// card in the order of the request, and the shim's own.
func (a *Agent) env(ctr *api.Container, al state.Allocation) map[string]string {
	var idx, mem, pct, pol, uuids []string
	for _, v := range al.VGPUs {
		c := a.byIdx[v.Card]
		idx = append(idx, strconv.Itoa(v.Card))
		mem = append(mem, strconv.FormatUint(v.MemoryBytes>>20, 10))
		pct = append(pct, strconv.FormatUint(uint64(v.Cores), 10))
		pol = append(pol, strconv.Itoa(c.Policy))
		if c.UUID != "" {
			uuids = append(uuids, c.UUID)
		}
	}
	l := a.opts.Layout
	env := map[string]string{
		"GPU_IDX":                     strings.Join(idx, ","),
		"GPU_CONTAINER_MEM":           strings.Join(mem, ","),
		"GPU_CONTAINER_QUOTA_PERCENT": strings.Join(pct, ","),
		"GPU_POLICY":                  strings.Join(pol, ","),
		"GPU_CONTAINER_PRIORITY":      strconv.Itoa(al.VGPUs[0].Priority),
		"GPUSLICE_ENFORCE":            al.Enforce,
		// CUDA's ordinals in PCI order, as NVML's and GPU_IDX's: the
		// shim's rule when it cannot match devices by UUID.
		"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
		"LD_PRELOAD":        preload(l.ShimContainer, ctr.GetEnv()),
	}
	if len(uuids) == len(al.VGPUs) {
		// For NVIDIA's container toolkit, where it runs: these cards only.
		env["NVIDIA_VISIBLE_DEVICES"] = strings.Join(uuids, ",")
		// For the shim: which device is which card, by UUID, whatever
		// CUDA_VISIBLE_DEVICES the application sets (GPU_IDX's order).
		env["GPUSLICE_CARD_UUIDS"] = strings.Join(uuids, ",")
	}
	if al.Enforce == EnforceFile {
		env["GPUSLICE_LEDGER_DIR"] = l.LedgerContainer
		// The no-module compute gate: the cards' shared schedule files,
		// this container's key in them, and the settings a file is
		// created with (the first card's: one value for all cards).
		first := a.byIdx[al.VGPUs[0].Card]
		env["GPUSLICE_SCHED_DIR"] = l.SchedContainer
		env["GPUSLICE_VGPU"] = al.Container
		env["GPUSLICE_MAX_INST"] = strconv.Itoa(first.MaxInst)
		env["GPUSLICE_SLICE_MS"] = strconv.FormatUint(max(a.opts.SliceNs/1e6, 1), 10)
		if a.opts.ReclaimNs > 0 { // else the shim's default, as the module's
			env["GPUSLICE_RECLAIM_MS"] = strconv.FormatUint(max(a.opts.ReclaimNs/1e6, 1), 10)
		}
	}
	return env
}

// preload puts the shim first in the container's LD_PRELOAD, keeping what
// the image already preloads.
func preload(shim string, env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok && v != "" {
			return shim + ":" + v
		}
	}
	return shim
}

func (a *Agent) addMounts(adj *api.ContainerAdjustment, al state.Allocation) {
	l := a.opts.Layout
	adj.AddMount(&api.Mount{Source: l.ShimHost, Destination: l.ShimContainer, Type: "bind",
		Options: []string{"bind", "ro", "nosuid", "nodev"}})
	if l.PreloadHost != "" {
		adj.AddMount(&api.Mount{Source: l.PreloadHost, Destination: "/etc/ld.so.preload",
			Type: "bind", Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	if al.Enforce == EnforceFile {
		adj.AddMount(&api.Mount{Source: al.LedgerDir, Destination: l.LedgerContainer,
			Type: "bind", Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
		adj.AddMount(&api.Mount{Source: l.SchedRoot, Destination: l.SchedContainer,
			Type: "bind", Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}
}

// addDevices gives the container its cards (through CDI where the host has
// a spec for them), the control nodes and, in module mode, /dev/gpuslice.
func (a *Agent) addDevices(adj *api.ContainerAdjustment, al state.Allocation) error {
	var paths []string
	cdi := 0
	for _, v := range al.VGPUs {
		c := a.byIdx[v.Card]
		if a.opts.CDI != nil {
			if name := a.opts.CDI(c); name != "" {
				adj.AddCDIDevice(&api.CDIDevice{Name: name})
				cdi++
				continue
			}
		}
		paths = append(paths, fmt.Sprintf("/dev/nvidia%d", c.Minor))
	}
	if cdi < len(al.VGPUs) {
		// The CDI spec brings the control nodes with its devices.
		paths = append(paths, nvidiaControlNodes...)
	}
	if al.Enforce == EnforceModule {
		paths = append(paths, "/dev/gpuslice")
	}
	for _, p := range paths {
		d, err := a.device(p)
		if err != nil {
			return err
		}
		adj.AddDevice(d)
	}
	return nil
}

// device describes the host's node for path (under the device root).
func (a *Agent) device(path string) (*api.LinuxDevice, error) {
	host := filepath.Join(a.opts.Layout.DeviceRoot, path)
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil {
		what := "the NVIDIA driver"
		if path == "/dev/gpuslice" {
			what = "gpuslice.ko"
		}
		return nil, fmt.Errorf("device %s: %w (is %s loaded?)", host, err, what)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		return nil, fmt.Errorf("device %s is not a character device", host)
	}
	return &api.LinuxDevice{
		Path:     path,
		Type:     "c",
		Major:    int64(unixMajor(st.Rdev)),
		Minor:    int64(unixMinor(st.Rdev)),
		FileMode: api.FileMode(0o666),
		Uid:      api.UInt32(0),
		Gid:      api.UInt32(0),
	}, nil
}

// Linux's dev_t encoding (glibc's gnu_dev_major/minor).
func unixMajor(dev uint64) uint32 {
	return uint32((dev>>8)&0xfff) | uint32((dev>>32)&^0xfff)
}

func unixMinor(dev uint64) uint32 {
	return uint32(dev&0xff) | uint32((dev>>12)&^0xff)
}

// makeLedgerDir creates the container's ledger directory (file mode),
// writable by every user of the container: the shim creates the ledger
// file in it on first use.
func (a *Agent) makeLedgerDir(container string) (string, error) {
	// The id names a directory the agent later removes as root.
	if !validID(container) {
		return "", fmt.Errorf("container id %q: want letters, digits, '-', '_' or '.'", container)
	}
	dir := filepath.Join(a.opts.Layout.LedgerRoot, container)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("ledger directory: %w", err)
	}
	// 1777 like /tmp, set explicitly: MkdirAll is subject to the umask.
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		return "", fmt.Errorf("ledger directory: %w", err)
	}
	return dir, nil
}

func (a *Agent) removeLedgerDir(al state.Allocation) {
	if al.LedgerDir == "" {
		return
	}
	if err := os.RemoveAll(al.LedgerDir); err != nil {
		a.opts.Log.Error("removing a ledger directory", "dir", al.LedgerDir, "error", err)
	}
}

// validID accepts runtime container ids (containerd's are 64 hex digits)
// and nothing that could leave the ledger root.
func validID(id string) bool {
	if id == "" || id == "." || id == ".." || len(id) > 128 {
		return false
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '_' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}
