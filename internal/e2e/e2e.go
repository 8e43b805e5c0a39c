// Package e2e runs a real container runtime for the node agent's
// end-to-end tests: containerd v2.4.2 with NRI enabled, runc v1.5.3 and
// crictl v1.37.0, built once per machine by nri-plugin/e2e/tools.sh into a
// cache outside the clone, and a busybox image built by
// nri-plugin/e2e/image.sh and imported locally (no registry, no CNI: pods
// use the host's network).
//
// Start gives a test its own containerd (own root, state, sockets, NRI
// plugin directories, cgroup parent and logs) and tears it all down when
// the test ends. The test drives it the way the kubelet does, through CRI:
// RunPod, CreateContainer, StartContainer, Exec, RemovePod, or Crictl for
// anything else. NRI is only called for containers created through CRI;
// `ctr run` would bypass it. An NRI plugin under test either runs as an
// external process (StartPlugin, then (*Plugin).WaitReady) or is
// pre-registered (Options.PreRegistered: containerd starts it from
// PluginDir at start-up; then WaitPluginReady).
//
// The tests need root. They skip only when GPUSLICE_SKIP_E2E=1 is set;
// without root and without that variable they fail, saying so.
//
// Why each step is as it is: the project's shared/spec/test-infrastructure.md
// ("Real containerd + NRI + runc"): restrict_oom_score_adj (no
// CAP_SYS_RESOURCE on the CI machines), the snapshotters disabled, the
// pinned sandbox image, the teardown order, a fresh log directory per pod.
//
// containerd's state (its sockets, runc's state) is under
// /run/gpuslice-e2e/<id>, the rest under the test's t.TempDir(), the pods'
// cgroups under /gpuslice-e2e-<id>; the shims' sockets are in
// /run/containerd/s whatever the config says, and the teardown removes
// this Env's from there. A test process that dies without its teardown (a
// go test timeout) leaves an owner file behind, and the next Start cleans
// up after it.
package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// SkipVar is the environment variable that, set to 1, skips the tests that
// need a real containerd. Nothing else skips them.
const SkipVar = "GPUSLICE_SKIP_E2E"

// Image is the reference of the busybox image every Env imports: /bin/sh
// and the busybox applets, and /pause as its default command. It is also
// containerd's (pinned) sandbox image.
const Image = "localhost/gpuslice/e2e-busybox:1"

// SocketEnv is set, in the environment of plugins started by StartPlugin,
// to the path of the env's NRI socket.
const SocketEnv = "GPUSLICE_E2E_NRI_SOCKET"

// Waits, generous for a loaded 2-core machine: they bound polling, they
// are never slept through.
const (
	toolsTimeout  = 20 * time.Minute // a cold tools.sh takes ~3 minutes
	startTimeout  = 90 * time.Second // containerd up, CRI and NRI ready
	crictlTimeout = 3 * time.Minute  // one crictl command
	readyTimeout  = 60 * time.Second // a plugin registered and synchronized
	stopTimeout   = 30 * time.Second // a process's grace after SIGTERM
)

// Options adjusts an Env. The zero value is a plain containerd with NRI
// enabled and no plugin.
type Options struct {
	// PreRegistered are plugins containerd itself starts from PluginDir when
	// it starts: file name ("NN-name", for example "10-gpuslice") to the
	// binary, which is copied there. Such a plugin gets its connection, name
	// and index from the environment containerd gives it.
	PreRegistered map[string]string
	// PluginConfigs are files written into containerd's NRI
	// plugin_config_path ("NN-name.conf" or "name.conf") to their contents.
	PluginConfigs map[string]string
	// NRIRequestTimeout is containerd's plugin_request_timeout: how long it
	// waits for a plugin's answer before giving up on it. 0 means 30 s
	// (NRI's own default, 2 s, is short for a loaded 2-core machine).
	NRIRequestTimeout time.Duration
	// NRIRegistrationTimeout is containerd's plugin_registration_timeout.
	// 0 means 30 s.
	NRIRegistrationTimeout time.Duration
	// RuntimeConfig are TOML lines added to the
	// [plugins."io.containerd.cri.v1.runtime"] table (for example
	// `enable_cdi = true`), which cannot be reopened in ExtraConfig.
	RuntimeConfig string
	// ExtraConfig is TOML appended to containerd's config; it may add
	// tables the generated config does not have.
	ExtraConfig string
	// LogLevel is containerd's log level; "" means "info", which is where
	// NRI logs plugin registrations.
	LogLevel string
}

