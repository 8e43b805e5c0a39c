// Package testenv gives tests the repository's C artifacts: it builds them
// once (under a lock, since go test runs packages in parallel) and says
// where they are and how to run a program on the simulated GPU, with or
// without the shim.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// Root is the repository's root directory.
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testenv: cannot locate the repository")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Build is where make puts the C artifacts.
func Build() string { return filepath.Join(Root(), "build") }

// Lib is the directory of the simulated driver and the shim.
func Lib() string { return filepath.Join(Build(), "lib") }

// Bin returns the path of a built C program.
func Bin(name string) string { return filepath.Join(Build(), "bin", name) }

// Shim is the path of libgpuslice.so.
func Shim() string { return filepath.Join(Lib(), "libgpuslice.so") }

// BuildC runs `make c` at the root, serialised across test processes by a
// lock file, so every package can call it from TestMain.
func BuildC() error {
	if err := os.MkdirAll(Build(), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(Build(), ".make.lock"),
		os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	cmd := exec.Command("make", "-s", "-C", Root(), "c")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("building the C artifacts (make c) failed: %v\n%s", err, out)
	}
	return nil
}

// MainWithC is a TestMain for packages whose tests run the C artifacts:
// it builds them (BuildC), then runs the tests, and exits with their code.
func MainWithC(m *testing.M) {
	if err := BuildC(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// SimEnv is the environment of a process on a private simulated card set:
// state is the card's state file (one per test), memMiB its capacity.
func SimEnv(state string, memMiB int) []string {
	return append(os.Environ(),
		"LD_LIBRARY_PATH="+Lib(),
		"SIMCUDA_STATE="+state,
		fmt.Sprintf("SIMCUDA_MEM_MIB=%d", memMiB),
	)
}

// CleanEnviron is this process's environment without anything of
// gpuslice, the simulator, CUDA or the loader (GPU_*, GPUSLICE_*,
// SIMCUDA_*, CUDA_*, GSTEST_*, LD_PRELOAD, LD_LIBRARY_PATH), so that a
// child starts from what its test sets, not from the caller's shell.
func CleanEnviron() []string {
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		if strings.HasPrefix(k, "GPU_") || strings.HasPrefix(k, "GPUSLICE_") ||
			strings.HasPrefix(k, "SIMCUDA_") || strings.HasPrefix(k, "CUDA_") ||
			strings.HasPrefix(k, "GSTEST_") ||
			k == "LD_PRELOAD" || k == "LD_LIBRARY_PATH" {
			continue
		}
		env = append(env, e)
	}
	return env
}

// InGuest skips a test outside the qemu guest of kmod/guest, which runs it
// against the real gpuslice.ko (kmod/guest/tests/GO lists such tests): no
// host kernel here can load the module, and inside the guest the test is
// never skipped (the guest counts a skip as a failure).
func InGuest(t *testing.T) {
	t.Helper()
	if os.Getenv("GPUSLICE_GUEST") == "" {
		t.Skip("needs gpuslice.ko: kmod/guest runs this test in its qemu guest")
	}
}
