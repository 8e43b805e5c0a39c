package ledger

// The charging processes of the tests are this test binary, re-executed in
// child mode: a child reads one command a line on stdin, runs it on its
// charging handle (a charger, as the shim holds) and answers one line,
// "ok [values]" or "err ERRNO".

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const childEnv = "GPUSLICE_LEDGER_TEST_CHILD"

// replyTimeout is generous: the tests run on loaded 2-core CI machines.
const replyTimeout = 3 * time.Minute

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

func childMain(in io.Reader, out io.Writer) int {
	var ch *charger
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "exit" {
			return 0
		}
		reply, err := childDo(&ch, f)
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				reply = fmt.Sprintf("err %d", int(errno))
			} else {
				reply = "err " + strings.ReplaceAll(err.Error(), "\n", " ")
			}
		}
		fmt.Fprintln(out, reply)
	}
	return 0
}

func childDo(chp **charger, f []string) (string, error) {
	n := make([]uint64, len(f))
	for i := 1; i < len(f); i++ {
		n[i], _ = strconv.ParseUint(f[i], 10, 64)
	}
	ch := *chp
	if ch == nil && f[0] != "open" {
		return "", errors.New("not open")
	}
	switch f[0] {
	case "open":
		c, err := openCharger(f[1], n[2])
		if err != nil {
			return "", err
		}
		*chp = c
		return "ok", nil
	case "charge":
		return "ok", ch.charge(n[1])
	case "uncharge":
		ch.uncharge(n[1])
		return "ok", nil
	case "usage":
		used, capBytes, err := ch.usage()
		return fmt.Sprintf("ok %d %d", used, capBytes), err
	case "state":
		st, err := ch.state()
		return fmt.Sprintf("ok %d %d %d", st.used, st.sum, st.inUse), err
	case "lockhang":
		return "", ch.lockAndHang(n[1]) // returns only on failure
	case "storm":
		bad, err := ch.storm(int(n[1]), n[2], n[3], n[4])
		return fmt.Sprintf("ok %d", bad), err
	case "fork":
		status, err := ch.fork(n[1], n[2], n[3] != 0)
		return fmt.Sprintf("ok %d", status), err
	case "forkstorm":
		bad, err := ch.forkStorm(int(n[1]), int(n[2]))
		return fmt.Sprintf("ok %d", bad), err
	case "close":
		ch.close()
		*chp = nil
		return "ok", nil
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}

// child is a charging process seen from the test.
type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	dead  bool
}

// spawn starts a child process and opens path in it (charging mode).
func spawn(t *testing.T, path string, capBytes uint64) *child {
	c := start(t)
	c.ok("open %s %d", path, capBytes)
	return c
}

func start(t *testing.T) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Our own pipe, not StdoutPipe: Wait may then run before EOF.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	c := &child{t: t, cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(c.kill)
	return c
}

func (c *child) pid() int32 { return int32(c.cmd.Process.Pid) }

// send writes a command without waiting for the answer.
func (c *child) send(format string, args ...any) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		c.t.Fatalf("child %d: send: %v", c.pid(), err)
	}
}

// recv waits for the next answer line.
func (c *child) recv() string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("child %d: exited without answering", c.pid())
		}
		return line
	case <-time.After(replyTimeout):
		c.t.Fatalf("child %d: no answer in %v", c.pid(), replyTimeout)
	}
	return ""
}

// do sends a command and returns its answer.
func (c *child) do(format string, args ...any) string {
	c.t.Helper()
	c.send(format, args...)
	return c.recv()
}

// ok runs a command that must succeed and returns the answer's values.
func (c *child) ok(format string, args ...any) []uint64 {
	c.t.Helper()
	cmd := fmt.Sprintf(format, args...)
	return parseOK(c.t, cmd, c.do("%s", cmd))
}

func parseOK(t *testing.T, cmd, reply string) []uint64 {
	t.Helper()
	f := strings.Fields(reply)
	if len(f) == 0 || f[0] != "ok" {
		t.Fatalf("%q: got %q, want ok", cmd, reply)
	}
	vals := make([]uint64, len(f)-1)
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%q: bad answer %q", cmd, reply)
		}
		vals[i] = v
	}
	return vals
}

// charge returns nil or the errno of a charge.
func (c *child) charge(n uint64) error {
	c.t.Helper()
	return replyErr(c.t, c.do("charge %d", n))
}

func replyErr(t *testing.T, reply string) error {
	t.Helper()
	if reply == "ok" {
		return nil
	}
	var e int
	if _, err := fmt.Sscanf(reply, "err %d", &e); err != nil {
		t.Fatalf("unexpected answer %q", reply)
	}
	return syscall.Errno(e)
}

// kill SIGKILLs the child and reaps it.
func (c *child) kill() {
	if c.dead {
		return
	}
	c.dead = true
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	c.in.Close()
}
