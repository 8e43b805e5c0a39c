package guard

// The guard in a real kernel: kmod/guest boots these tests (tests/GO) with
// gpuslice.ko loaded; they load guest/nvstub's stand-in NVIDIA devices,
// and run child processes (this test binary again, GUARD_CHILD naming
// what it does) in cgroups with and without a vGPU.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/kmod"
)

// The card of the test's vGPU (one no other guest program uses), and one
// no program configures (kmod/guest/tests: UNCONF).
const guestCard, noCard = 24, 31

// The vGPU's memory cap.
const vgpuCap = 8 << 20

// The stand-in device nodes (testenv.NvidiaStub makes them).
var nodes = testenv.StubNodes

func TestMain(m *testing.M) {
	if what := os.Getenv("GUARD_CHILD"); what != "" {
		os.Exit(child(what))
	}
	os.Exit(m.Run())
}

// child runs one scenario and prints one line per use: "<op> <path> <errno>".
func child(what string) int {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	say := func(op, path string, err error) {
		var errno syscall.Errno
		if err != nil && !errors.As(err, &errno) {
			fmt.Fprintf(out, "%s %s %v\n", op, path, err)
		} else {
			fmt.Fprintf(out, "%s %s %d\n", op, path, int(errno))
		}
		// Each line as it comes: the parent may be waiting for it.
		out.Flush()
	}
	steps := strings.Split(what, ",")
	gs := -1
	for i, step := range steps {
		switch step {
		case "attach", "attach-nocard":
			// Without O_CLOEXEC: an exec'd image inherits the attached file.
			fd, err := unix.Open(kmod.Device, unix.O_RDWR, 0)
			if err != nil {
				say("open", kmod.Device, err)
				return 1
			}
			a := kmod.Attach{Card: guestCard}
			if step == "attach-nocard" {
				a.Card = noCard
			}
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(kmod.IocAttach), uintptr(unsafe.Pointer(&a)))
			if e != 0 {
				err = e
			}
			say("attach", kmod.Device, err)
			gs = fd
		case "detach":
			say("close", kmod.Device, unix.Close(gs))
		case "exec":
			// The rest of the steps run in the new image.
			env := []string{"GUARD_CHILD=" + strings.Join(steps[i+1:], ",")}
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GUARD_CHILD=") {
					env = append(env, kv)
				}
			}
			out.Flush()
			err := syscall.Exec("/proc/self/exe", []string{os.Args[0]}, env)
			say("exec", os.Args[0], err)
			return 1
		case "use":
			for _, n := range nodes {
				fd, err := unix.Open(n.Path, unix.O_RDWR|unix.O_CLOEXEC, 0)
				say("open", n.Path, err)
				if err == nil {
					use(say, fd, n.Path)
					unix.Close(fd)
				}
			}
		case "use-inherited":
			// fd 3: a node the parent (a host process) opened.
			use(say, 3, "inherited")
		case "send":
			// Opens /dev/nvidia0 and sends it over the socket at fd 3.
			fd, err := unix.Open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, 0)
			say("open", "/dev/nvidia0", err)
			if err == nil {
				say("send", "/dev/nvidia0", unix.Sendmsg(3, []byte{1}, unix.UnixRights(fd), nil, 0))
			}
		case "recv-use":
			// Uses the node that came over the socket at fd 3.
			fd, err := recvFd(3)
			say("recv", "passed", err)
			if err == nil {
				use(say, fd, "passed")
			}
		case "bench":
			// Round trips on /dev/nvidia0 (reported, not asserted).
			const opens, ioctls = 2000, 20000
			t0 := time.Now()
			for range opens {
				fd, err := unix.Open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, 0)
				if err != nil {
					say("bench", "open", err)
					return 1
				}
				unix.Close(fd)
			}
			openNs := time.Since(t0).Nanoseconds() / opens
			fd, err := unix.Open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				say("bench", "open", err)
				return 1
			}
			t0 = time.Now()
			for range ioctls {
				unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0x1234, 0)
			}
			fmt.Fprintf(out, "bench ioctl %d\nbench open %d\n", time.Since(t0).Nanoseconds()/ioctls, openNs)
			unix.Close(fd)
			// And of a regular file, which every open on the node is
			// (the file mode's hook looks at its parent directory).
			file := filepath.Join(os.TempDir(), fmt.Sprintf("guard-bench-%d", os.Getpid()))
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				say("bench", "file", err)
				return 1
			}
			defer os.Remove(file)
			t0 = time.Now()
			for range opens {
				fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					say("bench", "file", err)
					return 1
				}
				unix.Close(fd)
			}
			fmt.Fprintf(out, "bench file %d\n", time.Since(t0).Nanoseconds()/opens)
		case "fork-open":
			say("fork-open", "/dev/nvidiactl", forkOpen("/dev/nvidiactl"))
		default:
			if !fileStep(step, say) && !rescanStep(step, say) { // guest_file_test.go's, guest_rescan_test.go's
				fmt.Fprintf(out, "bad step %q\n", step)
				return 1
			}
		}
	}
	return 0
}

