// Package config is the node agent's configuration: a YAML file (by
// default DefaultPath) and command-line flags over it.
//
// Precedence, lowest first: Default, the file (Load), then the flags the
// command line actually sets (BindFlags and Resolve). A key missing from the
// file, or given an empty value, keeps its default; a flag left unset keeps
// the file's value.
//
// Keys are camelCase and unknown keys are errors, so a misspelt key never
// silently leaves a default in force. Validate names every bad field with
// its allowed range, e.g. "cards[1].maxInst: 70 is out of range 1-64".
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/gpu"
	"github.com/gpuslice/gpuslice/pkg/simgpu"
)

// DefaultPath is the configuration file read when none is named. It may be
// absent: the agent then runs on the defaults and its flags.
const DefaultPath = "/etc/gpuslice/config.yaml"

// The ranges of the numeric settings. They are gpuslice.ko's (CARD_SET in
// kmod/README.md), which the no-module mode follows too.
const (
	MaxPolicy  = 6   // policies 0-6 (kmod.PolicyNative..kmod.PolicyWeightedWeak)
	MaxMaxInst = 64  // compute units (vGPUs) per card: 1-64
	MaxSliceMs = 100 // slice length: 1-100 ms
	// MaxReclaimMs bounds the reclaim window: 1 ms-10 s.
	MaxReclaimMs = 10000
	// MaxMemoryMiB bounds a simulated card's memory (1 TiB), so that a size
	// given in bytes instead of MiB is caught.
	MaxMemoryMiB = 1 << 20
	// The metrics sampling window: 100 ms-60 s.
	MinMetricsWindowMs = 100
	MaxMetricsWindowMs = 60000
)

// Placement is how the agent chooses a card for a new vGPU.
type Placement string

// The placements.
const (
	PlacementBinpack Placement = "binpack" // fill the busiest card that fits first
	PlacementSpread  Placement = "spread"  // use the least loaded card first
)

// Enforcement is how vGPU limits are enforced.
type Enforcement string

// The enforcement modes.
const (
	// EnforcementAuto is EnforcementModule when /dev/gpuslice exists under
	// the device root, else EnforcementFile.
	EnforcementAuto Enforcement = "auto"
	// EnforcementModule uses gpuslice.ko (/dev/gpuslice): the kernel keeps
	// the memory ledger and schedules compute.
	EnforcementModule Enforcement = "module"
	// EnforcementFile is the no-module mode: the shim keeps a shared ledger
	// file per vGPU under LedgerDir.
	EnforcementFile Enforcement = "file"
)

// CDIMode says whether a card is injected through the node's NVIDIA CDI
// spec (kind nvidia.com/gpu) rather than by listing its device nodes.
type CDIMode string

// The CDI modes.
const (
	CDIAuto   CDIMode = "auto"   // use a spec when one exists under CDISpecDirs
	CDINever  CDIMode = "never"  // always inject the device nodes directly
	CDIAlways CDIMode = "always" // require a spec; fail the container without one
)

// DRAMode says whether the agent runs its DRA driver (gpu.gpuslice.io, a
// kubelet plugin) beside its NRI plugin.
type DRAMode string

// The DRA modes.
const (
	// DRAAuto runs it when the agent has Kubernetes credentials (a
	// kubeconfig, or in-cluster ones) and a node name.
	DRAAuto DRAMode = "auto"
	DRAOn   DRAMode = "on"  // run it; without credentials or a node name the agent cannot work
	DRAOff  DRAMode = "off" // never: the annotation route only
)

// GuardMode says whether the agent runs the eBPF guard (pkg/guard), which
// keeps the NVIDIA device nodes from the processes of a vGPU container that
// bypass the shim, and what a node that cannot run it does.
type GuardMode string

// The guard modes.
const (
	// GuardRequired runs the guard; where it cannot run (no BPF LSM, no
	// BTF, not root) containers asking for a vGPU are refused, with why.
	GuardRequired GuardMode = "required"
	// GuardOptional runs the guard where it can; elsewhere vGPU containers
	// run without it, and the agent's log, metrics and status say so.
	GuardOptional GuardMode = "optional"
	// GuardOff never runs it: a process that bypasses the shim uses the
	// card without a cap or a quota. The metrics and status say so.
	GuardOff GuardMode = "off"
)

