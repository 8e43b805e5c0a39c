package config

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/gpu"
)

// flagSet is what BindFlags registered on a FlagSet.
type flagSet struct {
	fs        *flag.FlagSet
	config    string               // -config
	overrides map[string]*override // by flag name
}

// override is a flag.Value that parses its text into a change of the
// configuration, applied by Resolve only when the flag was set.
type override struct {
	text   string
	parse  func(s string) (func(*Config), error)
	apply  func(*Config)
	isBool bool
}

func (o *override) String() string { return o.text }

// IsBoolFlag lets a bool flag stand alone (-preload-file).
func (o *override) IsBoolFlag() bool { return o.isBool }

func (o *override) Set(s string) error {
	apply, err := o.parse(s)
	if err != nil {
		return err
	}
	o.text, o.apply = s, apply
	return nil
}

// BindFlags registers the agent's flags on fs: -config, the file to read,
// and one flag per setting, which overrides the file's value when given on
// the command line:
//
//	-policy -max-inst -slice-ms -reclaim-ms -placement -enforcement -guard
//	-shim -shim-mount-path -preload-file -state-dir -ledger-dir -sched-dir -device-root
//	-cdi -cdi-spec-dirs -metrics-address -metrics-window-ms -status-socket
//	-nvml-library -simulate -dra -kubeconfig -node-name -kubelet-root-dir
//	-dra-cdi-dir
//
// Flag values are checked as they are parsed, so fs.Parse reports a bad
// one by its flag name. After fs.Parse, call Resolve. The help shows the
// built-in defaults; c's current values play no part.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	f := &flagSet{fs: fs, overrides: map[string]*override{}}
	c.flags = f
	fs.StringVar(&f.config, "config", DefaultPath,
		"configuration `file` (YAML); the default one may be absent, a named one must exist")
	d := Default()
	add := func(name, def, usage string, parse func(string) (func(*Config), error)) *override {
		o := &override{text: def, parse: parse}
		f.overrides[name] = o
		fs.Var(o, name, usage)
		return o
	}
	intFlag := func(name string, def, lo, hi int, usage string, set func(*Config, int)) {
		add(name, strconv.Itoa(def), fmt.Sprintf("%s, %d-%d", usage, lo, hi), func(s string) (func(*Config), error) {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("%q is not an integer: give %d-%d", s, lo, hi)
			}
			if n < lo || n > hi {
				return nil, fmt.Errorf("%d is out of range %d-%d", n, lo, hi)
			}
			return func(c *Config) { set(c, n) }, nil
		})
	}
	choiceFlag := func(name, def, usage string, set func(*Config, string), allowed ...string) {
		list := strings.Join(allowed, " | ")
		add(name, def, fmt.Sprintf(usage, list), func(s string) (func(*Config), error) {
			for _, a := range allowed {
				if s == a {
					return func(c *Config) { set(c, s) }, nil
				}
			}
			return nil, fmt.Errorf("%q is not one of %s", s, list)
		})
	}
	pathFlag := func(name, def, usage string, set func(*Config, string)) {
		add(name, def, usage+" (absolute path)", func(s string) (func(*Config), error) {
			if !filepath.IsAbs(s) {
				return nil, fmt.Errorf("%q is not an absolute path: give a path starting with /", s)
			}
			return func(c *Config) { set(c, s) }, nil
		})
	}

	intFlag("policy", d.Policy, 0, MaxPolicy, "default compute `policy` of every card",
		func(c *Config, n int) { c.Policy = n })
	intFlag("max-inst", d.MaxInst, 1, MaxMaxInst, "default `n`umber of compute units (most vGPUs) per card",
		func(c *Config, n int) { c.MaxInst = n })
	intFlag("slice-ms", d.SliceMs, 1, MaxSliceMs, "scheduler slice length in `ms`",
		func(c *Config, n int) { c.SliceMs = n })
	intFlag("reclaim-ms", d.ReclaimMs, 1, MaxReclaimMs, "scheduler reclaim window in `ms` (a vGPU without work for so long is idle)",
		func(c *Config, n int) { c.ReclaimMs = n })
	choiceFlag("placement", string(d.Placement), "placement `mode` of new vGPUs: %s",
		func(c *Config, s string) { c.Placement = Placement(s) },
		string(PlacementBinpack), string(PlacementSpread))
	choiceFlag("enforcement", string(d.Enforcement), "limit enforcement `mode`: %s (auto: module when /dev/gpuslice exists)",
		func(c *Config, s string) { c.Enforcement = Enforcement(s) },
		string(EnforcementAuto), string(EnforcementModule), string(EnforcementFile))
	choiceFlag("guard", string(d.Guard), "eBPF guard `mode`: %s (required: refuse vGPU containers where it cannot run)",
		func(c *Config, s string) { c.Guard = GuardMode(s) },
		string(GuardRequired), string(GuardOptional), string(GuardOff))
	pathFlag("shim", d.Shim, "host `path` of libgpuslice.so",
		func(c *Config, s string) { c.Shim = s })
	pathFlag("shim-mount-path", d.ShimMountPath, "`path` of the shim inside containers",
		func(c *Config, s string) { c.ShimMountPath = s })
	// Default text "": the help leaves out "(default false)".
	add("preload-file", "", "also mount an /etc/ld.so.preload naming the shim",
		func(s string) (func(*Config), error) {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return nil, fmt.Errorf("%q is not true or false", s)
			}
			return func(c *Config) { c.PreloadFile = b }, nil
		}).isBool = true
	pathFlag("state-dir", d.StateDir, "the agent's state `dir`ectory",
		func(c *Config, s string) { c.StateDir = s })
	pathFlag("ledger-dir", d.LedgerDir, "parent `dir`ectory of the per-vGPU ledger directories (no-module mode)",
		func(c *Config, s string) { c.LedgerDir = s })
	pathFlag("sched-dir", d.SchedDir, "`dir`ectory of the cards' shared schedule files (no-module mode)",
		func(c *Config, s string) { c.SchedDir = s })
	pathFlag("device-root", d.DeviceRoot, "host root `dir`ectory under which /dev/nvidia* and /dev/gpuslice are found",
		func(c *Config, s string) { c.DeviceRoot = s })
	choiceFlag("cdi", string(d.CDI), "CDI `mode`, whether cards are injected through an NVIDIA CDI spec: %s",
		func(c *Config, s string) { c.CDI = CDIMode(s) },
		string(CDIAuto), string(CDINever), string(CDIAlways))
	add("cdi-spec-dirs", strings.Join(d.CDISpecDirs, ","), "comma-separated CDI spec directories, `dirs` (\"\": none)",
		func(s string) (func(*Config), error) {
			dirs, err := parseDirs(s)
			if err != nil {
				return nil, err
			}
			return func(c *Config) { c.CDISpecDirs = dirs }, nil
		})
	add("metrics-address", d.MetricsAddress, "metrics listener `host:port` (\"\": disabled)",
		func(s string) (func(*Config), error) {
			if err := checkListenAddress(s); err != nil {
				return nil, fmt.Errorf("%q %v: give host:port or :port, or \"\" to disable metrics", s, err)
			}
			return func(c *Config) { c.MetricsAddress = s }, nil
		})
	intFlag("metrics-window-ms", d.MetricsWindowMs, MinMetricsWindowMs, MaxMetricsWindowMs,
		"metrics sampling window in `ms` (compute used is measured over it)",
		func(c *Config, n int) { c.MetricsWindowMs = n })
	add("status-socket", d.StatusSocket, "unix socket `path` of GET /v1/status (\"\": disabled; absolute path)",
		func(s string) (func(*Config), error) {
			if s != "" && !filepath.IsAbs(s) {
				return nil, fmt.Errorf("%q is not an absolute path: give a path starting with /, or \"\" to disable", s)
			}
			return func(c *Config) { c.StatusSocket = s }, nil
		})
	add("nvml-library", d.NVMLLibrary, "NVML `library` to load: a soname or an absolute path",
		func(s string) (func(*Config), error) {
			if err := checkLibrary(s); err != nil {
				return nil, fmt.Errorf("%q %v", s, err)
			}
			return func(c *Config) { c.NVMLLibrary = s }, nil
		})
	choiceFlag("dra", string(d.DRA), "DRA driver `mode` (gpu.gpuslice.io): %s (auto: when Kubernetes credentials and a node name are found)",
		func(c *Config, s string) { c.DRA = DRAMode(s) },
		string(DRAAuto), string(DRAOn), string(DRAOff))
	add("kubeconfig", "", "kubeconfig `file` of the DRA driver (\"\": in-cluster credentials; absolute path)",
		func(s string) (func(*Config), error) {
			if s != "" && !filepath.IsAbs(s) {
				return nil, fmt.Errorf("%q is not an absolute path: give a path starting with /, or \"\" for in-cluster credentials", s)
			}
			return func(c *Config) { c.Kubeconfig = s }, nil
		})
	add("node-name", "", "the Kubernetes node's `name` (\"\": $NODE_NAME)",
		func(s string) (func(*Config), error) {
			if s != "" && !validNodeName(s) {
				return nil, fmt.Errorf("%q is not a node name: lower-case letters, digits, '-' and '.'", s)
			}
			return func(c *Config) { c.NodeName = s }, nil
		})
	pathFlag("kubelet-root-dir", d.KubeletRootDir, "the kubelet's root `dir`ectory (its plugins_registry/ and plugins/)",
		func(c *Config, s string) { c.KubeletRootDir = s })
	pathFlag("dra-cdi-dir", d.DRACDIDir, "`dir`ectory of the DRA claims' CDI specs (the runtime must read it)",
		func(c *Config, s string) { c.DRACDIDir = s })
	add("simulate", "", "simulated `cards` instead of NVML, index:MiB[:minor],... e.g. 0:16384,1:16384 (\"\": none)",
		func(s string) (func(*Config), error) {
			cards, err := ParseSimulate(s)
			if err != nil {
				return nil, err
			}
			return func(c *Config) { c.SimulatedCards = cards }, nil
		})
}

