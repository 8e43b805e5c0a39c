package kube

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// shared is the package's cluster, which Main and Shared manage.
var shared struct {
	mu      sync.Mutex
	main    bool // Main runs the tests
	opts    Options
	tried   bool
	cluster *Cluster
	err     error
	tb      *lifetime
}

// Main runs the package's tests (m.Run) and then tears down the cluster
// the first Shared call started, if any, and checks that nothing is left
// behind. It returns the exit code for os.Exit: m.Run's, or 1 when the
// teardown failed.
//
//	func TestMain(m *testing.M) { os.Exit(kube.Main(m, kube.Options{})) }
func Main(m *testing.M, opts Options) int {
	shared.mu.Lock()
	shared.main, shared.opts = true, opts
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.tb == nil {
		return code
	}
	shared.tb.end()
	if shared.tb.Failed() {
		fmt.Fprintln(os.Stderr, "kube: the shared cluster's teardown failed (above)")
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Shared is the package's cluster: the first call starts it (with the
// Options given to Main), later calls return it; Main tears it down after
// the last test. A cluster that did not start fails every test that asks
// for it, the first with the components' logs. Tests that share a
// cluster leave it as they found it: Namespace gives each its own
// namespace, emptied when it ends.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	Require(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		t.Fatal("kube.Shared needs the package's TestMain to run the tests through kube.Main")
	}
	if !shared.tried {
		shared.tried = true
		shared.tb = &lifetime{name: "kube.Shared (first asked by " + t.Name() + ")"}
		shared.cluster, shared.err = shared.tb.start(shared.opts)
		if shared.err != nil {
			t.Fatal(shared.err)
		}
	}
	if shared.err != nil {
		t.Fatalf("the shared cluster did not start (see the first test that asked for it): %.300v", shared.err)
	}
	return shared.cluster
}

// lifetime is the testing.TB a shared cluster and its containerd (whose
// harness wants one) live under: from the first Shared call to the end of
// Main, longer than any test. Fatal during the start is an error of the
// start; afterwards (a StartPlugin of internal/e2e whose binary does not
// start) it panics, failing the test binary with the message.
type lifetime struct {
	testing.TB // nil: the methods below are all the harnesses call
	name       string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// fatal is the panic value of a Fatal, recovered by start.
type fatal struct{ msg string }

// start starts the cluster under the lifetime, turning a Fatal into an
// error; a failed start is torn down at once.
func (l *lifetime) start(opts Options) (c *Cluster, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				l.end()
				panic(r)
			}
			err = fmt.Errorf("%s", f.msg)
		}
		if err != nil {
			l.end()
		}
	}()
	return start(l, opts)
}

// end runs the cleanups, last registered first.
func (l *lifetime) end() {
	for {
		l.mu.Lock()
		if len(l.cleanups) == 0 {
			l.mu.Unlock()
			return
		}
		f := l.cleanups[len(l.cleanups)-1]
		l.cleanups = l.cleanups[:len(l.cleanups)-1]
		l.mu.Unlock()
		f()
	}
}

func (l *lifetime) Helper()      {}
func (l *lifetime) Name() string { return l.name }

func (l *lifetime) Cleanup(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

func (l *lifetime) TempDir() string {
	d, err := os.MkdirTemp("", "gpuslice-kube-")
	if err != nil {
		l.Fatal(err)
	}
	l.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func (l *lifetime) Log(args ...any)                 { l.Logf("%s", fmt.Sprint(args...)) }
func (l *lifetime) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (l *lifetime) Error(args ...any) { l.Errorf("%s", fmt.Sprint(args...)) }
func (l *lifetime) Errorf(format string, args ...any) {
	l.Logf(format, args...)
	l.mu.Lock()
	l.failed = true
	l.mu.Unlock()
}

func (l *lifetime) Failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

func (l *lifetime) Fatal(args ...any) { l.Fatalf("%s", fmt.Sprint(args...)) }
func (l *lifetime) Fatalf(format string, args ...any) {
	panic(fatal{msg: fmt.Sprintf(format, args...)})
}
func (l *lifetime) FailNow() { l.Fatal("FailNow") }

func (l *lifetime) Skip(args ...any) { l.Fatalf("skipped: %s", fmt.Sprint(args...)) }
func (l *lifetime) Skipf(format string, args ...any) {
	l.Fatalf("skipped: "+format, args...)
}

func (l *lifetime) Context() context.Context { return context.Background() }
