package sched

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// The core compiles warning-free under the strict flags the kernel-style
// code is held to (cgo builds it with fewer), as C11 and without floating
// point in user space.
func TestCoreStrictFlags(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	_, err := exec.LookPath(cc)
	require.NoError(t, err, "the project needs a C compiler (set CC)")
	core := filepath.Join("..", "..", "kmod", "core")
	args := []string{"-std=c11", "-pedantic", "-Wall", "-Wextra",
		"-Werror", "-Wshadow", "-Wstrict-prototypes", "-Wmissing-prototypes",
		"-Wconversion", "-Wvla", "-Wdeclaration-after-statement",
		"-ffreestanding", "-fsyntax-only",
		filepath.Join(core, "gs_sched.c"), filepath.Join(core, "gs_drain.c")}
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		// Floating point would not compile: as in the kernel.
		args = append(args, "-mgeneral-regs-only")
	}
	out, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
}