func recvFd(sock int) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, make([]byte, 1), oob, 0)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no descriptor came: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("no descriptor came: %v", err)
	}
	return fds[0], nil
}

// forkOpen forks (a plain fork, no exec: the child is this image) and
// returns what open(path) answered in the child. The child makes raw
// system calls only: it is a copy of one thread of a Go program.
func forkOpen(path string) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	defer unix.Close(pipe[0])
	var answer [1]byte
	cwd := unix.AT_FDCWD
	pid, _, e := unix.RawSyscall(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0)
	if e != 0 {
		unix.Close(pipe[1])
		return e
	}
	if pid == 0 {
		fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(p)),
			uintptr(unix.O_RDWR), 0, 0, 0)
		answer[0] = byte(e)
		if e == 0 {
			unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
		}
		unix.RawSyscall(unix.SYS_WRITE, uintptr(pipe[1]), uintptr(unsafe.Pointer(&answer[0])), 1)
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	unix.Close(pipe[1])
	var ws unix.WaitStatus
	if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != nil {
		return err
	}
	if n, err := unix.Read(pipe[0], answer[:]); err != nil || n != 1 {
		return fmt.Errorf("the forked child said nothing (%v, status %v)", err, ws)
	}
	if answer[0] != 0 {
		return syscall.Errno(answer[0])
	}
	return nil
}

func use(say func(op, path string, err error), fd int, path string) {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0x1234, 0)
	var err error
	if e != 0 {
		err = e
	}
	say("ioctl", path, err)
	b, err := unix.Mmap(fd, 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	say("mmap", path, err)
	if err == nil {
		unix.Munmap(b)
	}
}

type guest struct {
	t     *testing.T
	admin *kmod.Client
	vgpu  string // a cgroup with a vGPU on guestCard
	idV   uint64
	vid   uint32 // its vGPU
	plain string // a cgroup without one
}

// setup loads the stand-in driver, makes the device nodes, a vGPU cgroup
// and a plain one.
func setup(t *testing.T) *guest {
	testenv.NvidiaStub(t)
	g := &guest{t: t}
	var err error
	g.admin, err = kmod.Open("")
	require.NoError(t, err)
	t.Cleanup(func() { g.admin.Close() })
	require.NoError(t, g.admin.SetCard(kmod.Card{Card: guestCard, Policy: kmod.PolicyNative, MaxInst: 20}))
	g.vgpu, g.idV = cgroup(t, "guardV")
	g.plain, _ = cgroup(t, "guardP")
	g.vid, err = g.admin.CreateVGPU(kmod.VGPU{Card: guestCard, CgroupID: g.idV, MemCap: vgpuCap, Mode: kmod.ModeMemory})
	require.NoError(t, err)
	t.Cleanup(func() { g.admin.DestroyVGPU(guestCard, g.vid) })
	return g
}

func cgroup(t *testing.T, name string) (string, uint64) {
	dir := filepath.Join("/sys/fs/cgroup", name)
	require.NoError(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() { os.Remove(dir) })
	id, err := kmod.CgroupID(dir)
	require.NoError(t, err)
	return dir, id
}

// run starts this binary as GUARD_CHILD=what in the cgroup dir ("" this
// process's), with extra as its fd 3, and returns its lines, keyed by
// "<op> <path>", with their errnos.
func (g *guest) run(dir, what string, extra *os.File) map[string]string {
	t := g.t
	t.Helper()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), "GUARD_CHILD="+what)
	if extra != nil {
		cmd.ExtraFiles = []*os.File{extra}
	}
	defer inCgroup(t, cmd, dir)()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child %s in %s: %s", what, dir, out)
	res := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, "child %s: %q", what, line)
		res[f[0]+" "+f[1]] = f[2]
	}
	t.Logf("child %s in %s: %v", what, dir, res)
	return res
}

