package e2e_test

// The node a test runs on: a real containerd (internal/e2e) with the node
// agent (./nri-plugin, built once per test process) as an external NRI
// plugin, on simulated cards whose device nodes are real character devices
// in a scratch device root, the real shim (build/lib/libgpuslice.so), and
// the agent's state and ledger directories under the test's TempDir.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/e2e"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/state"
)

const (
	// pluginName is the agent as containerd registers it (-idx, -name).
	pluginName = "50-gpuslice"
	// shimMount is where containers see the shim (-shim-mount-path).
	shimMount = "/usr/local/gpuslice/libgpuslice.so"
	// ledgerMount is where a container sees its ledger directory.
	ledgerMount = "/run/gpuslice/ledger"
	// pollTimeout bounds every wait for the agent's doing (generous for
	// a loaded 2-core machine; polled, never slept through).
	pollTimeout = 60 * time.Second
)

var workDir string // the test process's scratch directory (the agent binary)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpuslice-nri-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var built struct {
	once  sync.Once
	agent string
	err   error
}

// agentBinary builds the agent and the C artifacts (the shim), once.
func agentBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		began := time.Now()
		if built.err = testenv.BuildC(); built.err != nil {
			return
		}
		bin := filepath.Join(workDir, "gpuslice-nri")
		if built.err = testenv.GoBuild("./nri-plugin", bin); built.err != nil {
			return
		}
		built.agent = bin
		t.Logf("built the agent and the shim in %.1f s", time.Since(began).Seconds())
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.agent
}

// nodeConfig is what varies between tests' nodes.
type nodeConfig struct {
	simulate string   // -simulate
	args     []string // more agent flags (-max-inst, -placement, ...)
}

// node is a containerd with the agent running as its NRI plugin.
type node struct {
	t         *testing.T
	env       *e2e.Env
	agentBin  string
	args      []string
	agent     *e2e.Plugin
	devRoot   string
	stateDir  string
	ledgerDir string
	hostDev   map[string]string // device path -> "major:minor" (hex) of its host node
}

// startNode starts containerd and the agent and waits until the agent is
// registered.
func startNode(t *testing.T, cfg nodeConfig) *node {
	t.Helper()
	e2e.Require(t) // skip (or fail) before building anything
	bin := agentBinary(t)
	env := e2e.Start(t, e2e.Options{})
	dir := t.TempDir()
	n := &node{t: t, env: env, agentBin: bin,
		devRoot:   filepath.Join(dir, "devroot"),
		stateDir:  filepath.Join(dir, "state"),
		ledgerDir: filepath.Join(dir, "ledger"),
		hostDev:   map[string]string{},
	}
	n.hostDev = makeDevRoot(t, n.devRoot)
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte("# gpuslice e2e: the flags say it all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.args = append([]string{
		"-nri-socket", env.NRISocket(), "-name", "gpuslice", "-idx", "50",
		"-config", config,
		"-simulate", cfg.simulate,
		"-enforcement", "file",
		// No module and no BPF LSM here: the guard cannot run (the
		// guest's tests run it); vGPU containers run without it.
		"-guard", "optional",
		"-cdi", "never",
		"-device-root", n.devRoot,
		"-shim", testenv.Shim(),
		"-shim-mount-path", shimMount,
		"-state-dir", n.stateDir,
		"-ledger-dir", n.ledgerDir,
		"-sched-dir", filepath.Join(dir, "sched"),
		"-metrics-address", "",
		"-status-socket", filepath.Join(dir, "agent.sock"),
	}, cfg.args...)
	n.startAgent()
	return n
}