// Config is the agent's configuration. Its JSON tags are the file's keys.
type Config struct {
	// Policy is every card's default compute policy, 0-MaxPolicy.
	Policy int `json:"policy"`
	// MaxInst is every card's default number of compute units (the most
	// vGPUs it holds), 1-MaxMaxInst.
	MaxInst int `json:"maxInst"`
	// SliceMs is the scheduler's slice length in ms, 1-MaxSliceMs.
	SliceMs int `json:"sliceMs"`
	// ReclaimMs is the scheduler's reclaim window in ms, 1-MaxReclaimMs: a
	// vGPU that has had no work for this long is idle (policies 3 and 6
	// then pass over its units, and a high-priority one lets the others
	// run).
	ReclaimMs int `json:"reclaimMs"`
	// Cards overrides Policy and MaxInst for single cards.
	Cards []CardConfig `json:"cards"`
	// Placement chooses cards for new vGPUs.
	Placement Placement `json:"placement"`
	// Enforcement selects gpuslice.ko or the no-module mode.
	Enforcement Enforcement `json:"enforcement"`
	// Guard says whether the eBPF guard runs (required, optional, off).
	Guard GuardMode `json:"guard"`
	// Shim is the host path of libgpuslice.so.
	Shim string `json:"shim"`
	// ShimMountPath is where the shim appears inside containers.
	ShimMountPath string `json:"shimMountPath"`
	// PreloadFile also mounts an /etc/ld.so.preload naming the shim, for
	// images whose programs clear LD_PRELOAD.
	PreloadFile bool `json:"preloadFile"`
	// StateDir holds the agent's persistent state.
	StateDir string `json:"stateDir"`
	// LedgerDir holds one ledger directory per vGPU (no-module mode).
	LedgerDir string `json:"ledgerDir"`
	// SchedDir holds the cards' shared schedule files (no-module mode),
	// mounted into every container with a compute quota.
	SchedDir string `json:"schedDir"`
	// DeviceRoot is the host root under which /dev/nvidia* and
	// /dev/gpuslice are found ("/"; tests use a scratch root).
	DeviceRoot string `json:"deviceRoot"`
	// CDI says whether cards are injected through an NVIDIA CDI spec.
	CDI CDIMode `json:"cdi"`
	// CDISpecDirs are the directories searched for CDI specs.
	CDISpecDirs []string `json:"cdiSpecDirs"`
	// MetricsAddress is the Prometheus listener (/metrics), host:port;
	// "" disables it.
	MetricsAddress string `json:"metricsAddress"`
	// MetricsWindowMs is how often the agent samples its sources; compute
	// used is the busy time over this window.
	MetricsWindowMs int `json:"metricsWindowMs"`
	// StatusSocket is the unix socket serving GET /v1/status (the node's
	// vGPUs as JSON, for `gpuslice status`); "" disables it.
	StatusSocket string `json:"statusSocket"`
	// NVMLLibrary is the NVML the agent loads (discovery, card figures
	// and health): a soname the loader finds, or an absolute path.
	NVMLLibrary string `json:"nvmlLibrary"`
	// SimulatedCards, when not empty, replaces NVML discovery with this
	// fixed card set (machines without a GPU).
	SimulatedCards []SimulatedCard `json:"simulatedCards"`

	// DRA says whether the DRA driver runs.
	DRA DRAMode `json:"dra"`
	// Kubeconfig is the kubeconfig of the driver's identity (the node's
	// own, /etc/kubernetes/kubelet.conf, is the least privilege); "":
	// in-cluster credentials when the agent runs in a pod.
	Kubeconfig string `json:"kubeconfig"`
	// NodeName is the Kubernetes node's name; "": $NODE_NAME.
	NodeName string `json:"nodeName"`
	// KubeletRootDir is the kubelet's --root-dir: the driver registers in
	// its plugins_registry/ and serves in plugins/gpu.gpuslice.io/.
	KubeletRootDir string `json:"kubeletRootDir"`
	// DRACDIDir is where the driver writes each prepared claim's CDI
	// spec; the runtime must read CDI specs there.
	DRACDIDir string `json:"draCDIDir"`

	// Path is the file the configuration was read from; "" when none was.
	Path string `json:"-"`

	flags *flagSet // the flags of BindFlags, for Resolve
}

