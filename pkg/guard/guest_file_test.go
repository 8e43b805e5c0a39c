package guard

// The guard of a node without gpuslice.ko (the file mode) in a real
// kernel: a guarded process proves it asked for its vGPU by holding open
// a file of its own container's ledger directory (AddLedgerDir). The
// guard is loaded as on such a node, without /dev/gpuslice's number, so
// that no ATTACH can prove anything here; the children are guest_test.go's
// (its child runs the steps below too).

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/guard/internal/ioctl32"
)

// ledgerFd is the child's open ledger file (-1: none).
var ledgerFd = -1

// fileStep runs one of the child's steps of the file-mode test, and
// says whether step was one:
//
//	ledger=PATH    open PATH (made if missing), kept open and inherited across exec
//	ledger-mapped  map the open ledger file, then close its descriptor
//	unledger       close it
//	ioctl32        a 32-bit process's ioctl of fd 3 (a node the parent opened)
func fileStep(step string, say func(op, path string, err error)) bool {
	switch {
	case strings.HasPrefix(step, "ledger="):
		path := strings.TrimPrefix(step, "ledger=")
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT, 0o666)
		say("ledger", path, err)
		ledgerFd = fd
	case step == "ledger-mapped":
		size := os.Getpagesize()
		err := unix.Ftruncate(ledgerFd, int64(size))
		if err == nil {
			_, err = unix.Mmap(ledgerFd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		}
		if err == nil {
			err = unix.Close(ledgerFd)
		}
		say("map", "ledger", err)
	case step == "unledger":
		say("close", "ledger", unix.Close(ledgerFd))
	case step == "ioctl32":
		var err error
		if r := ioctl32.Ioctl(3, 0x1200, 0); r < 0 {
			err = syscall.Errno(-r)
		}
		// Counted as an ioctl by refused.
		say("ioctl", "inherited-32bit", err)
	default:
		return false
	}
	return true
}

// fileContainers are two vGPU containers of a file-mode node: their
// cgroups (a sub-cgroup of the first too) and their ledger directories.
type fileContainers struct {
	a, b, subA string // cgroup directories
	idA, idB   uint64
	la, lb     string // ledger directories
}

// twoContainers makes them: cgroups prefix+"A" and prefix+"B", ledger
// directories under a temporary directory (the guest's tmpfs).
func twoContainers(t *testing.T, prefix string) fileContainers {
	t.Helper()
	var c fileContainers
	c.a, c.idA = cgroup(t, prefix+"A")
	c.b, c.idB = cgroup(t, prefix+"B")
	c.subA = filepath.Join(c.a, "sub")
	require.NoError(t, os.Mkdir(c.subA, 0o755))
	t.Cleanup(func() { os.Remove(c.subA) })
	root := t.TempDir()
	c.la, c.lb = filepath.Join(root, "a"), filepath.Join(root, "b")
	ledgerDir(t, c.la)
	ledgerDir(t, c.lb)
	return c
}

// ledgerDir makes a directory as the agent makes a container's ledger
// directory: mode 1777, every process of the container writes there.
func ledgerDir(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.Mkdir(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o1777))
}

