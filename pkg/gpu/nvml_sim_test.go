package gpu

import (
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNVMLSimulatedLibrary runs the real go-nvml binding, dlopen included,
// against the repository's simulated libnvidia-ml.so.1 (interposer/simcuda)
// on a private simulated machine of two cards.
func TestNVMLSimulatedLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the C artifacts")
	}
	require.NoError(t, testenv.BuildC())
	// The simulated library reads its machine from the environment at
	// initialisation; t.Setenv reaches the C environment under cgo.
	t.Setenv("SIMCUDA_STATE", filepath.Join(t.TempDir(), "sim.state"))
	t.Setenv("SIMCUDA_DEVICES", "2")
	t.Setenv("SIMCUDA_MEM_MIB", "4096,8192")
	t.Setenv("SIMCUDA_NAME", "gpuslice test card")

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
		}
		assert.Equal(t, uint64(4096)<<20, cards[0].MemoryBytes)
		assert.Equal(t, uint64(8192)<<20, cards[1].MemoryBytes)
		assert.NotEqual(t, cards[0].UUID, cards[1].UUID)
	}
}