// CardConfig overrides the defaults for one card. Index is required; a nil
// Policy or MaxInst keeps the default.
type CardConfig struct {
	Index   *int `json:"index"`
	Policy  *int `json:"policy,omitempty"`
	MaxInst *int `json:"maxInst,omitempty"`
}

// SimulatedCard is one card of a simulated card set. Index and MemoryMiB are
// required; Minor defaults to Index, UUID to the simulated driver's UUID of
// that index (simgpu.UUID: the shim matches devices to cards by it)
// and Name to SimulatedName.
type SimulatedCard struct {
	Index     *int   `json:"index"`
	MemoryMiB int    `json:"memoryMiB"`
	UUID      string `json:"uuid,omitempty"`
	Minor     *int   `json:"minor,omitempty"`
	Name      string `json:"name,omitempty"`
}

// SimulatedName is the product name of simulated cards without a name: the
// simulated driver's (interposer/simcuda) default.
const SimulatedName = "gpuslice simulated GPU"

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		Policy:        1, // fixed: every vGPU gets its quota, idle time is not shared
		MaxInst:       20,
		SliceMs:       5,
		ReclaimMs:     100,
		Placement:     PlacementBinpack,
		Enforcement:   EnforcementAuto,
		Guard:         GuardRequired,
		Shim:          "/usr/lib/gpuslice/libgpuslice.so",
		ShimMountPath: "/usr/local/gpuslice/libgpuslice.so",
		StateDir:      "/var/lib/gpuslice",
		LedgerDir:     "/run/gpuslice/ledger",
		SchedDir:      "/run/gpuslice/sched",
		DeviceRoot:    "/",
		CDI:           CDIAuto,
		CDISpecDirs:   []string{"/etc/cdi", "/var/run/cdi"},
		// Local only by default: the figures name the node's pods.
		MetricsAddress:  "127.0.0.1:9410",
		MetricsWindowMs: 1000,
		StatusSocket:    "/run/gpuslice/agent.sock",
		NVMLLibrary:     gpu.DefaultNVMLLibrary,
		DRA:             DRAAuto,
		KubeletRootDir:  "/var/lib/kubelet",
		DRACDIDir:       "/var/run/cdi",
	}
}

// NodeNameOrEnv is NodeName, or $NODE_NAME when it is empty.
func (c *Config) NodeNameOrEnv() string {
	if c.NodeName != "" {
		return c.NodeName
	}
	return os.Getenv("NODE_NAME")
}

// CardSettings returns card index's policy and compute units: its entry in
// Cards where it has one, else the defaults Policy and MaxInst.
func (c *Config) CardSettings(index int) (policy, maxInst int) {
	policy, maxInst = c.Policy, c.MaxInst
	for _, cc := range c.Cards {
		if cc.Index == nil || *cc.Index != index {
			continue
		}
		if cc.Policy != nil {
			policy = *cc.Policy
		}
		if cc.MaxInst != nil {
			maxInst = *cc.MaxInst
		}
	}
	return policy, maxInst
}

// SimulatedGPUCards returns SimulatedCards as gpu.Cards, defaults filled in.
func (c *Config) SimulatedGPUCards() []gpu.Card {
	var cards []gpu.Card
	for _, s := range c.SimulatedCards {
		g := gpu.Card{Name: s.Name, UUID: s.UUID, MemoryBytes: uint64(max(s.MemoryMiB, 0)) << 20,
			DriverVersion: simgpu.DriverVersion}
		if s.Index != nil {
			g.Index = *s.Index
		}
		g.Minor = g.Index
		if s.Minor != nil {
			g.Minor = *s.Minor
		}
		if g.UUID == "" {
			g.UUID = simgpu.UUID(g.Index)
		}
		if g.Name == "" {
			g.Name = SimulatedName
		}
		cards = append(cards, g)
	}
	return cards
}

