package node

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// shimProcess is a process of a container on the simulated driver with
// the installed shim preloaded: gstest unseen, which allocates each size
// it reads on stdin and prints the result.
type shimProcess struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startShimProcess(t *testing.T, shim, dir string) *shimProcess {
	t.Helper()
	cmd := exec.Command(testenv.Bin("gstest"), "unseen", "4096")
	cmd.Env = append(testenv.CleanEnviron(),
		"LD_PRELOAD="+shim, "LD_LIBRARY_PATH="+testenv.Lib(),
		"SIMCUDA_STATE="+filepath.Join(dir, "sim.state"), "SIMCUDA_MEM_MIB=8192",
		"GPUSLICE_LEDGER_DIR="+filepath.Join(dir, "ledger"), "GPU_IDX=0", "GPU_CONTAINER_MEM=1024")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &shimProcess{t: t, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line := p.line(); line != "ready" {
		t.Fatalf("gstest unseen printed %q, want ready", line)
	}
	return p
}

// line is the process's next line of output; its exit status when it
// ends instead.
func (p *shimProcess) line() string {
	p.t.Helper()
	done := make(chan string, 1)
	go func() {
		s, err := p.out.ReadString('\n')
		if err != nil {
			done <- "EOF"
			return
		}
		done <- strings.TrimSpace(s)
	}()
	select {
	case s := <-done:
		if s == "EOF" {
			err := p.cmd.Wait()
			p.t.Fatalf("the process ended: %v (%v)", err, p.cmd.ProcessState)
		}
		return s
	case <-time.After(30 * time.Second):
		p.t.Fatal("the process printed nothing for 30 s")
		return ""
	}
}

// alloc has the process allocate n bytes and returns the result code.
func (p *shimProcess) alloc(n string) string {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.stdin, n); err != nil {
		p.t.Fatalf("writing to the process: %v", err)
	}
	line := p.line()
	_, rc, _ := strings.Cut(line, "rc=")
	rc, _, _ = strings.Cut(rc, " ")
	return rc
}

// mappedInode is the inode of shim in the process's mappings, and
// whether the kernel marks the file deleted (replaced).
func mappedInode(t *testing.T, pid int, shim string) (ino uint64, deleted bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[5] == shim {
			fmt.Sscan(f[4], &ino)
			return ino, len(f) > 6 && f[6] == "(deleted)"
		}
	}
	t.Fatalf("process %d has no mapping of %s:\n%s", pid, shim, b)
	return 0, false
}

// newShim is a second, different build of the shim (-O0: other code at
// other offsets), as a new release would bring.
func newShim(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", filepath.Join(testenv.Root(), "interposer"), "BUILD="+dir, "shim")
	cmd.Env = append(os.Environ(), "CFLAGS=-O0 -g")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the second shim: %v\n%s", err, out)
	}
	for _, b := range []string{"gpuslice-nri", "gpuslice"} {
		if err := copyFile(filepath.Join(build, "bin", b), filepath.Join(dir, "bin", b)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestShimUpgradeWhileMapped: make install over a shim a running process
// has mapped. The process keeps its shim (the old file, now deleted) and
// keeps allocating under its cap; the next process maps the new file.
func TestShimUpgradeWhileMapped(t *testing.T) {
	dest := t.TempDir()
	o := options(dest, nil)
	o.ContainerdMajor = 2
	install(t, o)
	shim := filepath.Join(dest, "usr/lib/gpuslice/libgpuslice.so")
	var st syscall.Stat_t
	if err := syscall.Stat(shim, &st); err != nil {
		t.Fatal(err)
	}

	old := startShimProcess(t, shim, t.TempDir())
	if rc := old.alloc("64M"); rc != "CUDA_SUCCESS" {
		t.Fatalf("before the upgrade: alloc rc=%s", rc)
	}
	if ino, _ := mappedInode(t, old.cmd.Process.Pid, shim); ino != st.Ino {
		t.Fatalf("the process maps inode %d, the installed shim is %d", ino, st.Ino)
	}

	o.Build = newShim(t)
	report := install(t, o)
	if !strings.Contains(report, "installed "+shim) {
		t.Fatalf("the upgrade did not install the new shim:\n%s", report)
	}
	if got, want := fileDigest(shim), fileDigest(filepath.Join(o.Build, "lib", "libgpuslice.so")); got != want {
		t.Fatal("the installed shim is not the new build")
	}

	// The running process: its own shim, still enforcing its cap.
	for i := 0; i < 50; i++ {
		if rc := old.alloc("16M"); rc != "CUDA_SUCCESS" {
			t.Fatalf("after the upgrade, allocation %d: rc=%s", i, rc)
		}
	}
	if rc := old.alloc("2G"); rc != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("after the upgrade, 2 GiB over a 1 GiB cap: rc=%s, want CUDA_ERROR_OUT_OF_MEMORY", rc)
	}
	if ino, deleted := mappedInode(t, old.cmd.Process.Pid, shim); ino != st.Ino || !deleted {
		t.Errorf("the running process maps inode %d (deleted %v), want its old %d, replaced", ino, deleted, st.Ino)
	}

	// The next process: the new file.
	next := startShimProcess(t, shim, t.TempDir())
	if rc := next.alloc("64M"); rc != "CUDA_SUCCESS" {
		t.Fatalf("the new shim: alloc rc=%s", rc)
	}
	if err := syscall.Stat(shim, &st); err != nil {
		t.Fatal(err)
	}
	if ino, deleted := mappedInode(t, next.cmd.Process.Pid, shim); ino != st.Ino || deleted {
		t.Errorf("the next process maps inode %d (deleted %v), want the new %d", ino, deleted, st.Ino)
	}

	old.stdin.Close()
	if err := old.cmd.Wait(); err != nil {
		t.Errorf("the process that kept the old shim ended with %v", err)
	}
}
