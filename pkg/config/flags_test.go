package config

import (
	"bytes"
	"flag"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/simgpu"
)

// resolve binds the flags to a fresh FlagSet, parses args and resolves.
func resolve(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Config
	c.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	err := c.Resolve(fs)
	return c, err
}

func TestFlagsOverrideEverySetting(t *testing.T) {
	p := writeFile(t, fullFile)
	c, err := resolve(t, "-config", p,
		"-policy", "5", "-max-inst=30", "-slice-ms", "9", "-reclaim-ms", "40", "-placement", "binpack",
		"-enforcement", "module", "-guard", "off", "-shim", "/s.so", "-shim-mount-path", "/m.so", "-preload-file=false",
		"-state-dir", "/st", "-ledger-dir", "/le", "-sched-dir", "/sd", "-device-root", "/dr", "-cdi", "never",
		"-cdi-spec-dirs", "/a, /b", "-metrics-address", "", "-metrics-window-ms", "250",
		"-status-socket", "/s.sock", "-nvml-library", "/lib/nvml.so", "-simulate", "2:1024",
		"-dra", "off", "-kubeconfig", "", "-node-name", "n2", "-kubelet-root-dir", "/kr", "-dra-cdi-dir", "/cd")
	require.NoError(t, err)
	want := Config{
		Policy: 5, MaxInst: 30, SliceMs: 9, ReclaimMs: 40,
		Cards: []CardConfig{ // from the file: no flag replaces the overrides
			{Index: ptr(0), Policy: ptr(4), MaxInst: ptr(20)},
			{Index: ptr(3), MaxInst: ptr(5)},
		},
		Placement: PlacementBinpack, Enforcement: EnforcementModule, Guard: GuardOff,
		Shim: "/s.so", ShimMountPath: "/m.so", PreloadFile: false,
		StateDir: "/st", LedgerDir: "/le", SchedDir: "/sd", DeviceRoot: "/dr",
		CDI: CDINever, CDISpecDirs: []string{"/a", "/b"}, MetricsAddress: "",
		MetricsWindowMs: 250, StatusSocket: "/s.sock", NVMLLibrary: "/lib/nvml.so",
		SimulatedCards: []SimulatedCard{{Index: ptr(2), MemoryMiB: 1024, Minor: ptr(2)}},
		DRA:            DRAOff, Kubeconfig: "", NodeName: "n2", KubeletRootDir: "/kr", DRACDIDir: "/cd",
		Path: p,
	}
	c.flags = nil
	assert.Equal(t, want, c)
}

