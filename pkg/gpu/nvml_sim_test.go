package gpu

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/simgpu"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every test of this process shares one simulated machine (two cards of 4
// and 8 GiB), which helper processes join through simCmd. (The simulated
// libnvidia-ml.so.1 maps the machine of the environment at an nvmlInit
// with none outstanding.)
var (
	simOnce  sync.Once
	simState string
	simErr   error
)

func simMachine(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the C artifacts")
	}
	simOnce.Do(func() {
		if simErr = testenv.BuildC(); simErr != nil {
			return
		}
		var dir string
		if dir, simErr = os.MkdirTemp("", "gpuslice-gpu-test-"); simErr == nil {
			simState = filepath.Join(dir, "sim.state")
		}
	})
	require.NoError(t, simErr)
	// The simulated library reads its machine from the environment at
	// initialisation; t.Setenv reaches the C environment under cgo.
	for k, v := range simVars() {
		t.Setenv(k, v)
	}
}

func simVars() map[string]string {
	return map[string]string{"SIMCUDA_STATE": simState, "SIMCUDA_DEVICES": "2",
		"SIMCUDA_MEM_MIB": "4096,8192", "SIMCUDA_NAME": "gpuslice test card", "SIMCUDA_CONTEXT_MIB": "0"}
}

// simCmd is a helper program on the shared simulated machine.
func simCmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(testenv.Bin(name), args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+testenv.Lib())
	for k, v := range simVars() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

func TestMain(m *testing.M) {
	code := m.Run()
	if simState != "" {
		os.RemoveAll(filepath.Dir(simState))
	}
	os.Exit(code)
}

// TestNVMLSimulatedLibrary runs the real go-nvml binding, dlopen included,
// against the repository's simulated libnvidia-ml.so.1 (interposer/simcuda).
func TestNVMLSimulatedLibrary(t *testing.T) {
	simMachine(t)
	n := NewNVML(filepath.Join(testenv.Lib(), "libnvidia-ml.so.1"))
	for range 2 { // a second discovery initialises NVML again
		cards, err := n.Cards()
		require.NoError(t, err)
		require.Len(t, cards, 2)
		for i, c := range cards {
			assert.Equal(t, i, c.Index)
			assert.Equal(t, i, c.Minor)
			assert.Equal(t, "gpuslice test card", c.Name)
			assert.Regexp(t, `^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, c.UUID)
			assert.Equal(t, simgpu.UUID(i), c.UUID, "the simulated card set's UUID of card %d", i)
			assert.Equal(t, simgpu.DriverVersion, c.DriverVersion, "the simulated card set's driver version")
		}
		assert.Equal(t, uint64(4096)<<20, cards[0].MemoryBytes)
		assert.Equal(t, uint64(8192)<<20, cards[1].MemoryBytes)
		assert.NotEqual(t, cards[0].UUID, cards[1].UUID)
	}
}

// The monitor against the simulated library: memory used by another
// process, utilization from the engine's busy time, and an XID injected
// from outside (simcuda-xid) marking only its card.
func TestMonitorSimulatedLibrary(t *testing.T) {
	simMachine(t)
	m, err := OpenMonitor(filepath.Join(testenv.Lib(), "libnvidia-ml.so.1"), []int{0, 1}, quiet)
	require.NoError(t, err)
	defer m.Close()
	s := m.Sample()
	require.Len(t, s, 2)
	for _, c := range s {
		assert.Empty(t, c.Problems)
		assert.True(t, *c.Healthy)
	}

	// 64 MiB held on card 1 (contexts cost nothing on this machine).
	hold := simCmd("gstest", "hold", "67108864", "1")
	stdin, err := hold.StdinPipe()
	require.NoError(t, err)
	out, err := hold.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, hold.Start())
	defer func() { stdin.Close(); _ = hold.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
	}
	s = m.Sample()
	assert.Equal(t, uint64(64<<20), *s[1].MemoryUsedBytes)
	// The driver's per-process figure (nvmlDeviceGetComputeRunningProcesses_v3).
	assert.Equal(t, []ProcessMemory{{PID: uint32(hold.Process.Pid), Bytes: 64 << 20}}, s[1].Processes)
	assert.Equal(t, []ProcessMemory{}, s[0].Processes, "nobody holds memory on card 0")

	// Kernels back to back on card 0 for a second: its utilization over
	// the period since the last sample is well above 0, card 1's is 0.
	m.Sample()
	res, err := simCmd("gstest", "tenant", "1", "1000", "2").CombinedOutput()
	require.NoError(t, err, "%s", res)
	s = m.Sample()
	assert.Greater(t, *s[0].UtilPercent, 30.0, "%s", res)
	assert.Equal(t, 0.0, *s[1].UtilPercent)

	// An application's XID changes nothing; a critical one marks card 1.
	for _, xid := range []string{"13", "79"} {
		res, err := simCmd("simcuda-xid", "1", xid).CombinedOutput()
		require.NoError(t, err, "%s", res)
	}
	waitHealth(t, m, 1, false)
	s = m.Sample()
	assert.True(t, *s[0].Healthy, "card 0 untouched")
	assert.Equal(t, []string{"NVML: card 1 reported critical XID 79"}, s[1].Problems)

	res, err = simCmd("simcuda-xid", "7", "79").CombinedOutput()
	require.Error(t, err)
	assert.True(t, strings.Contains(string(res), "no such device"), "%s", res)
}
