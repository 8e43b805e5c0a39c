package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFile writes a config file in a fresh directory and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

const fullFile = `
policy: 2
maxInst: 10
sliceMs: 7
reclaimMs: 250
cards:
  - {index: 0, policy: 4, maxInst: 20}
  - index: 3
    maxInst: 5
placement: spread
enforcement: file
guard: optional
shim: /opt/gpuslice/libgpuslice.so
shimMountPath: /gpuslice/libgpuslice.so
preloadFile: true
stateDir: /srv/state
ledgerDir: /srv/ledger
schedDir: /srv/sched
deviceRoot: /scratch
cdi: always
cdiSpecDirs: [/etc/cdi]
metricsAddress: "127.0.0.1:9999"
metricsWindowMs: 500
statusSocket: /srv/agent.sock
nvmlLibrary: /opt/sim/libnvidia-ml.so.1
simulatedCards:
  - {index: 0, memoryMiB: 16384, uuid: GPU-sim-a, minor: 2}
  - {index: 1, memoryMiB: 8192, name: Sim B}
dra: "on"
kubeconfig: /etc/kubernetes/kubelet.conf
nodeName: node-1.example
kubeletRootDir: /srv/kubelet
draCDIDir: /srv/cdi
`

func TestLoadFullFile(t *testing.T) {
	p := writeFile(t, fullFile)
	c, err := Load(p)
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	assert.Equal(t, Config{
		Policy:    2,
		MaxInst:   10,
		SliceMs:   7,
		ReclaimMs: 250,
		Cards: []CardConfig{
			{Index: ptr(0), Policy: ptr(4), MaxInst: ptr(20)},
			{Index: ptr(3), MaxInst: ptr(5)},
		},
		Placement:       PlacementSpread,
		Enforcement:     EnforcementFile,
		Guard:           GuardOptional,
		Shim:            "/opt/gpuslice/libgpuslice.so",
		ShimMountPath:   "/gpuslice/libgpuslice.so",
		PreloadFile:     true,
		StateDir:        "/srv/state",
		LedgerDir:       "/srv/ledger",
		SchedDir:        "/srv/sched",
		DeviceRoot:      "/scratch",
		CDI:             CDIAlways,
		CDISpecDirs:     []string{"/etc/cdi"},
		MetricsAddress:  "127.0.0.1:9999",
		MetricsWindowMs: 500,
		StatusSocket:    "/srv/agent.sock",
		NVMLLibrary:     "/opt/sim/libnvidia-ml.so.1",
		SimulatedCards: []SimulatedCard{
			{Index: ptr(0), MemoryMiB: 16384, UUID: "GPU-sim-a", Minor: ptr(2)},
			{Index: ptr(1), MemoryMiB: 8192, Name: "Sim B"},
		},
		DRA: DRAOn, Kubeconfig: "/etc/kubernetes/kubelet.conf", NodeName: "node-1.example",
		KubeletRootDir: "/srv/kubelet", DRACDIDir: "/srv/cdi",
		Path: p,
	}, c)
	p0, m0 := c.CardSettings(0)
	p3, m3 := c.CardSettings(3)
	assert.Equal(t, [4]int{4, 20, 2, 5}, [4]int{p0, m0, p3, m3})
}

func TestLoadPartialFileKeepsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       func(c *Config)
	}{
		{"empty", "", func(*Config) {}},
		{"comments only", "# nothing yet\n", func(*Config) {}},
		{"one key", "maxInst: 8\n", func(c *Config) { c.MaxInst = 8 }},
		{"reclaimMs", "reclaimMs: 2000\n", func(c *Config) { c.ReclaimMs = 2000 }},
		{"null keeps the default", "policy:\nmetricsAddress: ''\n", func(c *Config) { c.MetricsAddress = "" }},
		{"empty list empties", "cdiSpecDirs: []\n", func(c *Config) { c.CDISpecDirs = []string{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.text)
			c, err := Load(p)
			require.NoError(t, err)
			want := Default()
			tc.want(&want)
			want.Path = p
			assert.Equal(t, want, c)
		})
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	require.ErrorContains(t, err, "nope.yaml does not exist: create it, or name no file (the default, /etc/gpuslice/config.yaml, may be absent)")

	if _, err := os.Stat(DefaultPath); err == nil {
		t.Skipf("%s exists on this machine", DefaultPath)
	}
	for _, p := range []string{"", DefaultPath, "/etc/gpuslice/./config.yaml"} {
		c, err := Load(p)
		require.NoError(t, err, "the default file may be absent")
		assert.Equal(t, Default(), c)
	}
}