// inCgroup makes cmd start in the cgroup dir ("" this process's); the
// function it returns closes the cgroup's descriptor, once cmd started.
func inCgroup(t *testing.T, cmd *exec.Cmd, dir string) func() {
	t.Helper()
	if dir == "" {
		return func() {}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	return func() { unix.Close(fd) }
}

var eperm = strconv.Itoa(int(unix.EPERM))

// allowed asserts that every use in res succeeded, refused that every
// open, ioctl and mmap of a node got EPERM (and that there were some).
func allowed(t *testing.T, res map[string]string, who string) {
	t.Helper()
	require.NotEmpty(t, res)
	for k, v := range res {
		assert.Equal(t, "0", v, "%s: %s", who, k)
	}
}

func refused(t *testing.T, res map[string]string, who string, want int) {
	t.Helper()
	n := 0
	for k, v := range res {
		if strings.HasPrefix(k, "open ") || strings.HasPrefix(k, "ioctl ") || strings.HasPrefix(k, "mmap ") {
			assert.Equal(t, eperm, v, "%s: %s", who, k)
			n++
		}
	}
	assert.Equal(t, want, n, "%s: uses seen: %v", who, res)
}

// noBPFLSM is the guest kernel command line's word that says the guest
// was booted without the BPF LSM (kmod/guest's TestGuestWithoutBPFLSM).
const noBPFLSM = "gsguest.no_bpf_lsm=1"

func TestGuestGuard(t *testing.T) {
	testenv.InGuest(t)
	cmdline, err := os.ReadFile("/proc/cmdline")
	require.NoError(t, err)
	if strings.Contains(" "+strings.TrimSpace(string(cmdline))+" ", " "+noBPFLSM+" ") {
		withoutBPFLSM(t)
		return
	}
	g := setup(t)
	// A node the host opens, for the children that use an fd they did
	// not open (inherited across exec, as one passed over a socket).
	inherited, err := os.OpenFile("/dev/nvidia0", os.O_RDWR, 0)
	require.NoError(t, err)
	defer inherited.Close()

	require.NoError(t, Supported())
	gd, err := Load()
	require.NoError(t, err)
	defer func() { gd.Close() }()
	require.NoError(t, gd.AddCgroup(g.idV))
	sub := filepath.Join(g.vgpu, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	defer os.Remove(sub)

	t.Run("host", func(t *testing.T) {
		allowed(t, g.run("", "use,use-inherited", inherited), "a host process")
	})
	t.Run("no-vgpu", func(t *testing.T) {
		allowed(t, g.run(g.plain, "use,use-inherited", inherited), "a process of a cgroup without a vGPU")
	})
	t.Run("attached", func(t *testing.T) {
		allowed(t, g.run(g.vgpu, "attach,use,use-inherited", inherited), "an attached process")
		allowed(t, g.run(sub, "attach,use,use-inherited", inherited), "an attached process of a sub-cgroup")
	})
	t.Run("unattached", func(t *testing.T) {
		// Opens refused: no ioctl or mmap follows them.
		refused(t, g.run(g.vgpu, "use", nil), "an unattached process", len(nodes))
		refused(t, g.run(sub, "use", nil), "an unattached process of a sub-cgroup", len(nodes))
	})
	t.Run("inherited-fd", func(t *testing.T) {
		refused(t, g.run(g.vgpu, "use-inherited", inherited), "an unattached process's inherited fd", 2)
	})
	t.Run("attach-failed", func(t *testing.T) {
		// An ATTACH the module refused is no attachment.
		res := g.run(g.vgpu, "attach-nocard,use,use-inherited", inherited)
		assert.Equal(t, strconv.Itoa(int(unix.ENODEV)), res["attach "+kmod.Device])
		refused(t, res, "a process whose ATTACH failed", len(nodes)+2)
	})
	t.Run("detached", func(t *testing.T) {
		// Attached, then /dev/gpuslice closed: attached no more.
		res := g.run(g.vgpu, "attach,detach,use,use-inherited", inherited)
		assert.Equal(t, "0", res["attach "+kmod.Device])
		refused(t, res, "a process that closed /dev/gpuslice", len(nodes)+2)
	})
	t.Run("exec", func(t *testing.T) {
		// The new image inherits the attached file and the node's fd,
		// but has not attached itself.
		res := g.run(g.vgpu, "attach,exec,use-inherited", inherited)
		refused(t, res, "an attached process after exec", 2)
		// And attaching again in the new image is enough.
		allowed(t, g.run(g.vgpu, "attach,exec,attach,use", nil), "an exec'd process that attaches again")
	})

	t.Run("passed-fd", func(t *testing.T) {
		// An attached process sends /dev/nvidia0 over a unix socket twice:
		// the unattached receiver is refused its use, an attached one not.
		sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		a, b := os.NewFile(uintptr(sp[0]), "sender"), os.NewFile(uintptr(sp[1]), "receiver")
		defer a.Close()
		defer b.Close()
		allowed(t, g.run(g.vgpu, "attach,send,send", a), "an attached sender")
		res := g.run(g.vgpu, "recv-use", b)
		assert.Equal(t, "0", res["recv passed"])
		refused(t, res, "an unattached receiver", 2)
		allowed(t, g.run(g.vgpu, "attach,recv-use", b), "an attached receiver")
	})
	t.Run("fork", func(t *testing.T) {
		// The child of an attached process shares its attached file.
		allowed(t, g.run(g.vgpu, "attach,fork-open", nil), "the forked child of an attached process")
		res := g.run(g.vgpu, "fork-open", nil)
		assert.Equal(t, eperm, res["fork-open /dev/nvidiactl"], "the forked child of an unattached process")
	})

	// The cost of the guard: open + close and an ioctl of a guarded node,
	// by a host process (the hooks run and let it pass at the cgroup
	// check) and an attached one (the whole check), with the guard on
	// here and off below.
	bench := map[string]string{}
	t.Run("bench-on", func(t *testing.T) {
		for who, r := range map[string]map[string]string{
			"host": g.run("", "bench", nil), "attached": g.run(g.vgpu, "attach,bench", nil),
		} {
			bench[who+"_on_open"], bench[who+"_on_ioctl"] = r["bench open"], r["bench ioctl"]
			bench[who+"_on_file"] = r["bench file"]
		}
	})

	t.Run("counted", func(t *testing.T) {
		r, err := gd.Refusals()
		require.NoError(t, err)
		// unattached 4 + 4 opens, inherited-fd 2, attach-failed 4 + 2,
		// detached 4 + 2, exec 2, passed-fd 2, fork 1.
		assert.Equal(t, map[uint64]uint64{g.idV: 27}, r)
		st, err := gd.Stats()
		require.NoError(t, err)
		assert.Equal(t, Stats{}, st)
		// The first refusal's record names the process.
		ev, err := gd.NextRefusal()
		require.NoError(t, err)
		assert.Equal(t, g.idV, ev.Cgroup)
		assert.Equal(t, "open", ev.Op)
		assert.Equal(t, uint32(NvidiaMajor), ev.Major)
		assert.Equal(t, uint32(255), ev.Minor)
		assert.NotZero(t, ev.PID)
		t.Log(ev)
	})

	// The shim attaches before the driver opens a node (guest_shim_test.go).
	t.Run("shim", func(t *testing.T) { shimCases(t, g, gd) })

	t.Run("off", func(t *testing.T) {
		// The agent stopped: the guard is gone with its links.
		require.NoError(t, gd.Close())
		allowed(t, g.run(g.vgpu, "use", nil), "an unattached process, the guard off")
		r := g.run("", "bench", nil)
		bench["off_open"], bench["off_ioctl"], bench["off_file"] = r["bench open"], r["bench ioctl"], r["bench file"]
		for _, k := range []string{"off_open", "host_on_open", "attached_on_open", "off_ioctl", "host_on_ioctl", "attached_on_ioctl",
			"off_file", "host_on_file", "attached_on_file"} {
			fmt.Printf("GSBENCH guard_%s %s ns\n", k, bench[k])
		}
		// Back, with the agent's cgroups added again.
		gd, err = Load()
		require.NoError(t, err)
		allowed(t, g.run(g.vgpu, "use", nil), "an unattached process, the guard reloaded without its cgroups")
		require.NoError(t, gd.AddCgroup(g.idV))
		refused(t, g.run(g.vgpu, "use", nil), "an unattached process, the guard reloaded", len(nodes))
	})
}

// withoutBPFLSM: on a kernel booted without bpf in lsm=, the guard says
// so, with the change to make, and does not load.
func withoutBPFLSM(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/security/lsm"); err != nil {
		require.NoError(t, unix.Mount("securityfs", "/sys/kernel/security", "securityfs", 0, ""))
	}
	lsm, err := os.ReadFile("/sys/kernel/security/lsm")
	require.NoError(t, err)
	t.Logf("active LSMs: %s", lsm)
	var ue *UnsupportedError
	require.ErrorAs(t, Supported(), &ue)
	assert.Contains(t, ue.Reason, "the BPF LSM is not active")
	assert.Contains(t, ue.Fix, "lsm="+strings.TrimSpace(string(lsm))+",bpf")
	g, err := Load()
	if g != nil {
		g.Close()
	}
	require.ErrorAs(t, err, &ue)
	t.Log(err)
}