// defaults < file < flags set on the command line.
func TestFlagPrecedence(t *testing.T) {
	file := writeFile(t, "policy: 2\nmaxInst: 10\nplacement: spread\npreloadFile: true\n")
	for _, tc := range []struct {
		name string
		args []string
		want func(c *Config)
	}{
		{"defaults only", []string{"-config", writeFile(t, "")}, func(*Config) {}},
		{"file over defaults", []string{"-config", file}, func(c *Config) {
			c.Policy, c.MaxInst, c.Placement, c.PreloadFile = 2, 10, PlacementSpread, true
		}},
		{"flags over file", []string{"-config", file, "-policy", "0", "-preload-file=false"}, func(c *Config) {
			c.Policy, c.MaxInst, c.Placement, c.PreloadFile = 0, 10, PlacementSpread, false
		}},
		{"a flag set to its default still wins", []string{"-config", file, "-max-inst", "20"}, func(c *Config) {
			c.Policy, c.MaxInst, c.Placement, c.PreloadFile = 2, 20, PlacementSpread, true
		}},
		{"flags over defaults", []string{"-config", writeFile(t, ""), "-slice-ms", "50", "-preload-file"},
			func(c *Config) { c.SliceMs, c.PreloadFile = 50, true }},
		{"reclaim window flag over the file", []string{"-config", writeFile(t, "reclaimMs: 300\n"), "-reclaim-ms", "10000"},
			func(c *Config) { c.ReclaimMs = 10000 }},
		{"last occurrence wins", []string{"-config", file, "-policy", "3", "-policy", "4"}, func(c *Config) {
			c.Policy, c.MaxInst, c.Placement, c.PreloadFile = 4, 10, PlacementSpread, true
		}},
		{"empty -simulate clears the file's cards", []string{"-config", writeFile(t,
			"simulatedCards: [{index: 0, memoryMiB: 1}]\n"), "-simulate", ""}, func(*Config) {}},
		{"empty -cdi-spec-dirs clears the list", []string{"-config", writeFile(t, ""), "-cdi-spec-dirs="},
			func(c *Config) { c.CDISpecDirs = []string{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := resolve(t, tc.args...)
			require.NoError(t, err)
			want := Default()
			tc.want(&want)
			assert.Equal(t, tc.args[1], c.Path)
			c.Path, c.flags = "", nil
			assert.Equal(t, want, c)
		})
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-policy", "7"}, `invalid value "7" for flag -policy: 7 is out of range 0-6`},
		{[]string{"-policy", "x"}, `invalid value "x" for flag -policy: "x" is not an integer: give 0-6`},
		{[]string{"-max-inst", "70"}, `invalid value "70" for flag -max-inst: 70 is out of range 1-64`},
		{[]string{"-max-inst", "0"}, `invalid value "0" for flag -max-inst: 0 is out of range 1-64`},
		{[]string{"-slice-ms", "101"}, `invalid value "101" for flag -slice-ms: 101 is out of range 1-100`},
		{[]string{"-reclaim-ms", "0"}, `invalid value "0" for flag -reclaim-ms: 0 is out of range 1-10000`},
		{[]string{"-reclaim-ms", "10001"}, `invalid value "10001" for flag -reclaim-ms: 10001 is out of range 1-10000`},
		{[]string{"--reclaim-ms=1s"}, `invalid value "1s" for flag -reclaim-ms: "1s" is not an integer: give 1-10000`},
		{[]string{"-placement", "pack"}, `invalid value "pack" for flag -placement: "pack" is not one of binpack | spread`},
		{[]string{"-enforcement", "kernel"}, `invalid value "kernel" for flag -enforcement: "kernel" is not one of auto | module | file`},
		{[]string{"-guard", "on"}, `invalid value "on" for flag -guard: "on" is not one of required | optional | off`},
		{[]string{"-cdi", "yes"}, `invalid value "yes" for flag -cdi: "yes" is not one of auto | never | always`},
		{[]string{"-shim", "lib.so"}, `invalid value "lib.so" for flag -shim: "lib.so" is not an absolute path: give a path starting with /`},
		{[]string{"-shim-mount-path", "x"}, `invalid value "x" for flag -shim-mount-path: "x" is not an absolute path`},
		{[]string{"-state-dir", "s"}, `invalid value "s" for flag -state-dir: "s" is not an absolute path`},
		{[]string{"-ledger-dir", "l"}, `invalid value "l" for flag -ledger-dir: "l" is not an absolute path`},
		{[]string{"-device-root", ""}, `invalid value "" for flag -device-root: "" is not an absolute path`},
		{[]string{"-preload-file=maybe"}, `invalid boolean value "maybe" for -preload-file: "maybe" is not true or false`},
		{[]string{"-cdi-spec-dirs", "/etc/cdi,cdi"}, `invalid value "/etc/cdi,cdi" for flag -cdi-spec-dirs: "cdi" is not an absolute path: list absolute directories separated by commas`},
		{[]string{"-metrics-address", "9402"}, `invalid value "9402" for flag -metrics-address: "9402" is not host:port: give host:port or :port, or "" to disable metrics`},
		{[]string{"-metrics-window-ms", "50"}, `invalid value "50" for flag -metrics-window-ms: 50 is out of range 100-60000`},
		{[]string{"-status-socket", "a.sock"}, `invalid value "a.sock" for flag -status-socket: "a.sock" is not an absolute path`},
		{[]string{"-nvml-library", "lib/x.so"}, `invalid value "lib/x.so" for flag -nvml-library: "lib/x.so" is a relative path`},
		{[]string{"-simulate", "0:x"}, `invalid value "0:x" for flag -simulate: entry 1 ("0:x"): "x" is not a number: write index:MiB[:minor], e.g. 0:16384`},
		{[]string{"-config", "/nonexistent/gpuslice.yaml"}, "config file /nonexistent/gpuslice.yaml does not exist: create it, or name no file"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			_, err := resolve(t, tc.args...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A named -config must exist, even at the default path; left out, the
// default file may be absent.
func TestConfigFlagDefaultPath(t *testing.T) {
	if _, err := os.Stat(DefaultPath); err == nil {
		t.Skipf("%s exists on this machine", DefaultPath)
	}
	c, err := resolve(t)
	require.NoError(t, err)
	c.flags = nil
	assert.Equal(t, Default(), c)

	_, err = resolve(t, "-config", DefaultPath)
	require.ErrorContains(t, err, "config file /etc/gpuslice/config.yaml does not exist")
}

// The merged configuration is validated; the error names the file.
func TestResolveValidates(t *testing.T) {
	p := writeFile(t, "cards: [{index: 0, maxInst: 70}]\n")
	_, err := resolve(t, "-config", p, "-max-inst", "30")
	require.EqualError(t, err, "config file "+p+" with the flags: cards[0].maxInst: 70 is out of range 1-64")

	// A flag repairs a bad file value.
	p = writeFile(t, "sliceMs: 500\n")
	c, err := resolve(t, "-config", p, "-slice-ms", "50")
	require.NoError(t, err)
	assert.Equal(t, 50, c.SliceMs)
}

func TestResolveMisuse(t *testing.T) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var c Config
	require.ErrorContains(t, c.Resolve(fs), "Resolve needs the FlagSet given to BindFlags")
	c.BindFlags(fs)
	require.ErrorContains(t, c.Resolve(fs), "Resolve called before the flags were parsed")
	require.ErrorContains(t, c.Resolve(flag.NewFlagSet("other", flag.ContinueOnError)),
		"Resolve needs the FlagSet given to BindFlags")
}

// Flags of the caller on the same FlagSet are left alone.
func TestForeignFlags(t *testing.T) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var c Config
	c.BindFlags(fs)
	verbose := fs.Bool("v", false, "verbose")
	require.NoError(t, fs.Parse([]string{"-v", "-config", writeFile(t, ""), "-policy", "3"}))
	require.NoError(t, c.Resolve(fs))
	assert.True(t, *verbose)
	assert.Equal(t, 3, c.Policy)
}

func TestFlagHelp(t *testing.T) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	var c Config
	c.BindFlags(fs)
	fs.PrintDefaults()
	for _, s := range []string{
		"-config file", "(default \"/etc/gpuslice/config.yaml\")",
		"-max-inst n", "default number of compute units (most vGPUs) per card, 1-64 (default 20)",
		"-reclaim-ms ms", "1-10000 (default 100)",
		"-placement mode", "binpack | spread (default binpack)",
		"-preload-file", "-simulate cards", "-cdi-spec-dirs dirs", "(default /etc/cdi,/var/run/cdi)",
	} {
		assert.Contains(t, out.String(), s)
	}
}

func TestParseSimulate(t *testing.T) {
	card := func(index, mib, minor int) SimulatedCard {
		return SimulatedCard{Index: ptr(index), MemoryMiB: mib, Minor: ptr(minor)}
	}
	for _, tc := range []struct {
		in   string
		want []SimulatedCard
		err  string
	}{
		{in: "", want: nil},
		{in: "  ", want: nil},
		{in: "0:16384", want: []SimulatedCard{card(0, 16384, 0)}},
		{in: "0:16384,1:16384", want: []SimulatedCard{card(0, 16384, 0), card(1, 16384, 1)}},
		{in: "1:8192:0, 0:4096:1", want: []SimulatedCard{card(1, 8192, 0), card(0, 4096, 1)}},
		{in: "31:1", want: []SimulatedCard{card(31, 1, 31)}},
		{in: "0", err: `entry 1 ("0"): expected 2 or 3 numbers separated by ':': write index:MiB[:minor], e.g. 0:16384`},
		{in: "0:1:2:3", err: `entry 1 ("0:1:2:3"): expected 2 or 3 numbers`},
		{in: "0:1,", err: `entry 2 (""): expected 2 or 3 numbers`},
		{in: "a:1", err: `entry 1 ("a:1"): "a" is not a number`},
		{in: "0:16G", err: `entry 1 ("0:16G"): "16G" is not a number`},
		{in: "32:1", err: `entry 1 ("32:1"): index 32 is out of range 0-31`},
		{in: "-1:1", err: `entry 1 ("-1:1"): index -1 is out of range 0-31`},
		{in: "0:0", err: `entry 1 ("0:0"): memory 0 MiB is out of range 1-1048576`},
		{in: "0:1:-1", err: `entry 1 ("0:1:-1"): minor -1 is negative`},
		{in: "0:1,0:2", err: `entry 2 ("0:2"): index 0 is also entry 1's`},
		{in: "0:1:1,1:1", err: `entry 2 ("1:1"): minor 1 is also entry 1's (the minor defaults to the index)`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSimulate(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// The cards of -simulate pass Validate and become the discoverer's.
func TestSimulateDiscoverer(t *testing.T) {
	c, err := resolve(t, "-config", writeFile(t, ""), "-simulate", "0:16384,1:8192:7")
	require.NoError(t, err)
	d, err := c.Discoverer()
	require.NoError(t, err)
	cards, err := d.Cards()
	require.NoError(t, err)
	require.Len(t, cards, 2)
	assert.Equal(t, 7, cards[1].Minor)
	assert.Equal(t, simgpu.UUID(1), cards[1].UUID, "the simulated driver's")
}