// Discoverer returns the card discoverer the configuration asks for: the
// simulated card set when SimulatedCards is not empty (NVML is then never
// loaded), else NVML.
func (c *Config) Discoverer() (gpu.Discoverer, error) {
	if len(c.SimulatedCards) > 0 {
		return gpu.NewStatic(c.SimulatedGPUCards())
	}
	return gpu.NewNVML(c.NVMLLibrary), nil
}

// ModuleDevice is gpuslice.ko's device node, relative to DeviceRoot.
const ModuleDevice = "/dev/gpuslice"

// EffectiveEnforcement resolves EnforcementAuto: EnforcementModule when
// ModuleDevice exists under DeviceRoot, else EnforcementFile. Other modes
// are returned as they are.
func (c *Config) EffectiveEnforcement() Enforcement {
	if c.Enforcement != EnforcementAuto {
		return c.Enforcement
	}
	if _, err := os.Stat(filepath.Join(c.DeviceRoot, ModuleDevice)); err == nil {
		return EnforcementModule
	}
	return EnforcementFile
}

// Validate checks every field and reports every problem, one per line, each
// naming the field (as its key in the file) and what it allows.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, a...)...))
	}
	inRange := func(field string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(field, "%d is out of range %d-%d", v, lo, hi)
		}
	}
	absPath := func(field, p string) {
		if !filepath.IsAbs(p) {
			bad(field, "%q is not an absolute path: give a path starting with /", p)
		}
	}
	oneOf := func(field, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad(field, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
	const lastCard = gpu.MaxCards - 1

	inRange("policy", c.Policy, 0, MaxPolicy)
	inRange("maxInst", c.MaxInst, 1, MaxMaxInst)
	inRange("sliceMs", c.SliceMs, 1, MaxSliceMs)
	inRange("reclaimMs", c.ReclaimMs, 1, MaxReclaimMs)

	seen := map[int]int{}
	for i, cc := range c.Cards {
		f := fmt.Sprintf("cards[%d]", i)
		switch j, dup := seen[deref(cc.Index)]; {
		case cc.Index == nil:
			bad(f+".index", "missing: say which card (0-%d) the entry is for", lastCard)
		case *cc.Index < 0 || *cc.Index > lastCard:
			inRange(f+".index", *cc.Index, 0, lastCard)
		case dup:
			bad(f+".index", "card %d already has an entry (cards[%d]): merge the two", *cc.Index, j)
		default:
			seen[*cc.Index] = i
		}
		if cc.Policy != nil {
			inRange(f+".policy", *cc.Policy, 0, MaxPolicy)
		}
		if cc.MaxInst != nil {
			inRange(f+".maxInst", *cc.MaxInst, 1, MaxMaxInst)
		}
	}

	oneOf("placement", string(c.Placement), string(PlacementBinpack), string(PlacementSpread))
	oneOf("enforcement", string(c.Enforcement),
		string(EnforcementAuto), string(EnforcementModule), string(EnforcementFile))
	oneOf("guard", string(c.Guard), string(GuardRequired), string(GuardOptional), string(GuardOff))
	absPath("shim", c.Shim)
	absPath("shimMountPath", c.ShimMountPath)
	absPath("stateDir", c.StateDir)
	absPath("ledgerDir", c.LedgerDir)
	absPath("schedDir", c.SchedDir)
	absPath("deviceRoot", c.DeviceRoot)
	oneOf("cdi", string(c.CDI), string(CDIAuto), string(CDINever), string(CDIAlways))
	for i, d := range c.CDISpecDirs {
		absPath(fmt.Sprintf("cdiSpecDirs[%d]", i), d)
	}
	if c.CDI == CDIAlways && len(c.CDISpecDirs) == 0 {
		bad("cdiSpecDirs", "empty, but cdi is always: list the directories of the CDI specs")
	}
	if err := checkListenAddress(c.MetricsAddress); err != nil {
		bad("metricsAddress", "%q %v: give host:port or :port, or \"\" to disable metrics", c.MetricsAddress, err)
	}
	inRange("metricsWindowMs", c.MetricsWindowMs, MinMetricsWindowMs, MaxMetricsWindowMs)
	if c.StatusSocket != "" {
		absPath("statusSocket", c.StatusSocket)
	}
	if err := checkLibrary(c.NVMLLibrary); err != nil {
		bad("nvmlLibrary", "%q %v", c.NVMLLibrary, err)
	}
	oneOf("dra", string(c.DRA), string(DRAAuto), string(DRAOn), string(DRAOff))
	if c.Kubeconfig != "" {
		absPath("kubeconfig", c.Kubeconfig)
	}
	if c.NodeName != "" && !validNodeName(c.NodeName) {
		bad("nodeName", "%q is not a node name: lower-case letters, digits, '-' and '.', at most 253", c.NodeName)
	}
	absPath("kubeletRootDir", c.KubeletRootDir)
	absPath("draCDIDir", c.DRACDIDir)
	errs = append(errs, c.validateSimulated()...)
	return errors.Join(errs...)
}

// validateSimulated checks SimulatedCards.
func (c *Config) validateSimulated() []error {
	var errs []error
	index, minor, uuid := map[int]int{}, map[int]int{}, map[string]int{}
	cards := c.SimulatedGPUCards()
	for i, s := range c.SimulatedCards {
		f := fmt.Sprintf("simulatedCards[%d]", i)
		if s.Index == nil {
			errs = append(errs, fmt.Errorf("%s.index: missing: number the simulated cards from 0 (0-%d)",
				f, gpu.MaxCards-1))
		} else if *s.Index < 0 || *s.Index >= gpu.MaxCards {
			errs = append(errs, fmt.Errorf("%s.index: %d is out of range 0-%d", f, *s.Index, gpu.MaxCards-1))
		} else if j, dup := index[*s.Index]; dup {
			errs = append(errs, fmt.Errorf("%s.index: %d is also simulatedCards[%d]'s: give each card its own index",
				f, *s.Index, j))
		} else {
			index[*s.Index] = i
		}
		if s.MemoryMiB < 1 || s.MemoryMiB > MaxMemoryMiB {
			errs = append(errs, fmt.Errorf("%s.memoryMiB: %d is out of range 1-%d (the card's memory in MiB)",
				f, s.MemoryMiB, MaxMemoryMiB))
		}
		if s.Minor != nil && *s.Minor < 0 {
			errs = append(errs, fmt.Errorf("%s.minor: %d is negative: give N >= 0 of /dev/nvidiaN (default: the index)",
				f, *s.Minor))
		}
		g := cards[i]
		if g.Minor >= 0 {
			if j, dup := minor[g.Minor]; dup {
				errs = append(errs, fmt.Errorf("%s.minor: %d is also simulatedCards[%d]'s (the minor defaults to the index): "+
					"two cards cannot share /dev/nvidia%d", f, g.Minor, j, g.Minor))
			} else {
				minor[g.Minor] = i
			}
		}
		if j, dup := uuid[g.UUID]; dup {
			errs = append(errs, fmt.Errorf("%s.uuid: %q is also simulatedCards[%d]'s: UUIDs must be unique",
				f, g.UUID, j))
		} else {
			uuid[g.UUID] = i
		}
	}
	return errs
}

// deref is *p, or -1 for nil.
func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// checkListenAddress accepts "" and host:port with a port of 0-65535.
func checkListenAddress(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("is not host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return errors.New("has no port number in 0-65535")
	}
	return nil
}

// checkLibrary accepts a soname (no '/': the loader searches for it) or an
// absolute path.
func checkLibrary(lib string) error {
	if lib == "" {
		return errors.New("is empty: give a soname such as " + gpu.DefaultNVMLLibrary + " or an absolute path")
	}
	if strings.Contains(lib, "/") && !filepath.IsAbs(lib) {
		return errors.New("is a relative path: give a soname (no /) or an absolute path")
	}
	return nil
}

// validNodeName accepts a DNS subdomain, as Kubernetes names nodes.
func validNodeName(n string) bool {
	if len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
