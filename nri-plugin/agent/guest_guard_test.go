package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/guard"
	"github.com/gpuslice/gpuslice/pkg/kmod"
)

// inCgroup runs f with this process moved into the cgroup directory dir,
// and moves it back to the root.
func inCgroup(t *testing.T, dir string, f func()) {
	t.Helper()
	pid := []byte(strconv.Itoa(os.Getpid()))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0))
	defer func() {
		require.NoError(t, os.WriteFile("/sys/fs/cgroup/cgroup.procs", pid, 0))
	}()
	f()
}

// openNode opens /dev/nvidia0 and closes it again: its errno, 0 allowed.
func openNode() unix.Errno {
	fd, err := unix.Open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err.(unix.Errno)
	}
	unix.Close(fd)
	return 0
}

// The agent and the real guard in the qemu guest: a bound container's
// process without an ATTACH is refused the NVIDIA nodes and one with it
// is not; with the agent stopped (its guard closed) nobody is refused;
// an agent restarted over the same state guards the container again
// before it serves anything (its cgroup from the state, agent.New), and
// a job attached before the restart keeps its GPU (Rescan).
func TestGuestAgentGuard(t *testing.T) {
	testenv.NvidiaStub(t)
	if err := guard.Supported(); err != nil {
		withoutBPFLSM(t)
		return
	}
	g, err := guard.Load()
	require.NoError(t, err)
	n, _ := guestNode(t, cards16(1, 4)...)
	n.opts.Guard = g
	n.restart(t)

	dir := "/sys/fs/cgroup/gpuslice-guard/c1"
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Cleanup(func() { os.Remove(dir); os.Remove(filepath.Dir(dir)) })
	c := ctr("c1")
	c.Linux.CgroupsPath = "/gpuslice-guard/c1"
	_, _, err = n.agent.CreateContainer(context.Background(), pod(map[string]string{
		"gpuslice.io/gpu-memory": "256Mi"}), c)
	require.NoError(t, err)
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), c))
	al, _ := n.opts.Store.Get("c1")
	card := uint32(al.VGPUs[0].Card)

	assert.Equal(t, unix.Errno(0), openNode(), "a host process")
	inCgroup(t, dir, func() {
		assert.Equal(t, unix.EPERM, openNode(), "the container's process without ATTACH")
		cl, err := kmod.Open("")
		require.NoError(t, err)
		_, err = cl.Attach(card)
		require.NoError(t, err)
		assert.Equal(t, unix.Errno(0), openNode(), "attached")
		require.NoError(t, cl.Close())
	})
	refused, err := g.Refusals()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), refused[al.CgroupID], "the refusal counted for the container: %v", refused)

	// A job of the container, attached, runs on while the agent stops:
	// its guard's programs go with it.
	var job *kmod.Client
	inCgroup(t, dir, func() {
		job, err = kmod.Open("")
		require.NoError(t, err)
		_, err = job.Attach(card)
		require.NoError(t, err)
	})
	require.NoError(t, g.Close())
	inCgroup(t, dir, func() {
		assert.Equal(t, unix.Errno(0), openNode(), "no agent, no guard")
	})

	// It starts again: a new guard, the container's cgroup from the
	// state, and the job's attachment from before the guard loaded
	// (Rescan): the job keeps its GPU, an unattached process does not.
	g, err = guard.Load()
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	n.opts.Guard = g
	n.restart(t)
	inCgroup(t, dir, func() {
		assert.Equal(t, unix.Errno(0), openNode(), "the job attached before the restart keeps its GPU")
		require.NoError(t, job.Close())
		assert.Equal(t, unix.EPERM, openNode(), "guarded again after the restart")
	})

	// Removed: its processes are left alone.
	require.NoError(t, n.agent.RemoveContainer(context.Background(), pod(nil), c))
	inCgroup(t, dir, func() {
		assert.Equal(t, unix.Errno(0), openNode(), "the container's vGPU gone")
	})
}

// withoutBPFLSM is TestGuestAgentGuard in kmod/guest's second boot, whose
// kernel has the BPF LSM off: the guard cannot load, and an agent whose
// configuration requires it (guard: required, the default: GuardErr)
// refuses a vGPU container, saying what to change on the node.
func withoutBPFLSM(t *testing.T) {
	_, err := guard.Load()
	require.Error(t, err, "no BPF LSM in this boot")
	n, _ := guestNode(t, cards16(1, 4)...)
	n.opts.GuardErr = err
	n.restart(t)
	_, _, err = n.agent.CreateContainer(context.Background(), pod(map[string]string{
		"gpuslice.io/gpu-memory": "256Mi"}), ctr("c1"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "eBPF guard is not running")
	assert.Contains(t, err.Error(), "lsm=", "what to change on the node")
	assert.Empty(t, n.opts.Store.All())
}