// Resolve completes a configuration bound with BindFlags, after fs.Parse:
// it loads the file named by -config (see Load; the file must exist when
// -config is given), applies the flags set on the command line over it,
// validates the result and stores it in c.
func (c *Config) Resolve(fs *flag.FlagSet) error {
	f := c.flags
	if f == nil || f.fs != fs {
		return errors.New("config: Resolve needs the FlagSet given to BindFlags")
	}
	if !fs.Parsed() {
		return errors.New("config: Resolve called before the flags were parsed")
	}
	named := false
	fs.Visit(func(fl *flag.Flag) { named = named || fl.Name == "config" })
	loaded, err := load(f.config, !named)
	if err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) {
		if o, ours := f.overrides[fl.Name]; ours && o.apply != nil {
			o.apply(&loaded)
		}
	})
	if err := loaded.Validate(); err != nil {
		if loaded.Path != "" {
			return fmt.Errorf("config file %s with the flags: %w", loaded.Path, err)
		}
		return err
	}
	loaded.flags = f
	*c = loaded
	return nil
}

// ParseSimulate parses the -simulate list: comma-separated index:MiB or
// index:MiB:minor entries ("0:16384,1:16384:4"); "" is no cards. The minor
// number defaults to the index.
func ParseSimulate(s string) ([]SimulatedCard, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var cards []SimulatedCard
	index, minor := map[int]int{}, map[int]int{}
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		bad := func(format string, a ...any) error {
			return fmt.Errorf("entry %d (%q): %s: write index:MiB[:minor], e.g. 0:16384", i+1, e,
				fmt.Sprintf(format, a...))
		}
		parts := strings.Split(e, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, bad("expected 2 or 3 numbers separated by ':'")
		}
		n := make([]int, len(parts))
		for j, p := range parts {
			v, err := strconv.Atoi(p)
			if err != nil {
				return nil, bad("%q is not a number", p)
			}
			n[j] = v
		}
		idx, mnr := n[0], n[0]
		if len(n) == 3 {
			mnr = n[2]
		}
		c := SimulatedCard{Index: &idx, MemoryMiB: n[1], Minor: &mnr}
		switch {
		case n[0] < 0 || n[0] >= gpu.MaxCards:
			return nil, bad("index %d is out of range 0-%d", n[0], gpu.MaxCards-1)
		case n[1] < 1 || n[1] > MaxMemoryMiB:
			return nil, bad("memory %d MiB is out of range 1-%d", n[1], MaxMemoryMiB)
		case *c.Minor < 0:
			return nil, bad("minor %d is negative", *c.Minor)
		}
		if j, dup := index[n[0]]; dup {
			return nil, bad("index %d is also entry %d's", n[0], j)
		}
		if j, dup := minor[*c.Minor]; dup {
			return nil, bad("minor %d is also entry %d's (the minor defaults to the index)", *c.Minor, j)
		}
		index[n[0]], minor[*c.Minor] = i+1, i+1
		cards = append(cards, c)
	}
	return cards, nil
}

// parseDirs parses a comma-separated list of absolute directories; "" is
// an empty list.
func parseDirs(s string) ([]string, error) {
	dirs := []string{}
	if strings.TrimSpace(s) == "" {
		return dirs, nil
	}
	for _, d := range strings.Split(s, ",") {
		d = strings.TrimSpace(d)
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("%q is not an absolute path: list absolute directories separated by commas", d)
		}
		dirs = append(dirs, d)
	}
	return dirs, nil
}
