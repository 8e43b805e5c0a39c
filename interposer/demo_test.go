package interposer_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestDemo runs make demo's script and checks the story it tells: managed
// memory refused, a container's processes stopped by their shared cap with
// the shim's message, the other container untouched, a kill -9'd
// process's memory taken up by the next process, and two containers'
// kernels sharing the engine 30/70 by their quotas.
func TestDemo(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filepath.Join(testenv.Root(), "interposer", "demo", "demo.sh"),
		testenv.Build())
	cmd.Env = (&machine{t: t, env: map[string]string{}}).environ()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, want := range []string{
		`a1 +cuMemAllocManaged\(256 MiB\) -> CUresult 801`,
		`gpuslice\[\d+\]: cuMemAllocManaged \(cudaMallocManaged\) refused`,
		`a2 +sees +2048 MiB total, +768 MiB free`,
		`gpuslice\[\d+\]: cuMemAlloc of 268435456 bytes refused: card 0's vGPU memory cap is 2048 MiB and 2048.0 MiB are in use`,
		`a2 +cuMemAlloc\(256 MiB\) -> CUresult 2 \(CUDA_ERROR_OUT_OF_MEMORY\); holds 768 MiB`,
		`b1 +cuMemAlloc\(1024 MiB\) -> CUresult 2 \(CUDA_ERROR_OUT_OF_MEMORY\); holds 3072 MiB`,
		`a3 +cuMemAlloc\(256 MiB\) -> CUresult 2 \(CUDA_ERROR_OUT_OF_MEMORY\); holds 768 MiB`,
		`host +sees +16384 MiB total`,
	} {
		assert.Regexp(t, regexp.MustCompile(want), string(out))
	}
	// The compute part: shares of the engine by quota, a lone 30 % tenant
	// held to its 30 % (the bound isolation promises; benchmarks/shares
	// has the precise figures).
	share := func(re string) float64 {
		m := regexp.MustCompile(re).FindStringSubmatch(string(out))
		require.Len(t, m, 2, "no line matching %s in\n%s", re, out)
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	assert.InDelta(t, 30, share(`C +quota 30 %: +([0-9.]+) % of the engine`), 5)
	assert.InDelta(t, 70, share(`D +quota 70 %: +([0-9.]+) % of the engine`), 5)
	assert.LessOrEqual(t, share(`C +quota 30 %, alone: +([0-9.]+) % of its wall time`), 33.0)
}