func TestLoadUnreadable(t *testing.T) {
	_, err := Load(t.TempDir()) // a directory
	require.ErrorContains(t, err, "config file: read ")
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"unknown top-level key", "polcy: 1\n",
			"polcy: unknown key; the keys are cards, cdi, cdiSpecDirs, deviceRoot, dra, draCDIDir, enforcement, guard, " +
				"kubeconfig, kubeletRootDir, ledgerDir, maxInst, metricsAddress, metricsWindowMs, nodeName, nvmlLibrary, placement, policy, " +
				"preloadFile, reclaimMs, schedDir, shim, shimMountPath, simulatedCards, sliceMs, stateDir, statusSocket"},
		{"the Go field name is no key", "Path: /x\n", "Path: unknown key"},
		{"unknown key in cards", "cards:\n  - {index: 0}\n  - {index: 1, maxinst: 3}\n",
			"cards[1].maxinst: unknown key; the keys of a cards entry are index, maxInst, policy"},
		{"unknown key in simulatedCards", "simulatedCards: [{index: 0, memoryMiB: 1, memory: 2}]\n",
			"simulatedCards[0].memory: unknown key; the keys of a simulatedCards entry are index, memoryMiB, minor, name, uuid"},
		{"every unknown key", "a: 1\nb: 2\n", "a: unknown key; the keys are"},
		{"string for an integer", "policy: fixed\n", `policy: expected an integer, got the string "fixed"`},
		{"fraction", "sliceMs: 2.5\n", "sliceMs: 2.5 is not an integer (or is too large)"},
		{"huge", "maxInst: 100000000000000000000\n", "maxInst: 100000000000000000000 is not an integer (or is too large)"},
		{"nested integer", "cards: [{index: 0}, {index: one}]\n", `cards[1].index: expected an integer, got the string "one"`},
		{"number for a string", "placement: 1\n", "placement: expected a string, got the number 1"},
		{"bool for a string", "cdi: no\n", "cdi: expected a string, got false"},
		{"string for a bool", "preloadFile: sometimes\n", `preloadFile: expected true or false, got the string "sometimes"`},
		{"scalar for a list", "cdiSpecDirs: /etc/cdi\n", `cdiSpecDirs: expected a list, got the string "/etc/cdi"`},
		{"mapping for a list", "cards: {index: 0}\n", "cards: expected a list, got a mapping"},
		{"scalar for a mapping", "cards: [3]\n", "cards[0]: expected a mapping of keys, got the number 3"},
		{"list document", "- policy: 1\n", "the file must be a mapping of keys (like \"policy: 1\"), not a list"},
		{"duplicate key", "policy: 1\npolicy: 2\n", "not valid YAML: unmarshal errors:\n  line 2: key \"policy\" already set in map"},
		{"bad syntax", "cards: [\n", "not valid YAML: line 1: did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.text)
			_, err := Load(p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "config file "+p+": "+tc.want)
		})
	}
}

// Every problem of a file is reported at once.
func TestLoadReportsEveryKey(t *testing.T) {
	_, err := Parse([]byte("a: 1\npolicy: x\ncards: [{idx: 0}]\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a: unknown key")
	assert.Contains(t, err.Error(), "cards[0].idx: unknown key")
	assert.Contains(t, err.Error(), `policy: expected an integer, got the string "x"`)
}
