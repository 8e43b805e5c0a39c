package guest_test

// TestGuest builds gpuslice.ko and the static programs of kmod/guest/tests,
// boots them in a qemu guest (TCG) on Debian's kernel through run.sh
// and judges the run by the markers the guest's /init and the programs
// print on the serial console (see init for the list). It needs Debian's
// kernel image and headers, qemu, busybox-static, cpio and kmod: deps.sh
// installs them when run as root. GPUSLICE_SKIP_GUEST=1 is the only way to
// skip it.
//
// It lives here rather than in kmod/: go refuses a directory that holds .c
// files and Go files without cgo.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// program is what the log says about one test program.
type program struct {
	name   string
	ran    bool     // GSGUEST RUN seen
	done   bool     // GSGUEST TEST ... rc= seen
	rc     int      // its exit status
	secs   string   // its run time in the guest
	lines  []string // everything between RUN and TEST
	pass   []string // GSTEST ... PASS
	fail   []string // GSTEST ... FAIL (and malformed GSTEST lines)
	bench  []string // GSBENCH lines
	strays []string // processes it left behind
	reload string   // "OK"/"FAIL" when it left the module unloaded
}

// guestLog is the parsed serial console.
type guestLog struct {
	lines       []string // cleaned lines, in order
	boot        string   // the kernel release of GSGUEST BOOT
	insmod      string   // the rest of GSGUEST INSMOD
	rmmod       string   // the rest of GSGUEST RMMOD
	taintBefore int64    // -1: not seen
	taintAfter  int64
	done        bool
	progs       map[string]*program
	outside     []string // GSTEST/GSBENCH lines outside any program
	loose       []string // other lines outside any program, after BOOT
	dmesg       []string // the kernel log since insmod (GSDMESG)
	kernelErrs  []string // lines that say the kernel went wrong
}