// makeDevRoot makes the scratch device root (e2e.DeviceNodes) and
// returns each path's "major:minor" (hex) of its host node.
func makeDevRoot(t *testing.T, root string) map[string]string {
	t.Helper()
	devs, err := e2e.MakeDeviceRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// startAgent starts an agent process and waits until containerd has
// registered and synchronized it.
func (n *node) startAgent() {
	n.t.Helper()
	began := time.Now()
	n.agent = n.env.StartPlugin(n.agentBin, n.args...)
	if err := n.agent.WaitReady(pluginName); err != nil {
		n.t.Fatal(err)
	}
	n.t.Logf("agent (pid %d) registered in %.1f s", n.agent.Pid(), time.Since(began).Seconds())
}

// killAgent kills the agent with SIGKILL and waits until containerd has
// noticed that its connection closed.
func (n *node) killAgent() {
	n.t.Helper()
	mark := n.env.LogMark()
	if err := n.agent.Kill(); err != nil {
		n.t.Fatal(err)
	}
	if _, err := n.env.WaitLog(mark, pollTimeout, `plugin "`+pluginName+`"`, "closed"); err != nil {
		n.t.Fatalf("containerd did not notice the agent's death: %v\n%s", err, n.env.Logs())
	}
}

// diag is what a failure message carries: the agent's and containerd's
// logs.
func (n *node) diag() string {
	return "agent log:\n" + tailLines(n.agent.Log(), 30) + "\n" + n.env.Logs()
}

func tailLines(s string, k int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return strings.Join(lines, "\n")
}

// runPod runs a pod with the given annotations.
func (n *node) runPod(name string, annotations map[string]string) string {
	n.t.Helper()
	id, err := n.env.RunPod(name, annotations)
	if err != nil {
		n.t.Fatalf("RunPod %s: %v\n%s", name, err, n.diag())
	}
	return id
}

// create creates an idle container (the image's /pause) in a pod.
func (n *node) create(pod, name string, env map[string]string) string {
	n.t.Helper()
	id, err := n.env.CreateContainer(pod, name, nil, nil, env)
	if err != nil {
		n.t.Fatalf("CreateContainer %s: %v\n%s", name, err, n.diag())
	}
	return id
}

// run creates and starts an idle container in a pod.
func (n *node) run(pod, name string, env map[string]string) string {
	n.t.Helper()
	id := n.create(pod, name, env)
	if err := n.env.StartContainer(id); err != nil {
		n.t.Fatalf("StartContainer %s: %v\n%s", name, err, n.diag())
	}
	return id
}

// removePod stops and removes a pod and its containers.
func (n *node) removePod(pod string) {
	n.t.Helper()
	if err := n.env.RemovePod(pod); err != nil {
		n.t.Fatalf("RemovePod: %v\n%s", err, n.diag())
	}
}

// exec runs a command in a running container and returns its stdout.
func (n *node) exec(ctr string, cmd ...string) string {
	n.t.Helper()
	out, err := n.env.Exec(ctr, cmd...)
	if err != nil {
		n.t.Fatalf("exec %q: %v", cmd, err)
	}
	return out
}

// envOf is a running container's environment.
func (n *node) envOf(ctr string) map[string]string {
	n.t.Helper()
	vars := map[string]string{}
	for _, l := range strings.Split(n.exec(ctr, "env"), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			vars[k] = v
		}
	}
	return vars
}

// nvidiaNodes lists a running container's /dev/nvidia* entries: path to
// "TYPE major:minor" (hex), TYPE as stat %F writes it.
func (n *node) nvidiaNodes(ctr string) map[string]string {
	n.t.Helper()
	out := n.exec(ctr, "sh", "-c",
		`for f in /dev/nvidia*; do [ -e "$f" ] && stat -c '%n|%F %t:%T' "$f"; done; true`)
	nodes := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if p, what, ok := strings.Cut(l, "|"); ok {
			nodes[p] = what
		}
	}
	return nodes
}

// mountsOf is a running container's mounts: mount point to its options.
func (n *node) mountsOf(ctr string) map[string][]string {
	n.t.Helper()
	mounts := map[string][]string{}
	for _, l := range strings.Split(n.exec(ctr, "cat", "/proc/mounts"), "\n") {
		if f := strings.Fields(l); len(f) >= 4 {
			mounts[f[1]] = strings.Split(f[3], ",")
		}
	}
	return mounts
}

// allocations is the agent's state as it would load it (state.Read: the
// snapshot with the journal replayed, nothing written), by container ID.
// Read until two reads agree, so a compaction between the two files'
// reads is not mistaken for the state.
func (n *node) allocations() map[string]state.Allocation {
	n.t.Helper()
	prev, err := state.Read(n.stateDir)
	for i := 0; err == nil && i < 50; i++ {
		var cur map[string]state.Allocation
		if cur, err = state.Read(n.stateDir); err == nil && reflect.DeepEqual(cur, prev) {
			return cur
		}
		prev = cur
	}
	if err == nil {
		err = errors.New("it keeps changing")
	}
	n.t.Fatalf("reading the agent's state in %s: %v", n.stateDir, err)
	return nil
}

// cardsOf is the cards of a container's allocation in the state file, or
// nil when it has none.
func (n *node) cardsOf(ctr string) []int {
	n.t.Helper()
	al, ok := n.allocations()[ctr]
	if !ok {
		return nil
	}
	cards := []int{}
	for _, v := range al.VGPUs {
		cards = append(cards, v.Card)
	}
	return cards
}

// ledgerEntries lists the ledger root (the per-container directories).
func (n *node) ledgerEntries() []string {
	n.t.Helper()
	ents, err := os.ReadDir(n.ledgerDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		n.t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// waitFor polls cond until it returns nil or pollTimeout passes, and then
// fails the test with cond's last error.
func (n *node) waitFor(what string, cond func() error) {
	n.t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: not so after %s: %v\n%s", what, pollTimeout, err, n.diag())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReleased waits until the agent has released the containers: the
// state file no longer lists them and their ledger directories are gone.
func (n *node) waitReleased(ctrs ...string) {
	n.t.Helper()
	n.waitFor(fmt.Sprintf("containers %s released", short(ctrs...)), func() error {
		all := n.allocations()
		for _, c := range ctrs {
			if _, ok := all[c]; ok {
				return fmt.Errorf("the state file still lists %s", short(c))
			}
			if _, err := os.Stat(filepath.Join(n.ledgerDir, c)); !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("the ledger directory of %s is still there (stat: %v)", short(c), err)
			}
		}
		return nil
	})
}

// short abbreviates container IDs for messages.
func short(ids ...string) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id[:min(len(id), 12)]
	}
	return strings.Join(s, ",")
}

// errContains checks that err is a refusal naming every one of parts.
func errContains(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: created; want the agent's refusal", what)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: the error lacks %q:\n%v", what, p, err)
		}
	}
}
