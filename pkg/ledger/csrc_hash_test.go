package ledger

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// TestCSourcesHash fails while this package may hold a stale build of the
// C ledger sources that ledger_c.c compiles in from interposer/src.
func TestCSourcesHash(t *testing.T) {
	testenv.CheckCSourcesHash(t, "interposer/src", []string{
		"ledger.h",
		"ledger_file_layout.h",
		"ledger_file.c",
		"ledger_file_open.c",
	}, cSourcesHash)
}
