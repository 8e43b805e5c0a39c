package schedfile

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestCSourcesHash fails while this package may hold a stale build of the
// schedule file's layout that schedfile_c.c compiles in.
func TestCSourcesHash(t *testing.T) {
	testenv.CheckCSourcesHash(t, ".", []string{
		"interposer/src/sched_file_layout.h",
		"kmod/core/gs_compat.h",
		"kmod/core/gs_sched.h",
		"kmod/include/uapi/gpuslice.h",
	}, cSourcesHash)
}
