// Package helm finds the pinned Helm the chart's tests run: it runs
// install/helm/tools.sh, which builds it into a cache outside the clone
// once per machine (make test's helm-deps builds it before go test runs,
// so a cold build is not spent inside a test's timeout).
package helm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// SkipVar is the opt-out: GPUSLICE_SKIP_HELM=1 skips the tests that need
// Helm (and make's helm-deps), for a machine that cannot build it.
const SkipVar = "GPUSLICE_SKIP_HELM"

// buildTimeout bounds a cold build of Helm (about 1.5-5 minutes on 2
// cores); warm, the script only prints the directory.
const buildTimeout = 15 * time.Minute

var found struct {
	once sync.Once
	bin  string
	err  error
}

// Binary returns the path of the pinned helm binary, building it first
// when the cache has none (once per test process).
func Binary() (string, error) {
	found.once.Do(func() { found.bin, found.err = build() })
	return found.bin, found.err
}

// Require returns the helm binary for a test: it skips the test when
// GPUSLICE_SKIP_HELM=1, and fails it when Helm cannot be built.
func Require(t testing.TB) string {
	t.Helper()
	if os.Getenv(SkipVar) == "1" {
		t.Skip(SkipVar + "=1: the tests that run Helm do not run")
	}
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func build() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.Root(), "install", "helm", "tools.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("install/helm/tools.sh failed: %v\n%s", err, tail(stderr.String(), 40))
	}
	bin := filepath.Join(strings.TrimSpace(stdout.String()), "helm")
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("install/helm/tools.sh printed %q, which has no helm binary", stdout.String())
	}
	return bin, nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