var (
	// Terminal control sequences (SeaBIOS clears the screen) and the
	// serial line's carriage returns.
	ansiRE = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|c)|\r`)
	// Where a marker starts; anything before it on the line is noise.
	markerRE = regexp.MustCompile(`GS(GUEST|TEST|BENCH|DMESG|INFO) `)
	rcRE     = regexp.MustCompile(`^(\S+) rc=(-?\d+)(?: secs=(\S+))?`)
	// A kernel message's timestamp (CONFIG_PRINTK_TIME).
	kernelTimeRE = regexp.MustCompile(`\[ *\d+\.\d{6}\]`)
	// What the kernel prints when something is wrong: oopses, BUG_ON, WARN,
	// panics, lockdep, lockups and stalls, stack dumps, list corruption;
	// and what comes before a lockup: an hrtimer callback that ran long
	// (a card's timer doing unbounded work in hard-IRQ context), RCU
	// stall warnings (and the grace-period kthread starved), the lockup
	// detectors' lines (watchdog:, NMI watchdog) and the hung-task
	// detector's.
	kernelErrRE = regexp.MustCompile(`BUG:|kernel BUG|Oops|WARNING:|Kernel panic|` +
		`possible circular locking|general protection|soft lockup|hard LOCKUP|` +
		`blocked for more than|detected stalls|self-detected stall|Call Trace:|` +
		`UBSAN:|corruption|refcount_t:|INFO: task|` +
		`hrtimer: interrupt took|rcu: INFO:|rcu: .*stall|` +
		`\bwatchdog: |NMI watchdog|hung_task|kthread starved`)
	// What the lockup detectors say at boot when all is well (a VM
	// without a PMU, nohz_full): not trouble, though they name them.
	kernelBenignRE = regexp.MustCompile(`NMI watchdog: (Perf NMI watchdog permanently disabled|` +
		`Enabled\. Permanently consumes one hw-PMU counter)|watchdog: Disabling watchdog on nohz_full`)
)

// hrtimerTookRE and hrtimerTookMin: "hrtimer: interrupt took N ns" under
// hrtimerTookMin is the emulator's, not the guest's. The threshold and why
// it is what it is are tests/gstest.h's (GS_HRTIMER_TOOK_MIN_NS), which
// the guest programs judge their own kernel log by: read from there, so
// that the two judges cannot disagree.
var (
	hrtimerTookRE  = regexp.MustCompile(`hrtimer: interrupt took (\d+) ns`)
	hrtimerTookMin = gstestDefine("GS_HRTIMER_TOOK_MIN_NS")
	// The module's own timer callback, logged per card when it goes:
	// its longest run, and how many of how many were slow.
	timerTookRE = regexp.MustCompile(`gpuslice: card \d+: the longest timer callback took (\d+) ns, ` +
		`(\d+) of (\d+) took (\d+) ns or more`)
	timerLoggedRE = regexp.MustCompile(`gpuslice: card \d+: the longest timer callback`)
	timerTookMax  = gstestDefine("GS_TIMER_CALLBACK_MAX_NS")
	timerSlowMax  = gstestDefine("GS_TIMER_SLOW_RUNS_MAX")
	timerSlowNS   = gstestDefine("GS_TIMER_SLOW_NS")
	timerSlowPct  = gstestDefine("GS_TIMER_SLOW_RUNS_PERCENT")
)

// judgeTimers splits the kernel's trouble lines by the module's own timer
// callbacks (tests/gstest.h): a card's callbacks ran long when one took
// GS_TIMER_CALLBACK_MAX_NS or more, or GS_TIMER_SLOW_RUNS_MAX of them,
// and GS_TIMER_SLOW_RUNS_PERCENT of its runs, took GS_TIMER_SLOW_NS or
// more (a fault slows every handover, the emulator's stalls a few). An
// "hrtimer: interrupt took" line is the module's when no card logged its
// callbacks or one ran long; otherwise it is the emulator's (excused).
// over lists the cards that ran long, and those whose line does not
// parse, trouble in any case.
func judgeTimers(errs, dmesg []string) (trouble, excused, over []string) {
	var logged bool
	for _, l := range dmesg {
		if !timerLoggedRE.MatchString(l) {
			continue
		}
		logged = true
		if timerRanLong(l) {
			over = append(over, l)
		}
	}
	for _, l := range errs {
		if hrtimerTookRE.MatchString(l) && logged && len(over) == 0 {
			excused = append(excused, l)
			continue
		}
		trouble = append(trouble, l)
	}
	return trouble, excused, over
}

// timerRanLong judges one card's line: true past either bound, or when
// the line is not the form judged (with the module's slow threshold).
func timerRanLong(l string) bool {
	m := timerTookRE.FindStringSubmatch(l)
	if m == nil {
		return true
	}
	var n [4]uint64
	for i := range n {
		v, err := strconv.ParseUint(m[i+1], 10, 64)
		if err != nil {
			return true
		}
		n[i] = v
	}
	longest, slow, runs, slowNS := n[0], n[1], n[2], n[3]
	if slowNS != timerSlowNS || slow > runs {
		return true
	}
	return longest >= timerTookMax || (slow >= timerSlowMax && slow*100 >= runs*timerSlowPct)
}

// gstestDefine is the value of tests/gstest.h's #define name (an unsigned
// integer, ULL allowed); it panics when the header has none, as a test
// that judged by a wrong figure would mislead.
func gstestDefine(name string) uint64 {
	src, err := os.ReadFile(filepath.Join("tests", "gstest.h"))
	if err != nil {
		panic(err)
	}
	re := regexp.MustCompile(`(?m)^#define ` + regexp.QuoteMeta(name) + `\s+(\d+)U?L{0,2}\b`)
	m := re.FindSubmatch(src)
	if m == nil {
		panic("tests/gstest.h defines no integer " + name)
	}
	v, err := strconv.ParseUint(string(m[1]), 10, 64)
	if err != nil {
		panic(err)
	}
	return v
}

// isKernelErr says whether a kernel message reports trouble.
func isKernelErr(msg string) bool {
	if m := hrtimerTookRE.FindStringSubmatch(msg); m != nil {
		if ns, err := strconv.ParseUint(m[1], 10, 64); err == nil && ns < hrtimerTookMin {
			return false
		}
	}
	return kernelErrRE.MatchString(msg) && !kernelBenignRE.MatchString(msg)
}

