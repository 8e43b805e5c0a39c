// End-to-end tests of libgpuslice.so: the C test programs of tests/ run
// under LD_PRELOAD against the simulated driver, and these tests check
// their exit status and what they print, the shared ledger (through
// pkg/ledger) and the simulated device.
//
// Every test has a simulated machine of its own (SIMCUDA_STATE) and a
// container of its own (GPUSLICE_LEDGER_DIR), with physical memory well
// above the caps, so every refusal seen here comes from the shim; the
// pass-through tests show that the same programs succeed without a cap.
package interposer_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/ledger"
)

const mib = uint64(1) << 20

// Where the build puts things, set by TestMain.
var (
	libDir string
	gstest string
	direct string
	shim   string
)

func TestMain(m *testing.M) {
	// `make -s -C <root> c`, serialised with the other packages' builds
	// (go test runs packages in parallel), so `go test ./interposer/`
	// works alone.
	if err := testenv.BuildC(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	libDir = testenv.Lib()
	gstest = testenv.Bin("gstest")
	direct = testenv.Bin("gsdirect")
	shim = testenv.Shim()
	os.Exit(m.Run())
}

// machine is one simulated machine and one container on it: the
// environment its processes get.
type machine struct {
	t   *testing.T
	dir string
	env map[string]string
}

// newMachine returns a machine with one 8 GiB device and a container of
// card 0 capped at 1024 MiB, the shim preloaded. kv overrides the
// environment in pairs; an empty value unsets the variable.
func newMachine(t *testing.T, kv ...string) *machine {
	t.Helper()
	dir := t.TempDir()
	m := &machine{t: t, dir: dir, env: map[string]string{
		"SIMCUDA_STATE":       filepath.Join(dir, "sim.state"),
		"SIMCUDA_MEM_MIB":     "8192",
		"GPUSLICE_LEDGER_DIR": filepath.Join(dir, "ledger"),
		"LD_LIBRARY_PATH":     libDir,
		"LD_PRELOAD":          shim,
		"GPU_IDX":             "0",
		"GPU_CONTAINER_MEM":   "1024",
	}}
	m.set(kv...)
	return m
}

// set changes the environment in pairs; an empty value unsets.
func (m *machine) set(kv ...string) *machine {
	if len(kv)%2 != 0 {
		m.t.Fatalf("set: odd number of arguments %q", kv)
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(m.env, kv[i])
		} else {
			m.env[kv[i]] = kv[i+1]
		}
	}
	return m
}

// with returns a copy of m (same machine and container) with kv applied.
func (m *machine) with(kv ...string) *machine {
	c := &machine{t: m.t, dir: m.dir, env: map[string]string{}}
	for k, v := range m.env {
		c.env[k] = v
	}
	return c.set(kv...)
}

// unshimmed is the same machine seen by a process without the shim.
func (m *machine) unshimmed() *machine { return m.with("LD_PRELOAD", "") }

// ledgerPath is the ledger file of the container's card idx.
func (m *machine) ledgerPath(idx int) string {
	return filepath.Join(m.env["GPUSLICE_LEDGER_DIR"], fmt.Sprintf("card%d.ledger", idx))
}

// environ is the process environment: ours, with nothing of gpuslice, the
// simulator or the loader inherited from the caller.
func (m *machine) environ() []string {
	env := testenv.CleanEnviron()
	for k, v := range m.env {
		env = append(env, k+"="+v)
	}
	return env
}

// result is what a finished program left.
type result struct {
	args   []string
	code   int
	stdout string
	stderr string
}

// kv parses the key=value lines of stdout; a repeated key keeps the last.
func (r result) kv() map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(r.stdout, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out
}

// num is the value of key as a number; it fails the test if missing.
func (r result) num(t *testing.T, key string) uint64 {
	t.Helper()
	v, ok := r.kv()[key]
	require.True(t, ok, "no %s= in the output of %v:\n%s", key, r.args, r)
	n, err := strconv.ParseUint(v, 10, 64)
	require.NoError(t, err, "%s=%s", key, v)
	return n
}