func TestGuestGuardFile(t *testing.T) {
	testenv.InGuest(t)
	cmdline, err := os.ReadFile("/proc/cmdline")
	require.NoError(t, err)
	if slices.Contains(strings.Fields(string(cmdline)), noBPFLSM) {
		// What the agent of a file-mode node calls is refused too.
		gd, err := Load()
		if gd != nil {
			gd.Close()
		}
		var ue *UnsupportedError
		require.ErrorAs(t, err, &ue)
		return
	}
	require.True(t, ioctl32.Supported, "the guest is x86-64")
	testenv.NvidiaStub(t)
	g := &guest{t: t}
	inherited, err := os.OpenFile("/dev/nvidia0", os.O_RDWR, 0)
	require.NoError(t, err)
	defer inherited.Close()

	// A node without gpuslice.ko: no /dev/gpuslice.
	require.NoError(t, Supported())
	d, err := ReadDevices(ProcDevices, filepath.Join(t.TempDir(), "no-gpuslice"))
	require.NoError(t, err)
	require.Zero(t, d.Gpuslice)
	gd, err := load(d)
	require.NoError(t, err)
	defer func() { gd.Close() }()

	c := twoContainers(t, "guardF")
	a, b, subA, idA, idB, la, lb := c.a, c.b, c.subA, c.idA, c.idB, c.la, c.lb
	ledgerDir(t, filepath.Join(la, "sub"))
	for dir, id := range map[string]uint64{la: idA, lb: idB} {
		require.NoError(t, gd.AddCgroup(id))
		require.NoError(t, gd.AddLedgerDir(dir, id))
	}
	ledgerA, ledgerB := "ledger="+filepath.Join(la, "card0.ledger"), "ledger="+filepath.Join(lb, "card0.ledger")

	t.Run("ledger", func(t *testing.T) {
		allowed(t, g.run(a, ledgerA+",use,use-inherited,ioctl32", inherited), "a process holding its ledger")
		allowed(t, g.run(subA, ledgerA+",use", nil), "a process of a sub-cgroup holding its ledger")
		allowed(t, g.run(b, ledgerB+",use,use-inherited,ioctl32", inherited), "the other container's")
		// The shim maps its ledger: the mapping holds the file.
		allowed(t, g.run(a, ledgerA+",ledger-mapped,use", nil), "a process that mapped its ledger and closed it")
	})
	t.Run("no-ledger", func(t *testing.T) {
		refused(t, g.run(a, "use,use-inherited,ioctl32", inherited), "a process without its ledger", len(nodes)+3)
	})
	t.Run("other-container", func(t *testing.T) {
		// The second container's directory, reachable here, proves nothing.
		res := g.run(a, ledgerB+",use,use-inherited,ioctl32", inherited)
		assert.Equal(t, "0", res[strings.ReplaceAll(ledgerB, "=", " ")])
		refused(t, res, "a process holding another container's ledger", len(nodes)+3)
	})
	t.Run("subdirectory", func(t *testing.T) {
		// Only files directly in the directory prove anything.
		refused(t, g.run(a, "ledger="+filepath.Join(la, "sub", "x")+",use", nil),
			"a process holding a file below its ledger directory", len(nodes))
	})
	t.Run("closed", func(t *testing.T) {
		refused(t, g.run(a, ledgerA+",unledger,use,use-inherited", inherited),
			"a process that closed its ledger", len(nodes)+2)
	})
	t.Run("exec", func(t *testing.T) {
		// The new image inherits the open ledger, but has not opened it.
		refused(t, g.run(a, ledgerA+",exec,use-inherited", inherited), "a process after exec", 2)
		allowed(t, g.run(a, ledgerA+",exec,"+ledgerA+",use", nil), "an exec'd process that opens its ledger again")
	})
	t.Run("fork", func(t *testing.T) {
		allowed(t, g.run(a, ledgerA+",fork-open", nil), "the forked child of a process holding its ledger")
		res := g.run(a, "fork-open", nil)
		assert.Equal(t, eperm, res["fork-open /dev/nvidiactl"], "the forked child of one without")
	})
	t.Run("removed", func(t *testing.T) {
		require.NoError(t, gd.RemoveLedgerDir(la))
		refused(t, g.run(a, ledgerA+",use", nil), "a process holding an unregistered ledger", len(nodes))
		allowed(t, g.run(b, ledgerB+",use", nil), "the container whose ledger is still registered")
		// Registered again, as a restarted agent does from its state.
		require.NoError(t, gd.AddLedgerDir(la, idA))
		allowed(t, g.run(a, ledgerA+",use", nil), "a process holding its ledger, registered again")
	})

	t.Run("counted", func(t *testing.T) {
		r, err := gd.Refusals()
		require.NoError(t, err)
		// no-ledger 4 + 3, other-container 4 + 3, subdirectory 4,
		// closed 4 + 2, exec 2, fork 1, removed 4.
		const want = 31
		assert.Equal(t, map[uint64]uint64{idA: want, idB: 0}, r)
		st, err := gd.Stats()
		require.NoError(t, err)
		require.Equal(t, Stats{}, st)
		// Each refusal by the hook that made it: the 32-bit ioctls by
		// file_ioctl_compat. As many records as refusals were counted (none
		// lost), and a deadline should that be wrong.
		gd.events.SetDeadline(time.Now().Add(10 * time.Second))
		ops := map[string]int{}
		for range r[idA] + r[idB] {
			ev, err := gd.NextRefusal()
			require.NoError(t, err)
			assert.Equal(t, idA, ev.Cgroup)
			ops[ev.Op]++
		}
		assert.Equal(t, map[string]int{"open": 21, "ioctl": 4, "mmap": 4, "ioctl32": 2}, ops)
	})
}