// Taint flags that mean trouble: M (machine check), B (bad page),
// D (oops), W (warning), L (soft lockup). O and E (unsigned out-of-tree
// module) are expected.
const badTaint = 1<<4 | 1<<5 | 1<<7 | 1<<9 | 1<<14

func parseLog(data []byte) *guestLog {
	g := &guestLog{progs: map[string]*program{}, taintBefore: -1, taintAfter: -1}
	var cur *program
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := ansiRE.ReplaceAllString(sc.Text(), "")
		g.lines = append(g.lines, line)
		loc := markerRE.FindStringIndex(line)
		if loc == nil {
			// Besides the markers and the programs' stray output, the
			// console carries the kernel's emergencies (and a panic's
			// replay of the whole log): those lines have a timestamp.
			if kernelTimeRE.MatchString(line) && isKernelErr(line) {
				g.kernelErr(line)
			}
			if cur != nil {
				cur.lines = append(cur.lines, line)
			} else if g.boot != "" {
				g.loose = append(g.loose, line)
			}
			continue
		}
		m := line[loc[0]:]
		kind, rest, _ := strings.Cut(m, " ")
		switch kind {
		case "GSDMESG":
			g.dmesg = append(g.dmesg, rest)
			if isKernelErr(rest) {
				g.kernelErr(rest)
			}
			continue
		case "GSINFO": // a program's remark
			if cur != nil {
				cur.lines = append(cur.lines, m)
			} else {
				g.loose = append(g.loose, m)
			}
			continue
		case "GSTEST", "GSBENCH":
			if cur == nil {
				g.outside = append(g.outside, m)
				continue
			}
			cur.lines = append(cur.lines, m)
			if kind == "GSBENCH" {
				cur.bench = append(cur.bench, rest)
				continue
			}
			_, verdict, _ := strings.Cut(rest, " ")
			switch {
			case strings.HasPrefix(verdict, "PASS"):
				cur.pass = append(cur.pass, rest)
			case strings.HasPrefix(verdict, "FAIL"):
				cur.fail = append(cur.fail, rest)
			default:
				cur.fail = append(cur.fail, "unrecognised verdict: "+m)
			}
			continue
		}
		// GSGUEST <what> <rest>
		what, arg, _ := strings.Cut(rest, " ")
		switch what {
		case "BOOT":
			g.boot = arg
		case "INSMOD":
			g.insmod = arg
		case "RMMOD":
			g.rmmod = arg
		case "DONE":
			g.done = true
		case "TAINT":
			k, v, _ := strings.Cut(arg, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				n = -1
			}
			if k == "before" {
				g.taintBefore = n
			} else {
				g.taintAfter = n
			}
		case "RUN":
			cur = g.prog(arg)
			cur.ran = true
		case "TEST":
			sm := rcRE.FindStringSubmatch(arg)
			if sm == nil {
				break
			}
			p := g.prog(sm[1])
			p.done = true
			p.rc, _ = strconv.Atoi(sm[2])
			p.secs = sm[3]
			p.lines = append(p.lines, m)
			cur = nil
		case "STRAY":
			name, s, _ := strings.Cut(arg, " ")
			g.prog(name).strays = append(g.prog(name).strays, s)
		case "RELOAD":
			name, s, _ := strings.Cut(arg, " ")
			g.prog(name).reload = s
		}
	}
	return g
}

// kernelErr notes a line of kernel trouble once (a panic replays the log).
func (g *guestLog) kernelErr(line string) {
	for _, l := range g.kernelErrs {
		if l == line {
			return
		}
	}
	g.kernelErrs = append(g.kernelErrs, line)
}

func (g *guestLog) prog(name string) *program {
	p := g.progs[name]
	if p == nil {
		p = &program{name: name}
		g.progs[name] = p
	}
	return p
}

// tail is lines for a failure message: all of them when few, else the
// last n.
func tail(lines []string, n int) string {
	head := ""
	if len(lines) > n {
		head = fmt.Sprintf("... (%d lines before these)\n", len(lines)-n)
		lines = lines[len(lines)-n:]
	}
	return head + strings.Join(lines, "\n")
}

// ends is lines for a failure message: all of them when few, else the
// first h and the last n (a program's own lines, then the panic that
// replayed the whole kernel log after them).
func ends(lines []string, h, n int) string {
	if len(lines) <= h+n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:h], "\n") + "\n" + tail(lines[h:], n)
}