// Env is one running containerd and what it needs. Its methods may be
// called from several goroutines, but StartPlugin and Start fail the test
// and so belong to the test's goroutine.
type Env struct {
	t    testing.TB
	id   string
	dir  string // per-test directory (t.TempDir): config, logs, root
	root string // containerd's root
	// state is containerd's state directory, under /run/gpuslice-e2e and
	// unique to the Env: sockets live there (short paths).
	state     string
	bin       string
	config    string
	crictlCfg string
	logPath   string
	cgroup    string // the pods' cgroup parent, "/gpuslice-e2e-<id>"

	cmd     *exec.Cmd
	exited  chan struct{} // closed when containerd has exited
	waitErr error

	mu      sync.Mutex
	seq     int
	pods    map[string]string // pod ID -> its config file
	plugins []*Plugin
}

// Require skips the test when GPUSLICE_SKIP_E2E=1 and fails it when it is
// not run as root. Start calls it.
func Require(t testing.TB) {
	t.Helper()
	if os.Getenv(SkipVar) == "1" {
		t.Skip(SkipVar + "=1: the end-to-end tests with a real containerd do not run")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the end-to-end tests run a real containerd and runc and need root; " +
			"run go test as root, or set " + SkipVar + "=1 to skip them")
	}
}

// Start starts a containerd for the test, with the busybox image imported,
// and registers its teardown with t.Cleanup. It fails the test (with
// containerd's log) when anything does not come up.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	Require(t)
	began := time.Now()
	bin, err := Tools()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Logf("e2e: building the tools took %.0f s (once per machine)", d.Seconds())
	}

	e := newEnv(t, bin)
	if err := e.makeDirs(); err != nil {
		t.Fatal(err)
	}
	// From here on everything is undone, however far Start gets; and the
	// Envs of test processes that died without their teardown (a go test
	// timeout) go now.
	t.Cleanup(e.teardown)
	sweepStale(t.Logf)
	if err := e.writeOwner(); err != nil {
		t.Fatal(err)
	}
	if err := e.writeFiles(opts); err != nil {
		t.Fatal(err)
	}
	// The image, built while nothing else runs yet (well under a second).
	image := filepath.Join(e.dir, "image.tar")
	if err := buildImage(image); err != nil {
		t.Fatal(err)
	}
	if err := e.startContainerd(); err != nil {
		t.Fatal(err)
	}
	if err := e.waitUp(); err != nil {
		t.Fatal(err)
	}
	if err := e.ImportImage(image); err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: containerd %s up in %.1f s (dir %s, log %s)", e.id,
		time.Since(began).Seconds(), e.dir, e.logPath)
	return e
}

// newEnv lays out a new Env for t, with the tools in bin: a fresh ID, its
// directory (t.TempDir) and the paths below it. It creates nothing else.
func newEnv(t testing.TB, bin string) *Env {
	id := randomID()
	dir := t.TempDir()
	return &Env{
		t:         t,
		id:        id,
		dir:       dir,
		root:      filepath.Join(dir, "root"),
		state:     filepath.Join("/run/gpuslice-e2e", id),
		bin:       bin,
		config:    filepath.Join(dir, "containerd.toml"),
		crictlCfg: filepath.Join(dir, "crictl.yaml"),
		logPath:   filepath.Join(dir, "containerd.log"),
		cgroup:    "/gpuslice-e2e-" + id,
		exited:    make(chan struct{}),
		pods:      map[string]string{},
	}
}

// Dir is the Env's directory: the config, containerd.log, pod and
// container configs, CRI logs (logs/), plugin logs (plugins/).
func (e *Env) Dir() string { return e.dir }

// BinDir is the directory of containerd, ctr, runc and crictl.
func (e *Env) BinDir() string { return e.bin }

// Address is containerd's gRPC (and CRI) socket.
func (e *Env) Address() string { return filepath.Join(e.state, "containerd.sock") }

// NRISocket is the socket external NRI plugins dial.
func (e *Env) NRISocket() string { return filepath.Join(e.state, "nri.sock") }

// PluginDir is containerd's NRI plugin_path: the pre-registered plugins
// (Options.PreRegistered), which containerd starts itself.
func (e *Env) PluginDir() string { return filepath.Join(e.dir, "nri", "plugins") }

func (e *Env) pluginConfigDir() string { return filepath.Join(e.dir, "nri", "conf.d") }

// CgroupParent is the cgroup every pod of the Env lives under.
func (e *Env) CgroupParent() string { return e.cgroup }

// LogPath is containerd's log file.
func (e *Env) LogPath() string { return e.logPath }

// randomID is 8 hex digits.
func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
