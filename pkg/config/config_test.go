package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/gpu"
	"github.com/gpuslice/gpuslice/pkg/simgpu"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr(n int) *int { return &n }

func TestDefault(t *testing.T) {
	d := Default()
	require.NoError(t, d.Validate())
	assert.Equal(t, Config{
		Policy:          1,
		MaxInst:         20,
		SliceMs:         5,
		ReclaimMs:       100,
		Placement:       PlacementBinpack,
		Enforcement:     EnforcementAuto,
		Guard:           GuardRequired,
		Shim:            "/usr/lib/gpuslice/libgpuslice.so",
		ShimMountPath:   "/usr/local/gpuslice/libgpuslice.so",
		StateDir:        "/var/lib/gpuslice",
		LedgerDir:       "/run/gpuslice/ledger",
		SchedDir:        "/run/gpuslice/sched",
		DeviceRoot:      "/",
		CDI:             CDIAuto,
		CDISpecDirs:     []string{"/etc/cdi", "/var/run/cdi"},
		MetricsAddress:  "127.0.0.1:9410",
		MetricsWindowMs: 1000,
		StatusSocket:    "/run/gpuslice/agent.sock",
		NVMLLibrary:     "libnvidia-ml.so.1",
		DRA:             DRAAuto,
		KubeletRootDir:  "/var/lib/kubelet",
		DRACDIDir:       "/var/run/cdi",
	}, d)
	// Each call returns its own slices.
	d.CDISpecDirs[0] = "/changed"
	assert.Equal(t, "/etc/cdi", Default().CDISpecDirs[0])
}

func TestCardSettings(t *testing.T) {
	c := Default()
	c.Cards = []CardConfig{
		{Index: ptr(0), Policy: ptr(4), MaxInst: ptr(10)},
		{Index: ptr(2), Policy: ptr(0)},
		{Index: ptr(3), MaxInst: ptr(64)},
	}
	for _, tc := range []struct{ index, policy, maxInst int }{
		{0, 4, 10},
		{1, 1, 20}, // no entry: the defaults
		{2, 0, 20},
		{3, 1, 64},
	} {
		p, m := c.CardSettings(tc.index)
		assert.Equal(t, [2]int{tc.policy, tc.maxInst}, [2]int{p, m}, "card %d", tc.index)
	}
}

func TestNodeNameOrEnv(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	c := Default()
	assert.Equal(t, "from-env", c.NodeNameOrEnv())
	c.NodeName = "set"
	assert.Equal(t, "set", c.NodeNameOrEnv())
}

func TestSimulatedGPUCards(t *testing.T) {
	c := Default()
	c.SimulatedCards = []SimulatedCard{
		{Index: ptr(0), MemoryMiB: 16384},
		{Index: ptr(1), MemoryMiB: 8192, UUID: "GPU-x", Minor: ptr(5), Name: "Sim X"},
	}
	require.NoError(t, c.Validate())
	assert.Equal(t, []gpu.Card{
		{Index: 0, UUID: simgpu.UUID(0), Name: SimulatedName, MemoryBytes: 16 << 30, Minor: 0, DriverVersion: simgpu.DriverVersion},
		{Index: 1, UUID: "GPU-x", Name: "Sim X", MemoryBytes: 8 << 30, Minor: 5, DriverVersion: simgpu.DriverVersion},
	}, c.SimulatedGPUCards())
}

func TestDiscoverer(t *testing.T) {
	c := Default()
	d, err := c.Discoverer()
	require.NoError(t, err)
	assert.IsType(t, &gpu.NVML{}, d, "no simulated cards: NVML (not loaded yet)")

	c.SimulatedCards = []SimulatedCard{{Index: ptr(1), MemoryMiB: 4096}, {Index: ptr(0), MemoryMiB: 2048}}
	d, err = c.Discoverer()
	require.NoError(t, err)
	require.IsType(t, &gpu.Static{}, d)
	cards, err := d.Cards()
	require.NoError(t, err)
	require.Len(t, cards, 2)
	assert.Equal(t, 0, cards[0].Index)
	assert.Equal(t, uint64(2048)<<20, cards[0].MemoryBytes)
}

