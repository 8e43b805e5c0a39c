package guard

// A guard loaded after its processes attached (the agent restarted, or
// was upgraded): Rescan must find their attachments, or they are refused
// the GPU at their next use of a node once their cgroup is added. The
// children are guest_test.go's, stopped at a "wait" step while the test
// loads the guard, then let go on over their stdin.

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// rescanStep runs the child's step of the rescan test, and says whether
// step was one:
//
//	wait  say so, and wait for a byte on stdin (the parent's go-ahead)
func rescanStep(step string, say func(op, path string, err error)) bool {
	if step != "wait" {
		return false
	}
	say("wait", "stdin", nil)
	var b [1]byte
	_, err := os.Stdin.Read(b[:])
	if err != nil {
		say("read", "stdin", err)
	}
	return true
}

// waiting is a child started with startWaiting, stopped at a "wait" step.
type waiting struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr bytes.Buffer
	what   string
}

// startWaiting starts this binary as GUARD_CHILD=what in the cgroup dir,
// and returns it once it is at its first "wait", with the lines it said
// until then.
func (g *guest) startWaiting(dir, what string) (*waiting, map[string]string) {
	t := g.t
	t.Helper()
	w := &waiting{t: t, what: what, cmd: exec.Command("/proc/self/exe")}
	w.cmd.Env = append(os.Environ(), "GUARD_CHILD="+what)
	w.cmd.Stderr = &w.stderr
	var err error
	w.stdin, err = w.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := w.cmd.StdoutPipe()
	require.NoError(t, err)
	w.lines = bufio.NewScanner(stdout)
	done := inCgroup(t, w.cmd, dir)
	require.NoError(t, w.cmd.Start())
	done()
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	})
	return w, w.until()
}

// until reads the child's lines up to its next "wait" (or its end, when
// it waits for it too), keyed as run's.
func (w *waiting) until() map[string]string {
	t := w.t
	t.Helper()
	res := map[string]string{}
	for w.lines.Scan() {
		f := strings.Fields(w.lines.Text())
		require.Len(t, f, 3, "child %s: %q", w.what, w.lines.Text())
		if f[0] == "wait" {
			t.Logf("child %s: %v, waiting", w.what, res)
			return res
		}
		res[f[0]+" "+f[1]] = f[2]
	}
	require.NoError(t, w.cmd.Wait(), "child %s: %s", w.what, w.stderr.String())
	t.Logf("child %s: %v, done", w.what, res)
	return res
}

// next lets the child go on from its "wait", and returns what it said
// until the next one (or its end).
func (w *waiting) next() map[string]string {
	w.t.Helper()
	_, err := w.stdin.Write([]byte{1})
	require.NoError(w.t, err)
	return w.until()
}

// slots are the files the guard holds for the process pid (its task
// storage, looked up by a pidfd), 0 with no storage.
func (gd *Guard) slots(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	var p guardGuardProc
	if err := gd.objs.Procs.Lookup(int32(fd), &p); err != nil {
		return 0
	}
	n := 0
	for _, f := range p.File {
		if f != 0 {
			n++
		}
	}
	return n
}

// withoutBPFLSMBoot says whether the guest was booted without the BPF
// LSM (TestGuestWithoutBPFLSM); there it checks only that Load refuses.
func withoutBPFLSMBoot(t *testing.T) bool {
	cmdline, err := os.ReadFile("/proc/cmdline")
	require.NoError(t, err)
	if !slices.Contains(strings.Fields(string(cmdline)), noBPFLSM) {
		return false
	}
	gd, err := Load()
	if gd != nil {
		gd.Close()
	}
	var ue *UnsupportedError
	require.ErrorAs(t, err, &ue)
	return true
}

