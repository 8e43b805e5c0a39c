package sched

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// cSources are the files sched_c.c compiles in from outside the package.
var cSources = []string{
	"gs_compat.h",
	"gs_sched.h",
	"gs_sched.c",
}

func TestCSourcesHash(t *testing.T) {
	h := sha256.New()
	for _, name := range cSources {
		b, err := os.ReadFile(filepath.Join("..", "..", "kmod", "core", name))
		require.NoError(t, err)
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if os.Getenv("GPUSLICE_SCHED_UPDATE_HASH") != "" {
		src, err := os.ReadFile("csrc_hash.go")
		require.NoError(t, err)
		re := regexp.MustCompile(`const cSourcesHash = "[0-9a-f]*"`)
		require.True(t, re.Match(src))
		src = re.ReplaceAll(src, []byte(`const cSourcesHash = "`+sum+`"`))
		require.NoError(t, os.WriteFile("csrc_hash.go", src, 0o644))
		return
	}
	require.Equal(t, sum, cSourcesHash,
		"the C scheduler core changed but this package may still hold a stale build of it: run `go generate ./pkg/sched`")
}
