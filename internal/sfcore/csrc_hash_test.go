package sfcore

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestCSourcesHash fails while this package may hold a stale build of the
// shim's schedule file or the scheduler core it compiles in.
func TestCSourcesHash(t *testing.T) {
	testenv.CheckCSourcesHash(t, ".", []string{
		"interposer/src/sched_file.c",
		"interposer/src/sched_file_page.c",
		"interposer/src/sched_file_open.c",
		"interposer/src/sched_file.h",
		"interposer/src/sched_file_int.h",
		"interposer/src/sched_file_layout.h",
		"interposer/src/ledger_file.c",
		"interposer/src/ledger_file_open.c",
		"interposer/src/ledger_file_layout.h",
		"kmod/core/gs_compat.h",
		"kmod/core/gs_sched.h",
		"kmod/core/gs_sched_int.h",
		"kmod/core/gs_sched.c",
		"kmod/core/gs_drain.c",
	}, cSourcesHash)
}
