package sched

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestCSourcesHash fails while this package may hold a stale build of the
// scheduler core that sched_c.c compiles in from kmod/core.
func TestCSourcesHash(t *testing.T) {
	testenv.CheckCSourcesHash(t, "kmod/core", []string{
		"gs_compat.h",
		"gs_sched.h",
		"gs_sched_int.h",
		"gs_sched.c",
		"gs_drain.c",
	}, cSourcesHash)
}
