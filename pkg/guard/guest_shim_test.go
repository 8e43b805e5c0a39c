package guard

// The shim with the guard on: CUDA and NVML programs (gstest on the
// simulated driver, which opens the device nodes as NVIDIA's driver does:
// interposer/simcuda/nodes.c) in the vGPU's cgroup, as kmod/guest/run.sh
// packs them under /shim. The shim attaches at the driver's first open of
// a node (interposer/src/devopen.c), so its processes are never refused;
// the same programs without it are; a shimmed process that opens no node
// never attaches.

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// libc's open calls the shim wraps; gstest devopen opens by each.
var openCalls = []string{"open", "open64", "openat", "openat64", "__open_2", "__open64_2", "__openat_2", "__openat64_2"}

// gstestCmd is gstest with args in the vGPU's cgroup, under the shim in
// module mode or (shimmed false) on the driver alone; the caller runs it
// and then calls the function returned.
func (g *guest) gstestCmd(t *testing.T, shimmed bool, args ...string) (*exec.Cmd, func()) {
	cmd := exec.Command("/shim/bin/gstest", args...)
	cmd.Env = []string{
		"PATH=/bin:/sbin", "LD_LIBRARY_PATH=/shim/lib",
		"GPU_IDX=" + strconv.Itoa(guestCard), "GPU_CONTAINER_MEM=1024",
		"GPUSLICE_ENFORCE=module", "GPUSLICE_LOG_LEVEL=info",
		"GPUSLICE_CONTEXT_MIB=1", "SIMCUDA_CONTEXT_MIB=1",
		"SIMCUDA_MEM_MIB=64", "SIMCUDA_STATE=/tmp/guard-sim.state",
	}
	if shimmed {
		cmd.Env = append(cmd.Env, "LD_PRELOAD=/shim/lib/libgpuslice.so")
	}
	return cmd, inCgroup(t, cmd, g.vgpu)
}

// gstest runs gstest to its end: its exit code, its output and the
// key=value lines of it.
func (g *guest) gstest(t *testing.T, shimmed bool, args ...string) (int, string, map[string]string) {
	t.Helper()
	cmd, done := g.gstestCmd(t, shimmed, args...)
	out, err := cmd.CombinedOutput()
	done()
	code := 0
	if err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "gstest %v", args)
		code = exit.ExitCode()
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
		}
	}
	t.Logf("gstest %v (shim %v): exit %d\n%s", args, shimmed, code, out)
	return code, string(out), kv
}

// lingering starts gstest, waits for a line starting with want, and
// returns a function that ends it (closes its stdin, then kills it).
func (g *guest) lingering(t *testing.T, want string, args ...string) func() {
	t.Helper()
	cmd, done := g.gstestCmd(t, true, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "gstest %v", args)
	done()
	stop := func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}
	seen := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), want) {
				seen <- true
				io.Copy(io.Discard, stdout)
				return
			}
		}
		seen <- false
	}()
	select {
	case ok := <-seen:
		if !ok {
			stop()
			t.Fatalf("gstest %v ended before printing %q:\n%s", args, want, stderr.Bytes())
		}
	case <-time.After(60 * time.Second):
		stop()
		t.Fatalf("gstest %v printed no %q in 60 s:\n%s", args, want, stderr.Bytes())
	}
	return stop
}

func shimCases(t *testing.T, g *guest, gd *Guard) {
	refusals := func() uint64 {
		r, err := gd.Refusals()
		require.NoError(t, err)
		return r[g.idV]
	}
	nprocs := func() uint32 {
		s, err := g.admin.Stats(guestCard, g.vid)
		require.NoError(t, err)
		return s.NProcs
	}
	capBytes := strconv.Itoa(vgpuCap)

	t.Run("shimmed", func(t *testing.T) {
		before := refusals()
		// cuInit, a context, an allocation: the kernel's cap is CUDA's.
		code, out, kv := g.gstest(t, true, "meminfo", "0", "1M")
		require.Equal(t, 0, code, out)
		assert.Equal(t, capBytes, kv["cuda.total"], out)
		// NVML alone, as nvidia-smi.
		code, out, kv = g.gstest(t, true, "nvmlinfo")
		require.Equal(t, 0, code, out)
		assert.Equal(t, capBytes, kv["nvml.0.total"], out)
		// Each open call attaches, in a process of its own, errno left
		// as it was.
		for _, how := range openCalls {
			code, out, kv = g.gstest(t, true, "devopen", how, "/dev/nvidiactl")
			require.Equal(t, 0, code, out)
			assert.Equal(t, "1", kv["ok"], "%s: %s", how, out)
			assert.Equal(t, strconv.Itoa(int(unix.EXDEV)), kv["errno"], "%s: %s", how, out)
		}
		// Forked right after cuInit, before any call the shim wraps (it
		// attached at the driver's open): the child, which exits holding
		// 2 MiB and its context, attached a file of its own, so its bytes
		// went with it.
		code, out, kv = g.gstest(t, true, "fork", "early")
		require.Equal(t, 0, code, out)
		assert.Equal(t, "0", kv["children_skipped"], out)
		assert.Equal(t, strconv.Itoa(vgpuCap-1<<20), kv["early.free"], "the parent's context alone: %s", out)
		assert.Equal(t, before, refusals(), "a shimmed process was refused")
	})

	t.Run("unshimmed", func(t *testing.T) {
		before := refusals()
		code, out, _ := g.gstest(t, false, "meminfo")
		assert.NotEqual(t, 0, code, out)
		assert.Contains(t, out, "cuInit: 304 (CUDA_ERROR_OPERATING_SYSTEM)")
		// Its one open of /dev/nvidiactl, after which cuInit gives up.
		assert.Equal(t, before+1, refusals())
		code, out, _ = g.gstest(t, false, "nvmlinfo")
		assert.NotEqual(t, 0, code, out)
		assert.Contains(t, out, "nvmlInit_v2: 999")
		code, out, kv := g.gstest(t, false, "devopen", "open", "/dev/nvidiactl")
		require.Equal(t, 0, code, out)
		assert.Equal(t, eperm, kv["errno"], out)
		assert.Equal(t, before+3, refusals())
	})

	t.Run("no-node", func(t *testing.T) {
		before := nprocs()
		// Loads the driver and reads the simulated machine, opening no
		// node: never attached.
		stop := g.lingering(t, "used=", "watch", "50")
		watching := nprocs()
		stop()
		assert.Equal(t, before, watching, "a shimmed process that opened no node attached")
		// One that used the GPU, for contrast: attached once, though it
		// opened /dev/nvidiactl for CUDA and for NVML and /dev/nvidia0.
		stop = g.lingering(t, "ready", "hold", "1M")
		holding := nprocs()
		stop()
		assert.Equal(t, before+1, holding, "a shimmed process holding memory")
		t.Logf("attached files: %d before, %d next to watch, %d next to hold", before, watching, holding)
	})
}
