package agent

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/state"
)

// Injection is what a container of an allocation gets, whichever door it
// came in by: the NRI adjustment of a container asking by annotations
// (adjustment), or the CDI spec of a DRA claim (ClaimInjection). One
// builder, so the two cannot drift apart.
type Injection struct {
	// Env is the xGPU variables and the shim's; never LD_PRELOAD, which
	// depends on the image's own (see preload).
	Env     map[string]string
	Devices []DeviceNode // host device nodes, in order
	// CDIDevices are the NVIDIA CDI devices ("nvidia.com/gpu=0") of the
	// cards the host has a spec for, in place of their device nodes.
	CDIDevices []string
	Mounts     []Mount
}

// DeviceNode is a host character device given to a container.
type DeviceNode struct {
	Path     string // in the container: /dev/nvidia0
	HostPath string // under the agent's device root
	Major    int64
	Minor    int64
}

// Mount is a bind mount into a container.
type Mount struct {
	Source      string // host path
	Destination string
	Options     []string
}

// The control nodes every NVIDIA container needs besides its cards.
var nvidiaControlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// PreloadPath is where containers see the file naming the shim.
const PreloadPath = "/etc/ld.so.preload"

// injection builds what a container of al gets; preloadFile adds the
// /etc/ld.so.preload naming the shim (Layout.PreloadHost).
func (a *Agent) injection(al state.Allocation, preloadFile bool) (Injection, error) {
	in := Injection{Env: a.env(al)}
	if err := a.addDevices(&in, al); err != nil {
		return Injection{}, err
	}
	in.Mounts = a.mounts(al, preloadFile)
	return in, nil
}

// env is the xGPU variables (reference.md section 2), one list entry per
// card in the order of the request, and the shim's own.
func (a *Agent) env(al state.Allocation) map[string]string {
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
		// this allocation's key in them, and the settings a file is
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
// the image already preloads (once: a container created again already
// has it first).
func preload(shim string, env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok && v != "" {
			if v == shim || strings.HasPrefix(v, shim+":") {
				return v
			}
			return shim + ":" + v
		}
	}
	return shim
}

func (a *Agent) mounts(al state.Allocation, preloadFile bool) []Mount {
	l := a.opts.Layout
	out := []Mount{{Source: l.ShimHost, Destination: l.ShimContainer,
		Options: []string{"bind", "ro", "nosuid", "nodev"}}}
	if preloadFile {
		out = append(out, Mount{Source: l.PreloadHost, Destination: PreloadPath,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	if al.Enforce == EnforceFile {
		out = append(out,
			Mount{Source: al.LedgerDir, Destination: l.LedgerContainer,
				Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
			Mount{Source: l.SchedRoot, Destination: l.SchedContainer,
				Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}
	return out
}

// addDevices gives the container its cards (through CDI where the host has
// a spec for them), the control nodes and, in module mode, /dev/gpuslice.
func (a *Agent) addDevices(in *Injection, al state.Allocation) error {
	var paths []string
	for _, v := range al.VGPUs {
		c := a.byIdx[v.Card]
		if a.opts.CDI != nil {
			if name := a.opts.CDI(c); name != "" {
				in.CDIDevices = append(in.CDIDevices, name)
				continue
			}
		}
		paths = append(paths, fmt.Sprintf("/dev/nvidia%d", c.Minor))
	}
	if len(in.CDIDevices) < len(al.VGPUs) {
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
		in.Devices = append(in.Devices, d)
	}
	return nil
}
