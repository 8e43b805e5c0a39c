package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/pkg/metrics"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// socketDir is a short temporary directory: a unix socket's path must fit
// in 108 bytes, which t.TempDir's may not.
func socketDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "gpuslice")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve runs h as the agent on a new unix socket and returns its path.
func serve(t *testing.T, h http.Handler) string {
	path := filepath.Join(socketDir(t), "agent.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return path
}

// agent answers GET /v1/status with body (JSON of v unless it is a
// string) and status code.
func agent(t *testing.T, code int, v any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/status" {
			http.Error(w, "not found: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		w.WriteHeader(code)
		if s, ok := v.(string); ok {
			fmt.Fprint(w, s)
			return
		}
		if err := json.NewEncoder(w).Encode(v); err != nil {
			t.Error(err)
		}
	})
}

func TestFetch(t *testing.T) {
	for name, node := range nodes() {
		sock := serve(t, agent(t, http.StatusOK, node))
		got, err := fetch(context.Background(), sock, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, node) {
			t.Errorf("%s: fetched %+v, want %+v", name, *got, *node)
		}
	}
}

// TestFetchAgentHandler: the agent's own status handler (pkg/metrics)
// and this command agree on the answer, and on the one before the first
// sample.
func TestFetchAgentHandler(t *testing.T) {
	var snap atomic.Pointer[status.Node]
	sock := serve(t, metrics.StatusHandler(snap.Load))
	_, err := fetch(context.Background(), sock, time.Second)
	if err == nil || !strings.Contains(err.Error(), "answered 503 Service Unavailable: ") {
		t.Errorf("before the first sample: %v, want the 503 and its reason", err)
	}
	for name, node := range nodes() {
		snap.Store(node)
		got, err := fetch(context.Background(), sock, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, node) {
			t.Errorf("%s: fetched %+v, want %+v", name, *got, *node)
		}
	}
}

// TestFetchErrors: each way of not getting a status says which socket and
// what to check.
func TestFetchErrors(t *testing.T) {
	dir := socketDir(t)

	// A socket file nobody listens on (the agent was killed).
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()

	// A regular file where the socket should be.
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// An agent that does not answer in time.
	hang := make(chan struct{})
	slow := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	t.Cleanup(func() { close(hang) })

	for _, c := range []struct {
		name, socket string
		want         []string
	}{
		{"no socket", filepath.Join(dir, "missing.sock"),
			[]string{"no agent socket at " + filepath.Join(dir, "missing.sock"), "systemctl status gpuslice-nri", "--socket"}},
		{"nobody listening", stale,
			[]string{"nobody is listening on the agent socket " + stale, "systemctl status gpuslice-nri", "--socket"}},
		{"not a socket", plain, []string{plain + " is not a socket", "--socket"}},
		{"not answering", slow, []string{"the agent at " + slow + " did not answer within 200ms", "--timeout"}},
		{"not found", serve(t, http.NotFoundHandler()), []string{"answered 404 Not Found: 404 page not found"}},
		{"server error", serve(t, agent(t, http.StatusInternalServerError, "collector failed\nsecond line\n")),
			[]string{"answered 500 Internal Server Error: collector failed"}},
		{"empty error", serve(t, agent(t, http.StatusServiceUnavailable, "")),
			[]string{"answered 503 Service Unavailable: (empty answer)"}},
		{"not a status", serve(t, agent(t, http.StatusOK, "<html>hello</html>")),
			[]string{"sent an answer that is not a node status", "same version"}},
		{"wrong shape", serve(t, agent(t, http.StatusOK, `{"cards": {"index": 0}}`)),
			[]string{"not a node status"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			node, err := fetch(context.Background(), c.socket, 200*time.Millisecond)
			if err == nil {
				t.Fatalf("fetch gave %+v, want an error", node)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestUnreachablePermission: EACCES (a non-root user on a root-only
// socket) says to run as root. Tests run as root in CI, where the kernel
// would not refuse, so the error is built as net.Dial returns it.
func TestUnreachablePermission(t *testing.T) {
	err := &net.OpError{Op: "dial", Net: "unix",
		Err: os.NewSyscallError("connect", syscall.EACCES)}
	msg := unreachable("/run/gpuslice/agent.sock", time.Second, err).Error()
	for _, w := range []string{"permission denied on the agent socket /run/gpuslice/agent.sock", "run as root"} {
		if !strings.Contains(msg, w) {
			t.Errorf("%q lacks %q", msg, w)
		}
	}
	other := unreachable("/s", time.Second, fmt.Errorf("connection reset"))
	if !strings.Contains(other.Error(), "talking to the agent at /s: connection reset") {
		t.Errorf("unexpected %q", other)
	}
}

func TestFirstLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "(empty answer)",
		"  one  \ntwo":           "one",
		"\nsecond":               "(empty answer)",
		strings.Repeat("x", 300): strings.Repeat("x", 200) + "...",
	} {
		if got := firstLine([]byte(in)); got != want {
			t.Errorf("firstLine(%.20q) = %.30q, want %.30q", in, got, want)
		}
	}
}
