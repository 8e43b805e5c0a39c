package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpuslice/gpuslice/pkg/state"
)

// Layout is where the agent finds things on the host and puts them in
// containers.
type Layout struct {
	ShimHost      string // libgpuslice.so on the host
	ShimContainer string // where containers see it (mounted read-only)
	// PreloadHost is a file naming the shim (at ShimContainer), mounted
	// as /etc/ld.so.preload: in every container of a DRA claim, and in
	// those asking by annotations with PreloadAnnotated. "": none, and
	// claims are refused.
	PreloadHost      string
	PreloadAnnotated bool
	LedgerRoot       string // file mode: per-container ledger directories, on the host
	LedgerContainer  string // file mode: where a container sees its ledger directory
	SchedRoot        string // file mode: the cards' schedule files, on the host
	SchedContainer   string // file mode: where containers see them
	DeviceRoot       string // the host root /dev/nvidia* and /dev/gpuslice are under
	CgroupRoot       string // module mode: the host's cgroup v2 mount
}

// CDIResolver names the CDI device of a card when the host has an NVIDIA
// CDI spec for it ("nvidia.com/gpu=0"), or returns "".
type CDIResolver func(c Card) string

// adjustment is what a container with allocation al gets through NRI:
// the injection, and the shim first in its LD_PRELOAD.
func (a *Agent) adjustment(ctr *api.Container, al state.Allocation) (*api.ContainerAdjustment, error) {
	in, err := a.injection(al, a.opts.Layout.PreloadAnnotated)
	if err != nil {
		return nil, err
	}
	adj := &api.ContainerAdjustment{}
	for _, name := range in.CDIDevices {
		adj.AddCDIDevice(&api.CDIDevice{Name: name})
	}
	for _, d := range in.Devices {
		adj.AddDevice(&api.LinuxDevice{Path: d.Path, Type: "c", Major: d.Major, Minor: d.Minor,
			FileMode: api.FileMode(0o666), Uid: api.UInt32(0), Gid: api.UInt32(0)})
	}
	for k, v := range in.Env {
		adj.AddEnv(k, v)
	}
	adj.AddEnv("LD_PRELOAD", preload(a.opts.Layout.ShimContainer, ctr.GetEnv()))
	for _, m := range in.Mounts {
		adj.AddMount(&api.Mount{Source: m.Source, Destination: m.Destination, Type: "bind", Options: m.Options})
	}
	return adj, nil
}

// device describes the host's node for path (under the device root).
func (a *Agent) device(path string) (DeviceNode, error) {
	host := filepath.Join(a.opts.Layout.DeviceRoot, path)
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil {
		what := "the NVIDIA driver"
		if path == "/dev/gpuslice" {
			what = "gpuslice.ko"
		}
		return DeviceNode{}, fmt.Errorf("device %s: %w (is %s loaded?)", host, err, what)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		return DeviceNode{}, fmt.Errorf("device %s is not a character device", host)
	}
	return DeviceNode{Path: path, HostPath: host,
		Major: int64(unixMajor(st.Rdev)), Minor: int64(unixMinor(st.Rdev))}, nil
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