// Module mode: processes that attached before the guard loaded, or while
// the agent restarted, keep their GPU.
func TestGuestGuardRescan(t *testing.T) {
	testenv.InGuest(t)
	if withoutBPFLSMBoot(t) {
		return
	}
	g := setup(t)
	sub := filepath.Join(g.vgpu, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	defer os.Remove(sub)
	attachedBefore := func(dir string) *waiting {
		w, res := g.startWaiting(dir, "attach,wait,use")
		require.Equal(t, "0", res["attach /dev/gpuslice"], "ATTACH with no guard loaded")
		return w
	}

	t.Run("rescan", func(t *testing.T) {
		g.t = t
		a, s := attachedBefore(g.vgpu), attachedBefore(sub)
		u, _ := g.startWaiting(g.vgpu, "wait,use")
		gd, err := Load()
		require.NoError(t, err)
		defer gd.Close()
		// The agent's order: Rescan, then the cgroups.
		require.NoError(t, gd.Rescan())
		require.NoError(t, gd.AddCgroup(g.idV))
		allowed(t, a.next(), "a process attached before the guard loaded")
		allowed(t, s.next(), "one of a sub-cgroup")
		refused(t, u.next(), "a process that never attached", len(nodes))
		r, err := gd.Refusals()
		require.NoError(t, err)
		assert.Equal(t, map[uint64]uint64{g.idV: uint64(len(nodes))}, r)
		st, err := gd.Stats()
		require.NoError(t, err)
		assert.Equal(t, Stats{}, st)
	})
	t.Run("without-rescan", func(t *testing.T) {
		// What Rescan is for: the guard alone has no record of an
		// ATTACH made before it loaded.
		g.t = t
		a := attachedBefore(g.vgpu)
		gd, err := Load()
		require.NoError(t, err)
		defer gd.Close()
		require.NoError(t, gd.AddCgroup(g.idV))
		refused(t, a.next(), "a process attached before the guard loaded, no Rescan", len(nodes))
	})
	t.Run("restart", func(t *testing.T) {
		g.t = t
		gd, err := Load()
		require.NoError(t, err)
		require.NoError(t, gd.AddCgroup(g.idV))
		a, res := g.startWaiting(g.vgpu, "attach,wait,use,wait,use,wait,use")
		require.Equal(t, "0", res["attach /dev/gpuslice"])
		allowed(t, a.next(), "an attached process")
		// The agent stops, and its new version starts.
		require.NoError(t, gd.Close())
		gd, err = Load()
		require.NoError(t, err)
		defer func() { gd.Close() }()
		require.NoError(t, gd.Rescan())
		require.NoError(t, gd.AddCgroup(g.idV))
		allowed(t, a.next(), "the attached process, the agent restarted")
		// Again: the file recorded once, not twice (one slot of four).
		require.NoError(t, gd.Rescan())
		assert.Equal(t, 1, gd.slots(t, a.cmd.Process.Pid), "slots after two rescans")
		allowed(t, a.next(), "the attached process, rescanned twice")
		r, err := gd.Refusals()
		require.NoError(t, err)
		assert.Equal(t, map[uint64]uint64{g.idV: 0}, r)
	})
}

// File mode: a process holding its ledger open from before the guard
// loaded keeps its GPU, once its directory is registered and Rescan ran.
func TestGuestGuardRescanFile(t *testing.T) {
	testenv.InGuest(t)
	if withoutBPFLSMBoot(t) {
		return
	}
	testenv.NvidiaStub(t)
	g := &guest{t: t}
	d, err := ReadDevices(ProcDevices, filepath.Join(t.TempDir(), "no-gpuslice"))
	require.NoError(t, err)
	require.Zero(t, d.Gpuslice)
	c := twoContainers(t, "guardR")
	a, b, subA, idA, idB, la, lb := c.a, c.b, c.subA, c.idA, c.idB, c.la, c.lb
	ledgerA := "ledger=" + filepath.Join(la, "card0.ledger")
	// The agent's order: its ledger directories, Rescan, its cgroups.
	loadAgain := func(rescan bool) *Guard {
		gd, err := load(d)
		require.NoError(t, err)
		require.NoError(t, gd.AddLedgerDir(la, idA))
		require.NoError(t, gd.AddLedgerDir(lb, idB))
		if rescan {
			require.NoError(t, gd.Rescan())
		}
		require.NoError(t, gd.AddCgroup(idA))
		require.NoError(t, gd.AddCgroup(idB))
		return gd
	}

	t.Run("rescan", func(t *testing.T) {
		g.t = t
		own, _ := g.startWaiting(a, ledgerA+",wait,use")
		subOwn, _ := g.startWaiting(subA, ledgerA+",wait,use")
		other, _ := g.startWaiting(b, ledgerA+",wait,use")
		none, _ := g.startWaiting(a, "wait,use")
		gd := loadAgain(true)
		defer gd.Close()
		allowed(t, own.next(), "a process holding its ledger from before the guard loaded")
		allowed(t, subOwn.next(), "one of a sub-cgroup")
		refused(t, other.next(), "a process holding another container's ledger", len(nodes))
		refused(t, none.next(), "a process without its ledger", len(nodes))
		r, err := gd.Refusals()
		require.NoError(t, err)
		assert.Equal(t, map[uint64]uint64{idA: uint64(len(nodes)), idB: uint64(len(nodes))}, r)
	})
	t.Run("without-rescan", func(t *testing.T) {
		g.t = t
		own, _ := g.startWaiting(a, ledgerA+",wait,use")
		gd := loadAgain(false)
		defer gd.Close()
		refused(t, own.next(), "a process holding its ledger from before the guard loaded, no Rescan", len(nodes))
	})
}