func TestEffectiveEnforcement(t *testing.T) {
	root := t.TempDir()
	c := Default()
	c.DeviceRoot = root
	assert.Equal(t, EnforcementFile, c.EffectiveEnforcement(), "auto without /dev/gpuslice")

	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "dev", "gpuslice"), nil, 0o644))
	assert.Equal(t, EnforcementModule, c.EffectiveEnforcement(), "auto with /dev/gpuslice")

	c.Enforcement = EnforcementFile
	assert.Equal(t, EnforcementFile, c.EffectiveEnforcement(), "an explicit mode stays")
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string // the whole error; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"bounds", func(c *Config) {
			c.Policy, c.MaxInst, c.SliceMs, c.ReclaimMs = 6, 64, 100, 10000
			c.Cards = []CardConfig{{Index: ptr(31), Policy: ptr(0), MaxInst: ptr(1)}}
			c.MetricsAddress = ""
			c.CDISpecDirs = nil
			c.SimulatedCards = []SimulatedCard{{Index: ptr(31), MemoryMiB: MaxMemoryMiB, Minor: ptr(0)}}
		}, ""},
		{"policy low", func(c *Config) { c.Policy = -1 }, "policy: -1 is out of range 0-6"},
		{"policy high", func(c *Config) { c.Policy = 7 }, "policy: 7 is out of range 0-6"},
		{"maxInst low", func(c *Config) { c.MaxInst = 0 }, "maxInst: 0 is out of range 1-64"},
		{"maxInst high", func(c *Config) { c.MaxInst = 65 }, "maxInst: 65 is out of range 1-64"},
		{"sliceMs low", func(c *Config) { c.SliceMs = 0 }, "sliceMs: 0 is out of range 1-100"},
		{"sliceMs high", func(c *Config) { c.SliceMs = 101 }, "sliceMs: 101 is out of range 1-100"},
		{"reclaimMs low", func(c *Config) { c.ReclaimMs = 0 }, "reclaimMs: 0 is out of range 1-10000"},
		{"reclaimMs high", func(c *Config) { c.ReclaimMs = 10001 }, "reclaimMs: 10001 is out of range 1-10000"},
		{"reclaimMs lowest", func(c *Config) { c.ReclaimMs = 1 }, ""},
		{"card index missing", func(c *Config) { c.Cards = []CardConfig{{Policy: ptr(2)}} },
			"cards[0].index: missing: say which card (0-31) the entry is for"},
		{"card index low", func(c *Config) { c.Cards = []CardConfig{{Index: ptr(-1)}} },
			"cards[0].index: -1 is out of range 0-31"},
		{"card index high", func(c *Config) { c.Cards = []CardConfig{{Index: ptr(32)}} },
			"cards[0].index: 32 is out of range 0-31"},
		{"card index duplicate", func(c *Config) { c.Cards = []CardConfig{{Index: ptr(1)}, {Index: ptr(1)}} },
			"cards[1].index: card 1 already has an entry (cards[0]): merge the two"},
		{"card policy", func(c *Config) {
			c.Cards = []CardConfig{{Index: ptr(0)}, {Index: ptr(1), Policy: ptr(9)}}
		}, "cards[1].policy: 9 is out of range 0-6"},
		{"card maxInst", func(c *Config) {
			c.Cards = []CardConfig{{Index: ptr(0)}, {Index: ptr(1), MaxInst: ptr(70)}}
		}, "cards[1].maxInst: 70 is out of range 1-64"},
		{"placement", func(c *Config) { c.Placement = "pack" },
			`placement: "pack" is not one of binpack, spread`},
		{"enforcement", func(c *Config) { c.Enforcement = "" },
			`enforcement: "" is not one of auto, module, file`},
		{"guard", func(c *Config) { c.Guard = "on" },
			`guard: "on" is not one of required, optional, off`},
		{"shim", func(c *Config) { c.Shim = "libgpuslice.so" },
			`shim: "libgpuslice.so" is not an absolute path: give a path starting with /`},
		{"shimMountPath", func(c *Config) { c.ShimMountPath = "" },
			`shimMountPath: "" is not an absolute path: give a path starting with /`},
		{"stateDir", func(c *Config) { c.StateDir = "state" },
			`stateDir: "state" is not an absolute path: give a path starting with /`},
		{"ledgerDir", func(c *Config) { c.LedgerDir = "./l" },
			`ledgerDir: "./l" is not an absolute path: give a path starting with /`},
		{"deviceRoot", func(c *Config) { c.DeviceRoot = "" },
			`deviceRoot: "" is not an absolute path: give a path starting with /`},
		{"cdi", func(c *Config) { c.CDI = "yes" }, `cdi: "yes" is not one of auto, never, always`},
		{"cdiSpecDirs", func(c *Config) { c.CDISpecDirs = []string{"/etc/cdi", "cdi"} },
			`cdiSpecDirs[1]: "cdi" is not an absolute path: give a path starting with /`},
		{"cdi always without dirs", func(c *Config) { c.CDI, c.CDISpecDirs = CDIAlways, nil },
			"cdiSpecDirs: empty, but cdi is always: list the directories of the CDI specs"},
		{"metricsAddress", func(c *Config) { c.MetricsAddress = "9402" },
			`metricsAddress: "9402" is not host:port: give host:port or :port, or "" to disable metrics`},
		{"metricsAddress port", func(c *Config) { c.MetricsAddress = "localhost:http" },
			`metricsAddress: "localhost:http" has no port number in 0-65535: give host:port or :port, or "" to disable metrics`},
		{"metricsWindowMs low", func(c *Config) { c.MetricsWindowMs = 99 },
			"metricsWindowMs: 99 is out of range 100-60000"},
		{"metricsWindowMs high", func(c *Config) { c.MetricsWindowMs = 60001 },
			"metricsWindowMs: 60001 is out of range 100-60000"},
		{"statusSocket relative", func(c *Config) { c.StatusSocket = "agent.sock" },
			`statusSocket: "agent.sock" is not an absolute path: give a path starting with /`},
		{"statusSocket disabled", func(c *Config) { c.StatusSocket = "" }, ""},
		{"nvmlLibrary empty", func(c *Config) { c.NVMLLibrary = "" },
			`nvmlLibrary: "" is empty: give a soname such as libnvidia-ml.so.1 or an absolute path`},
		{"nvmlLibrary relative", func(c *Config) { c.NVMLLibrary = "build/lib/libnvidia-ml.so.1" },
			`nvmlLibrary: "build/lib/libnvidia-ml.so.1" is a relative path: give a soname (no /) or an absolute path`},
		{"nvmlLibrary path", func(c *Config) { c.NVMLLibrary = "/opt/sim/libnvidia-ml.so.1" }, ""},
		{"simulated index missing", func(c *Config) { c.SimulatedCards = []SimulatedCard{{MemoryMiB: 1}} },
			"simulatedCards[0].index: missing: number the simulated cards from 0 (0-31)"},
		{"simulated index range", func(c *Config) {
			c.SimulatedCards = []SimulatedCard{{Index: ptr(32), MemoryMiB: 1, Minor: ptr(0)}}
		}, "simulatedCards[0].index: 32 is out of range 0-31"},
		{"simulated index duplicate", func(c *Config) {
			c.SimulatedCards = []SimulatedCard{{Index: ptr(0), MemoryMiB: 1}, {Index: ptr(0), MemoryMiB: 1, Minor: ptr(1), UUID: "u"}}
		}, "simulatedCards[1].index: 0 is also simulatedCards[0]'s: give each card its own index"},
		{"simulated memory missing", func(c *Config) { c.SimulatedCards = []SimulatedCard{{Index: ptr(0)}} },
			"simulatedCards[0].memoryMiB: 0 is out of range 1-1048576 (the card's memory in MiB)"},
		{"simulated memory in bytes", func(c *Config) {
			c.SimulatedCards = []SimulatedCard{{Index: ptr(0), MemoryMiB: 16 << 30}}
		}, "simulatedCards[0].memoryMiB: 17179869184 is out of range 1-1048576 (the card's memory in MiB)"},
		{"simulated minor", func(c *Config) {
			c.SimulatedCards = []SimulatedCard{{Index: ptr(0), MemoryMiB: 1, Minor: ptr(-1)}}
		}, "simulatedCards[0].minor: -1 is negative: give N >= 0 of /dev/nvidiaN (default: the index)"},
		{"simulated minor duplicate", func(c *Config) {
			c.SimulatedCards = []SimulatedCard{{Index: ptr(0), MemoryMiB: 1}, {Index: ptr(1), MemoryMiB: 1, Minor: ptr(0)}}
		}, "simulatedCards[1].minor: 0 is also simulatedCards[0]'s (the minor defaults to the index): two cards cannot share /dev/nvidia0"},
		{"simulated uuid duplicate", func(c *Config) {
			c.SimulatedCards = []SimulatedCard{{Index: ptr(0), MemoryMiB: 1}, {Index: ptr(1), MemoryMiB: 1, UUID: simgpu.UUID(0)}}
		}, `simulatedCards[1].uuid: "` + simgpu.UUID(0) + `" is also simulatedCards[0]'s: UUIDs must be unique`},
		{"dra", func(c *Config) { c.DRA = "yes" }, `dra: "yes" is not one of auto, on, off`},
		{"kubeconfig relative", func(c *Config) { c.Kubeconfig = "kubelet.conf" },
			`kubeconfig: "kubelet.conf" is not an absolute path: give a path starting with /`},
		{"nodeName", func(c *Config) { c.NodeName = "Node_1" },
			`nodeName: "Node_1" is not a node name: lower-case letters, digits, '-' and '.', at most 253`},
		{"nodeName dotted", func(c *Config) { c.NodeName = "node-1.zone.example" }, ""},
		{"kubeletRootDir", func(c *Config) { c.KubeletRootDir = "" },
			`kubeletRootDir: "" is not an absolute path: give a path starting with /`},
		{"draCDIDir", func(c *Config) { c.DRACDIDir = "cdi" },
			`draCDIDir: "cdi" is not an absolute path: give a path starting with /`},
		{"every problem, one per line", func(c *Config) { c.Policy, c.SliceMs, c.Placement = 8, 0, "x" },
			"policy: 8 is out of range 0-6\nsliceMs: 0 is out of range 1-100\nplacement: \"x\" is not one of binpack, spread"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.change(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
		})
	}
}