func TestGuest(t *testing.T) {
	if os.Getenv("GPUSLICE_SKIP_GUEST") == "1" {
		t.Skip("GPUSLICE_SKIP_GUEST=1: the qemu guest test of gpuslice.ko does not run")
	}
	boot(t, "guest-test", nil)
}

// TestGuestWithoutBPFLSM boots the guest with an lsm= list that leaves the
// BPF LSM out (Debian's default list without bpf) and runs the guard's
// test, which the command line's gsguest.no_bpf_lsm=1 tells to expect the
// guard refused with what to change (pkg/guard), and the agent's, whose
// required guard then refuses vGPU containers (nri-plugin/agent).
func TestGuestWithoutBPFLSM(t *testing.T) {
	if os.Getenv("GPUSLICE_SKIP_GUEST") == "1" {
		t.Skip("GPUSLICE_SKIP_GUEST=1: the qemu guest test of gpuslice.ko does not run")
	}
	boot(t, "guest-nolsm", []string{"GSGUEST_APPEND=lsm=landlock,lockdown,yama,apparmor gsguest.no_bpf_lsm=1"}, "guard", "agentmodule")
}

// boot runs kmod/guest/run.sh into build/<name> with env added to its
// environment and the test programs progs (none: all), and judges the
// serial log, a subtest per program.
func boot(t *testing.T, name string, env []string, progs ...string) {
	root := testenv.Root()
	guest := filepath.Join(root, "kmod", "guest")

	// The time this test may take: go test's deadline less a margin to
	// report in, at most 15 minutes.
	budget := 15 * time.Minute
	if d, ok := t.Deadline(); ok {
		budget = min(budget, time.Until(d)-20*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()

	// Prerequisites: deps.sh is quiet when they are there, installs them
	// as root, and says what to install otherwise.
	start := time.Now()
	deps := command(ctx, filepath.Join(guest, "deps.sh"))
	if out, err := deps.CombinedOutput(); err != nil {
		t.Fatalf("the guest test's packages are missing (%v):\n%s\n"+
			"install them as root with kmod/guest/deps.sh, "+
			"or set GPUSLICE_SKIP_GUEST=1 to skip this test", err, out)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("kmod/guest/deps.sh installed the packages in %.0f s", d.Seconds())
	}

	// The shim and the simulated driver the shim test runs in the guest.
	if err := testenv.BuildC(); err != nil {
		t.Fatal(err)
	}

	// The run: kept under build/ for a look afterwards; one at a time.
	out := filepath.Join(testenv.Build(), name)
	if err := os.MkdirAll(testenv.Build(), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(out+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	run := command(ctx, filepath.Join(guest, "run.sh"), append([]string{out}, progs...)...)
	run.Env = append(os.Environ(), env...)
	if os.Getenv("GSGUEST_TIMEOUT") == "" {
		// Leave a minute of the budget for the builds before the boot.
		boot := min(300*time.Second, time.Until(deadline(ctx))-60*time.Second)
		run.Env = append(run.Env, fmt.Sprintf("GSGUEST_TIMEOUT=%d", max(int(boot.Seconds()), 30)))
	}
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	start = time.Now()
	runErr := run.Run()
	t.Logf("kmod/guest/run.sh %s: %.1f s (%v)\n%s", out, time.Since(start).Seconds(), runErr,
		strings.TrimSpace(runOut.String()))
	if b, err := os.ReadFile(filepath.Join(out, "boot.seconds")); err == nil {
		t.Logf("qemu ran %s s", strings.TrimSpace(string(b)))
	}
	logPath := filepath.Join(out, "serial.log")
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("no serial log (%v): kmod/guest/run.sh failed before the boot: %v", err, runErr)
	}
	orderData, err := os.ReadFile(filepath.Join(out, "ORDER"))
	if err != nil {
		t.Fatal(err)
	}
	order := strings.Fields(string(orderData))
	if len(order) == 0 {
		t.Fatal("run.sh wrote an empty ORDER: no test programs")
	}

	g := parseLog(data)
	// Whether the whole serial log is worth showing: the guest did not
	// get through (the programs' sections and the kernel log since insmod
	// are shown by their subtests).
	showLog := false
	t.Run("boot", func(t *testing.T) {
		if g.boot == "" {
			t.Errorf("no GSGUEST BOOT: the guest never ran /init")
		}
		if g.insmod != "OK" {
			t.Errorf("insmod /gpuslice.ko: GSGUEST INSMOD %q, want OK", g.insmod)
		}
		if g.taintBefore < 0 {
			t.Errorf("no GSGUEST TAINT before=")
		}
		if t.Failed() {
			showLog = true
		}
	})
	for _, name := range order {
		t.Run(name, func(t *testing.T) {
			p := g.prog(name)
			for _, b := range p.bench {
				t.Log("GSBENCH " + b)
			}
			for _, s := range p.strays {
				t.Logf("left a process behind (killed): %s", s)
			}
			switch {
			case !p.ran:
				t.Errorf("never started: the guest stopped before it (see the kernel subtest)")
			case !p.done:
				t.Errorf("never finished: the guest stopped while it ran")
			case p.rc == 124 || p.rc == 137 || p.rc == 143:
				t.Errorf("exited with rc=%d: killed at the guest's time limit", p.rc)
			case p.rc != 0:
				t.Errorf("exited with rc=%d", p.rc)
			}
			if p.ran && len(p.pass) == 0 {
				t.Errorf("no GSTEST ... PASS line")
			}
			for _, f := range p.fail {
				t.Errorf("GSTEST %s", f)
			}
			if p.reload != "" {
				t.Errorf("left gpuslice unloaded (the guest's reload: %s)", p.reload)
			}
			if t.Failed() {
				t.Logf("its output:\n%s", ends(p.lines, 40, 110))
			} else {
				t.Logf("%d subtests passed in %s s", len(p.pass), p.secs)
			}
		})
	}
	t.Run("rmmod", func(t *testing.T) {
		if g.rmmod != "OK" {
			t.Errorf("rmmod gpuslice: GSGUEST RMMOD %q, want OK", g.rmmod)
			if len(g.loose) > 0 {
				t.Logf("the console outside the programs:\n%s", tail(g.loose, 50))
			}
		}
	})
	t.Run("kernel", func(t *testing.T) {
		if !g.done {
			t.Errorf("no GSGUEST DONE: the guest did not finish (panic, hang or qemu timeout)")
		}
		for _, l := range g.outside {
			if strings.HasPrefix(l, "GSBENCH") {
				t.Log(l)
			} else if !strings.Contains(l, " PASS") {
				t.Errorf("outside any program: %s", l)
			}
		}
		trouble, excused, over := judgeTimers(g.kernelErrs, g.dmesg)
		if len(trouble) > 0 {
			t.Errorf("the kernel reported trouble:\n%s", strings.Join(trouble, "\n"))
		}
		for _, l := range excused {
			t.Logf("not the module's (its timer callbacks stayed under the bounds): %s", l)
		}
		if len(over) > 0 {
			t.Errorf("the module's timer callbacks ran long (one %d ns or more, or %d and %d %% of the runs %d ns or more):\n%s",
				timerTookMax, timerSlowMax, timerSlowPct, timerSlowNS, strings.Join(over, "\n"))
		}
		if g.taintAfter >= 0 && g.taintBefore >= 0 {
			if bad := (g.taintAfter &^ g.taintBefore) & badTaint; bad != 0 {
				t.Errorf("kernel tainted during the tests: %#x (before %d, after %d)",
					bad, g.taintBefore, g.taintAfter)
			}
		} else if g.done {
			t.Errorf("no GSGUEST TAINT before= and after=")
		}
		if t.Failed() && len(g.dmesg) > 0 {
			t.Logf("the kernel log since insmod:\n%s", strings.Join(g.dmesg, "\n"))
		}
		showLog = showLog || !g.done
	})
	if showLog {
		t.Logf("serial log %s:\n%s", logPath, tail(g.lines, 300))
	} else if t.Failed() {
		t.Logf("serial log: %s", logPath)
	}
}

// command runs name in a process group of its own, killed whole (qemu
// included) when ctx ends.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// TestParseLog checks the marker parser on a made-up console: noise before
// a marker, a program's verdicts and figures, a stray, a reload, the
// kernel's trouble in the console and in the dump.
func TestParseLog(t *testing.T) {
	log := "\x1bc\x1b[?7l\x1b[2JGSGUEST BOOT 6.1.0-57-amd64\r\n" +
		"GSGUEST TAINT before=0\r\n" +
		"GSGUEST INSMOD OK\r\n" +
		"GSGUEST RUN abi\r\n" +
		"GSTEST abi PASS version\r\n" +
		"GSTEST abi FAIL pad: expected EINVAL\r\n" +
		"GSBENCH abi ioctl 850 ns\r\n" +
		"GSINFO abi WARNING: not the kernel's\r\n" +
		"[    2.000001] BUG: kernel NULL pointer dereference\r\n" +
		"GSGUEST TEST abi rc=1 secs=0.07\r\n" +
		"GSGUEST STRAY abi pid=7 /tests/abi\r\n" +
		"GSGUEST RELOAD abi OK\r\n" +
		"GSTEST lost SKIP\r\n" +
		"GSGUEST RMMOD FAIL rc=1\r\n" +
		"GSGUEST TAINT after=12800\r\n" +
		"GSDMESG [    3.000000] WARNING: CPU: 0 PID: 1 at gs_card.c:10\r\n" +
		"GSGUEST DONE\r\n"
	g := parseLog([]byte(log))
	p := g.progs["abi"]
	switch {
	case g.boot != "6.1.0-57-amd64", g.insmod != "OK", g.rmmod != "FAIL rc=1", !g.done:
		t.Errorf("markers: %+v", g)
	case g.taintBefore != 0, g.taintAfter != 12800:
		t.Errorf("taint: %d %d", g.taintBefore, g.taintAfter)
	case p == nil || !p.ran || !p.done || p.rc != 1 || p.secs != "0.07":
		t.Errorf("program: %+v", p)
	case len(p.pass) != 1 || len(p.fail) != 1 || len(p.bench) != 1:
		t.Errorf("verdicts: %q %q %q", p.pass, p.fail, p.bench)
	case len(p.strays) != 1 || p.reload != "OK":
		t.Errorf("stray, reload: %q %q", p.strays, p.reload)
	case len(g.outside) != 1:
		t.Errorf("outside: %q", g.outside)
	case len(g.kernelErrs) != 2 || len(g.dmesg) != 1:
		t.Errorf("kernel: %q, dmesg %q", g.kernelErrs, g.dmesg)
	}
}

// TestKernelErrPatterns holds the kernel-log filter to each kind of
// trouble, as a console line (with its timestamp) and in the dump after
// the run (GSDMESG), and to the lines of a healthy run, which it passes.
func TestKernelErrPatterns(t *testing.T) {
	for _, c := range []struct {
		line    string
		trouble bool
	}{
		{"BUG: kernel NULL pointer dereference, address: 0000000000000008", true},
		{"WARNING: CPU: 1 PID: 77 at gs_card.c:120 gs_card_tick+0x40/0x90 [gpuslice]", true},
		{"watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [flood:120]", true},
		{"hrtimer: interrupt took 11574410 ns", true},
		{"hrtimer: interrupt took 1196229 ns", false},
		{"rcu: INFO: rcu_sched detected stalls on CPUs/tasks:", true},
		{"rcu: INFO: rcu_preempt self-detected stall on CPU", true},
		{"rcu: 1-....: (5249 ticks this GP) idle=8d4/1/0x4000000000000000", false},
		{"rcu: rcu_preempt kthread starved for 10502 jiffies! g1561 f0x0 RCU_GP_WAIT_FQS(5)", true},
		{"rcu: RCU grace-period kthread stack dump: possible stall", true},
		{"rcu_preempt self-detected stall on CPU", true},
		{"watchdog: Watchdog detected hard LOCKUP on cpu 1", true},
		{"NMI watchdog: Watchdog detected hard LOCKUP on cpu 0", true},
		{"hung_task: blocked tasks", true},
		{"rcu: INFO: rcu_preempt detected expedited stalls on CPUs/tasks: {", true},
		{"NMI watchdog: Perf NMI watchdog permanently disabled", false},
		{"NMI watchdog: Enabled. Permanently consumes one hw-PMU counter.", false},
		{"watchdog: Disabling watchdog on nohz_full cores by default", false},
		{"INFO: task kmem:201 blocked for more than 61 seconds.", true},
		{"gpuslice: ABI 1, /dev/gpuslice ready", false},
		{"gpuslice: loading out-of-tree module taints kernel.", false},
		{"reboot: Power down", false},
		{"rcu: Hierarchical RCU implementation.", false},
		{"clocksource: timekeeping watchdog on CPU1: Marking clocksource 'tsc' as unstable", false},
	} {
		for _, form := range []string{"[   59.312336] %s\r\n", "GSDMESG [   59.312336] %s\r\n"} {
			g := parseLog([]byte("GSGUEST BOOT 6.1.0-57-amd64\r\n" + fmt.Sprintf(form, c.line)))
			if got := len(g.kernelErrs) > 0; got != c.trouble {
				t.Errorf("%q (%q): kernel trouble %v, want %v", c.line, form, got, c.trouble)
			}
		}
	}
}

// judgeTimers excuses a long "hrtimer: interrupt took" only while every
// card logged its own callbacks within the bounds: a single stall of the
// emulator passes, a fault that slows every handover does not.
func TestJudgeTimers(t *testing.T) {
	took := "[   82.945140] hrtimer: interrupt took 23886327 ns"
	card := func(n int, longest, slow, runs uint64) string {
		return fmt.Sprintf("[  175.001000] gpuslice: card %d: the longest timer callback took %d ns, "+
			"%d of %d took %d ns or more", n, longest, slow, runs, timerSlowNS)
	}
	short := card(0, 48210, 0, 9120)
	stall := card(2, 6200000, 3, 41007)
	flooded := card(6, 11574410, 460, 470) // every waiter woken (cf35435)
	few := card(6, 1900000, timerSlowMax, 470)
	perVGPU := card(12, 2312687, 172, 1580) // every vGPU's queues woken at each handover (a guest run)
	scattered := card(0, 3000000, 2*timerSlowMax, 41007)
	impossible := card(0, 48210, 10, 5)
	single := card(3, timerTookMax, 1, 500)
	oldForm := "[  175.001000] gpuslice: card 1: the longest timer callback took 48210 ns"
	otherSlow := strings.Replace(short, fmt.Sprint(timerSlowNS), "2000000", 1)
	oops := "[   90.000000] BUG: kernel NULL pointer dereference"
	for _, c := range []struct {
		name                   string
		errs, dmesg            []string
		trouble, excused, over int
	}{
		{"callbacks short: the emulator's", []string{took}, []string{took, short}, 0, 1, 0},
		{"a stall or two: the emulator's", []string{took}, []string{took, short, stall}, 0, 1, 0},
		{"every handover slow: the module's", []string{took}, []string{took, short, flooded}, 1, 0, 1},
		{"slow runs at the bound", nil, []string{few}, 0, 0, 1},
		{"every queue woken at each handover", nil, []string{perVGPU}, 0, 0, 1},
		{"slow runs scattered over many: the emulator's", []string{took}, []string{took, scattered}, 0, 1, 0},
		{"more slow runs than runs", nil, []string{impossible}, 0, 0, 1},
		{"one run at the bound", nil, []string{single}, 0, 0, 1},
		{"no card logged: the module's", []string{took}, []string{took}, 1, 0, 0},
		{"a line of another form is not judged short", []string{took}, []string{took, oldForm}, 1, 0, 1},
		{"another slow threshold is not judged short", nil, []string{otherSlow}, 0, 0, 1},
		{"other trouble stays", []string{took, oops}, []string{took, short, oops}, 1, 1, 0},
		{"a flooded card alone", nil, []string{flooded}, 0, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			trouble, excused, over := judgeTimers(c.errs, c.dmesg)
			if len(trouble) != c.trouble || len(excused) != c.excused || len(over) != c.over {
				t.Errorf("trouble %q, excused %q, over %q", trouble, excused, over)
			}
		})
	}
}