// lines returns the lines of stderr that contain all of subs.
func (r result) lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(r.stderr, "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// run runs a program (gstest by default: the first argument is then its
// subcommand; an absolute path runs that program) to completion.
func (m *machine) run(args ...string) result {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := m.command(ctx, args)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		r.code = exit.ExitCode()
	default:
		m.t.Fatalf("%v: %v\n%s", args, err, r)
	}
	return r
}

// ok runs a program that must succeed.
func (m *machine) ok(args ...string) result {
	m.t.Helper()
	r := m.run(args...)
	require.Equal(m.t, 0, r.code, "%v\n%s", args, r)
	return r
}

func (m *machine) command(ctx context.Context, args []string) *exec.Cmd {
	prog, rest := gstest, args
	if len(args) > 0 && filepath.IsAbs(args[0]) {
		prog, rest = args[0], args[1:]
	}
	cmd := exec.CommandContext(ctx, prog, rest...)
	cmd.Env = m.environ()
	cmd.Dir = m.dir
	return cmd
}

// proc is a program running in the background.
type proc struct {
	t     *testing.T
	args  []string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string

	mu     sync.Mutex
	stdout []string
	stderr bytes.Buffer

	done chan struct{}
	code int
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// start starts a program; its stdin stays open until stop (the programs
// that linger wait for it to close). The test kills it if still running.
func (m *machine) start(args ...string) *proc {
	m.t.Helper()
	p := &proc{t: m.t, args: args, lines: make(chan string, 4096), done: make(chan struct{})}
	p.cmd = m.command(context.Background(), args)
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(m.t, err)
	out, err := p.cmd.StdoutPipe()
	require.NoError(m.t, err)
	require.NoError(m.t, p.cmd.Start(), "%v", args)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout = append(p.stdout, sc.Text())
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default: // nobody is waiting for lines any more
			}
		}
		err := p.cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			p.code = exit.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(p.lines)
		close(p.done)
	}()
	m.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// await waits for a line equal to want on the program's stdout.
func (p *proc) await(want string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				p.t.Fatalf("%v exited (%d) before printing %q\n%s", p.args, p.code, want, p.result())
			}
			if line == want {
				return
			}
		case <-deadline:
			p.t.Fatalf("%v: no %q within %v\n%s%s", p.args, want, timeout, p.stacks(), p.result())
		}
	}
}

// stop closes stdin and waits for the program to exit.
func (p *proc) stop(timeout time.Duration) result {
	p.t.Helper()
	_ = p.stdin.Close()
	return p.wait(timeout)
}

// wait waits for the program to exit on its own.
func (p *proc) wait(timeout time.Duration) result {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%v did not exit within %v\n%s", p.args, timeout, p.result())
	}
	return p.result()
}

// kill sends SIGKILL and waits for the program to be gone.
func (p *proc) kill() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Kill())
	<-p.done
}

func (p *proc) pid() int32 { return int32(p.cmd.Process.Pid) }

func (p *proc) result() result {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := strings.Join(p.stdout, "\n")
	if out != "" {
		out += "\n"
	}
	return result{args: p.args, code: p.code, stdout: out, stderr: p.stderr.String()}
}

// openLedger opens a container's ledger file as an observer, waiting for
// its first process to create it.
func openLedger(t *testing.T, path string) *ledger.Ledger {
	t.Helper()
	var l *ledger.Ledger
	require.Eventually(t, func() bool {
		var err error
		l, err = ledger.Open(path)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "ledger %s never appeared", path)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// usage is the ledger's total and cap.
func usage(t *testing.T, l *ledger.Ledger) (used, capBytes uint64) {
	t.Helper()
	used, capBytes, err := l.Usage()
	require.NoError(t, err)
	return used, capBytes
}

// rangeRE matches an allowed range in a configuration message: 1-16, 0..255.
var rangeRE = regexp.MustCompile(`\d+ ?(-|\.\.) ?\d+`)

// stacks is every thread's stack of a program that stopped answering, by
// gdb where the machine has it: a hang reported with where it hangs.
func (p *proc) stacks() string {
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, gdb, "-p", strconv.Itoa(int(p.pid())), "-batch",
		"-ex", "thread apply all bt").CombinedOutput()
	return "--- threads (gdb)\n" + string(out) + "\n"
}
