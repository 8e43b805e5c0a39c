package cluster_test

// The node every scenario runs on: the package's shared control plane
// (internal/kube: the released kube-apiserver, kube-scheduler,
// kube-controller-manager and kubelet) whose containerd runs the node agent
// (./nri-plugin) as its NRI plugin, and the same process as the node's DRA
// driver gpu.gpuslice.io, with the node's own credentials, in no-module
// (file) enforcement on two simulated 16 GiB cards. Their device nodes are
// real character devices in a scratch device root; the shim is the real
// one (build/lib/libgpuslice.so) and the containers' CUDA programs
// (build/bin/gstest) run on the simulated driver (build/lib/libcuda.so.1),
// which keeps its cards' state in one file all containers share.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/e2e"
	"github.com/gpuslice/gpuslice/internal/kube"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/state"
	"github.com/gpuslice/gpuslice/pkg/status"
)

const (
	driverName = "gpu.gpuslice.io"
	// pluginName is the agent as containerd registers it (-idx, -name).
	pluginName = "50-gpuslice"
	// cardMiB is each simulated card's memory.
	cardMiB = 16384
	// pollTimeout bounds every wait for the agent's or the cluster's doing
	// (generous for a loaded 2-core machine; polled, never slept through).
	pollTimeout = 90 * time.Second
	mib         = 1 << 20
	gib         = 1 << 30
)

// node is the agent on the shared cluster. Scenarios run one at a time
// (none is parallel); mu guards the agent process across a restart.
type node struct {
	c        *kube.Cluster
	bin      string
	dir      string
	args     []string
	devRoot  string
	simDir   string // the simulated driver's state, shared with the pods
	stateDir string
	metrics  string // the agent's /metrics URL
	socket   string // the agent's status socket

	mu    sync.Mutex
	agent *e2e.Plugin
}

var shared struct {
	once sync.Once
	n    *node
	err  error
}

