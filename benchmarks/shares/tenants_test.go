package shares

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

func TestMain(m *testing.M) { testenv.MainWithC(m) }

// tenant is one container of the card and its one process, gstest tenant:
// kernels of kernelUS microseconds, depth of them in flight over streams
// streams; with gapUS
// set, one kernel at a time, gapUS apart, latencies recorded (its
// "gap=" mode); idle launches once and keeps its context.
type tenant struct {
	key      string
	quota    string
	high     bool
	kernelUS int
	depth    int
	streams  int // 0: one
	gapUS    int
	idle     bool
	ivMS     int // >0: its engine time sampled every ivMS (iv_busy_ns)
}

// outcome is what a tenant printed (its key=value lines).
type outcome struct {
	tenant
	kv map[string]string
}

func (o outcome) num(tb testing.TB, key string) float64 {
	tb.Helper()
	v, ok := o.kv[key]
	if !ok {
		tb.Fatalf("tenant %s printed no %s=: %v", o.key, key, o.kv)
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		tb.Fatalf("tenant %s: %s=%s: %v", o.key, key, v, err)
	}
	return n
}

// card is one simulated card (one engine) whose containers share one
// schedule file under policy, as in interposer/gate_file_test.go; an
// empty policy leaves them ungated.
type card struct {
	dir    string
	policy string
}

func newCard(tb testing.TB, policy string) *card {
	return &card{dir: tb.TempDir(), policy: policy}
}

// environ is the environment of t's process: ours without anything of
// gpuslice, the simulator or the loader, then the card's and t's.
func (c *card) environ(t tenant) []string {
	env := testenv.CleanEnviron()
	prio := "0"
	if t.high {
		prio = "1"
	}
	env = append(env,
		"LD_LIBRARY_PATH="+testenv.Lib(),
		"LD_PRELOAD="+testenv.Shim(),
		"SIMCUDA_STATE="+filepath.Join(c.dir, "sim.state"),
		"SIMCUDA_MEM_MIB=8192",
		"GPU_IDX=0",
		"GPU_CONTAINER_MEM=1024",
		"GPUSLICE_ENFORCE=file",
		"GPUSLICE_CONTEXT_MIB=4",
		"GPUSLICE_LOG_LEVEL=info",
		"GPUSLICE_SCHED_DIR="+filepath.Join(c.dir, "sched"),
		"GPUSLICE_VGPU="+t.key,
		"GPUSLICE_LEDGER_DIR="+filepath.Join(c.dir, "ledger-"+t.key),
		"GPU_CONTAINER_QUOTA_PERCENT="+t.quota,
		"GPU_CONTAINER_PRIORITY="+prio,
	)
	if c.policy != "" {
		env = append(env, "GPU_POLICY="+c.policy)
	}
	// The engine the run measures: SIMCUDA_PREEMPT_US=0 in the
	// benchmark's environment gives every tenant simcuda's engine of
	// whole kernels (its default preempts at 1 ms, as a T4 does).
	if us, ok := os.LookupEnv("SIMCUDA_PREEMPT_US"); ok {
		env = append(env, "SIMCUDA_PREEMPT_US="+us)
	}
	return env
}

// proc is a running tenant.
type proc struct {
	t      tenant
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	done   chan struct{}
	mu     sync.Mutex
	stdout []string
	stderr strings.Builder
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (c *card) start(tb testing.TB, seconds int, t tenant) *proc {
	tb.Helper()
	args := []string{"tenant", strconv.Itoa(seconds), strconv.Itoa(t.kernelUS), strconv.Itoa(t.depth),
		strconv.Itoa(max(t.streams, 1))}
	if t.idle {
		args[1] = "0"
		args = append(args, "hold")
	} else {
		args = append(args, "go")
	}
	if t.gapUS > 0 {
		args = append(args, fmt.Sprintf("gap=%d", t.gapUS))
	}
	if t.ivMS > 0 {
		args = append(args, fmt.Sprintf("iv=%d", t.ivMS))
	}
	p := &proc{t: t, lines: make(chan string, 64), done: make(chan struct{})}
	p.cmd = exec.CommandContext(context.Background(), testenv.Bin("gstest"), args...)
	p.cmd.Env = c.environ(t)
	p.cmd.Dir = c.dir
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("gstest %v: %v", args, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout = append(p.stdout, sc.Text())
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_ = p.cmd.Wait()
		close(p.lines)
		close(p.done)
	}()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("tenant %s: %v\n--- stdout\n%s\n--- stderr\n%s",
		p.t.key, p.cmd.Args, strings.Join(p.stdout, "\n"), p.stderr.String())
}

// await waits for the line want on the tenant's stdout.
func (p *proc) await(tb testing.TB, want string) {
	tb.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				tb.Fatalf("exited before printing %q\n%s", want, p)
			}
			if line == want {
				return
			}
		case <-deadline:
			tb.Fatalf("no %q within 30 s\n%s", want, p)
		}
	}
}

// finish closes stdin, waits for the exit and checks it: success, and
// gated by the schedule file when the card has a policy.
func (p *proc) finish(tb testing.TB, gated bool) outcome {
	tb.Helper()
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		tb.Fatalf("did not exit within 90 s\n%s", p)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		tb.Fatalf("exit %d\n%s", code, p)
	}
	p.mu.Lock()
	stderr := p.stderr.String()
	o := outcome{tenant: p.t, kv: map[string]string{}}
	for _, line := range p.stdout {
		if k, v, ok := strings.Cut(line, "="); ok {
			o.kv[k] = v
		}
	}
	p.mu.Unlock()
	if gated && !strings.Contains(stderr, "gated by the schedule file") {
		tb.Fatalf("not gated by the schedule file\n%s", p)
	}
	return o
}

// run runs the tenants on the card for seconds, started together (the
// idle ones first: they launch once and hold their contexts until the
// others are done), and returns what each printed, in order.
func (c *card) run(tb testing.TB, seconds int, ts ...tenant) []outcome {
	tb.Helper()
	ps := make([]*proc, len(ts))
	for i, t := range ts {
		if t.idle {
			ps[i] = c.start(tb, seconds, t)
			ps[i].await(tb, "held")
		}
	}
	for i, t := range ts {
		if !t.idle {
			ps[i] = c.start(tb, seconds, t)
		}
	}
	for i, t := range ts {
		if !t.idle {
			ps[i].await(tb, "ready")
		}
	}
	for i, t := range ts {
		if !t.idle {
			if _, err := ps[i].stdin.Write([]byte("go\n")); err != nil {
				tb.Fatalf("%v\n%s", err, ps[i])
			}
		}
	}
	out := make([]outcome, len(ts))
	for i, t := range ts {
		if !t.idle {
			out[i] = ps[i].finish(tb, c.policy != "")
		}
	}
	for i, t := range ts {
		if t.idle {
			out[i] = ps[i].finish(tb, c.policy != "")
		}
	}
	return out
}
