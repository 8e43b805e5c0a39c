package cabi

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

func TestCSourcesHash(t *testing.T) {
	testenv.CheckCSourcesHash(t, "kmod/include/uapi", []string{"gpuslice.h"}, cSourcesHash)
}