// theNode is the package's node: the first scenario starts the agent on
// the shared cluster and applies the DeviceClass; later ones find it. The
// agent lives as long as the cluster (its containerd stops it after the
// pods, so the teardown's drain still unprepares their claims).
func theNode(t testing.TB) *node {
	t.Helper()
	c := kube.Shared(t)
	shared.once.Do(func() { shared.n, shared.err = startNode(t, c) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.n
}

func startNode(t testing.TB, c *kube.Cluster) (*node, error) {
	began := time.Now()
	bin, err := buildAgent()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: the node outlives the test that starts it.
	dir, err := os.MkdirTemp("", "gpuslice-cluster-")
	if err != nil {
		return nil, err
	}
	n := &node{c: c, bin: bin, dir: dir,
		devRoot:  filepath.Join(dir, "devroot"),
		simDir:   filepath.Join(dir, "sim"),
		stateDir: filepath.Join(dir, "state"),
		socket:   filepath.Join(dir, "agent.sock"),
	}
	if _, err := e2e.MakeDeviceRoot(n.devRoot); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(n.simDir, 0o777); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	n.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	// The node's own identity: the Node authorizer gives it its slices,
	// and the claims and pods bound to it.
	kubeconfig, err := c.UserKubeconfig("system:node:"+c.NodeName(), "system:nodes")
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte("# gpuslice cluster e2e: the flags say it all\n"), 0o644); err != nil {
		return nil, err
	}
	n.args = []string{
		"-nri-socket", c.Containerd().NRISocket(), "-name", "gpuslice", "-idx", "50",
		"-config", config,
		"-simulate", fmt.Sprintf("0:%d,1:%d", cardMiB, cardMiB),
		"-enforcement", "file",
		// No module and no BPF LSM here: the guard cannot run (the
		// guest's tests run it); vGPU containers run without it.
		"-guard", "optional",
		"-cdi", "never",
		"-device-root", n.devRoot,
		"-shim", testenv.Shim(),
		"-state-dir", n.stateDir,
		"-ledger-dir", filepath.Join(dir, "ledger"),
		"-sched-dir", filepath.Join(dir, "sched"),
		"-metrics-address", fmt.Sprintf("127.0.0.1:%d", port),
		"-status-socket", n.socket,
		"-dra", "on",
		"-kubeconfig", kubeconfig,
		"-node-name", c.NodeName(),
		"-kubelet-root-dir", c.KubeletRootDir(),
		"-dra-cdi-dir", c.CDIDir(),
	}
	if err := n.startAgent(); err != nil {
		return nil, err
	}
	manifest, err := os.ReadFile(filepath.Join(testenv.Root(), "install", "kubernetes", "deviceclass.yaml"))
	if err != nil {
		return nil, err
	}
	if out, err := c.Apply(string(manifest)); err != nil {
		return nil, fmt.Errorf("applying the DeviceClass: %v\n%s", err, out)
	}
	t.Logf("node: agent and DRA driver up in %.1f s", time.Since(began).Seconds())
	return n, nil
}

var built struct {
	once sync.Once
	bin  string
	err  error
}

// buildAgent builds the C artifacts (the shim, the simulated driver,
// gstest) and the agent, once per test process.
func buildAgent() (string, error) {
	built.once.Do(func() {
		if built.err = testenv.BuildC(); built.err != nil {
			return
		}
		dir, err := os.MkdirTemp("", "gpuslice-cluster-bin-")
		if err != nil {
			built.err = err
			return
		}
		bin := filepath.Join(dir, "gpuslice-nri")
		if built.err = testenv.GoBuild("./nri-plugin", bin); built.err != nil {
			return
		}
		built.bin = bin
	})
	return built.bin, built.err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startAgent starts the agent and waits until containerd has registered
// it and its slice is published with both cards.
func (n *node) startAgent() error {
	n.mu.Lock()
	n.agent = n.c.Containerd().StartPlugin(n.bin, n.args...)
	a := n.agent
	n.mu.Unlock()
	if err := a.WaitReady(pluginName); err != nil {
		return err
	}
	return n.waitSlice(func(d []sliceDevice) error {
		if len(d) != 2 {
			return fmt.Errorf("%d devices; want 2", len(d))
		}
		return nil
	})
}

// restartAgent kills the agent with SIGKILL (a crash) and starts it again.
func (n *node) restartAgent(t *testing.T) {
	t.Helper()
	n.mu.Lock()
	a := n.agent
	n.mu.Unlock()
	mark := n.c.Containerd().LogMark()
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.c.Containerd().WaitLog(mark, pollTimeout, `plugin "`+pluginName+`"`, "closed"); err != nil {
		t.Fatalf("containerd did not notice the agent's death: %v", err)
	}
	if err := n.startAgent(); err != nil {
		t.Fatal(err)
	}
}

// agentLog is the running agent's log, its last lines.
func (n *node) agentLog() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return e2e.Tail(n.agent.Log(), 40)
}

// sliceDevice is what a scenario reads of a published device.
type sliceDevice struct {
	Name, UUID, Mode string
	Index            int64
}

// waitSlice waits until the node's published devices satisfy ok.
func (n *node) waitSlice(ok func([]sliceDevice) error) error {
	var last error
	deadline := time.Now().Add(pollTimeout)
	for {
		devs, err := n.slice()
		if err == nil {
			err = ok(devs)
		}
		if err == nil {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("the node's ResourceSlice: %v\nagent log:\n%s", last, n.agentLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *node) slice() ([]sliceDevice, error) {
	cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := n.c.Client().ResourceV1().ResourceSlices().List(cx, metav1.ListOptions{
		FieldSelector: "spec.driver=" + driverName + ",spec.nodeName=" + n.c.NodeName()})
	if err != nil {
		return nil, err
	}
	var out []sliceDevice
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			sd := sliceDevice{Name: d.Name}
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				sd.UUID = *a.StringValue
			}
			if a, ok := d.Attributes["mode"]; ok && a.StringValue != nil {
				sd.Mode = *a.StringValue
			}
			if a, ok := d.Attributes["index"]; ok && a.IntValue != nil {
				sd.Index = *a.IntValue
			}
			out = append(out, sd)
		}
	}
	return out, nil
}

// status is the agent's GET /v1/status (what `gpuslice status` shows).
func (n *node) status() (*status.Node, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", n.socket)
		}}}
	resp, err := hc.Get("http://agent/v1/status")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET /v1/status: %s: %s", resp.Status, b)
	}
	var s status.Node
	return &s, json.NewDecoder(resp.Body).Decode(&s)
}

// vgpusOf is the agent's vGPUs of a pod.
func (n *node) vgpusOf(ns, pod string) ([]cardVGPU, error) {
	s, err := n.status()
	if err != nil {
		return nil, err
	}
	var out []cardVGPU
	for _, c := range s.Cards {
		for _, v := range c.VGPUs {
			if v.Namespace == ns && v.Pod == pod {
				out = append(out, cardVGPU{Card: c.Index, VGPU: v})
			}
		}
	}
	return out, nil
}

// cardVGPU is one vGPU of the status with its card.
type cardVGPU struct {
	Card int
	status.VGPU
}

// scrape is the agent's /metrics text.
func (n *node) scrape() (string, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(n.metrics)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// claimRecords are the claim records of the agent's state as it would
// load it (the snapshot with the journal replayed), by key (claim-<UID>).
func (n *node) claimRecords() (map[string]state.Allocation, error) {
	all, err := state.Read(n.stateDir)
	if err != nil {
		return nil, err
	}
	out := map[string]state.Allocation{}
	for id, a := range all {
		if strings.HasPrefix(id, state.ClaimPrefix) {
			out[id] = a
		}
	}
	return out, nil
}
