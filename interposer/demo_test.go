package interposer_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestDemo runs make demo's script and checks the story it tells: managed
// memory refused, a container's processes stopped by their shared cap with
// the shim's message, the other container untouched, and a kill -9'd
// process's memory taken up by the next process.
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
}
