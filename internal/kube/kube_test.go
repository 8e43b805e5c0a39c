package kube_test

// These tests prove the harness itself on one shared cluster: the node
// becomes Ready, the real scheduler binds a pod that runs (logs and exec
// through the API server and the kubelet), a pod survives a kubelet
// restart, the scheduler allocates DRA consumable capacity from a
// ResourceSlice written through the API (no driver), and the API server
// calls an admission webhook served at the node's address. Main's check
// after the teardown (nothing left behind) is the last test. They need
// root; GPUSLICE_SKIP_KUBE=1 (or GPUSLICE_SKIP_E2E=1) skips them.

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/kube"
)

func TestMain(m *testing.M) { os.Exit(kube.Main(m, kube.Options{})) }

func TestNodeReady(t *testing.T) {
	c := kube.Shared(t)
	if err := c.WaitNodeReady(time.Time{}); err != nil {
		t.Fatal(err)
	}
	cx := t.Context()
	node, err := c.Client().CoreV1().Nodes().Get(cx, c.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != "v1.37.2" {
		t.Errorf("kubelet version %q, want v1.37.2", v)
	}
	var internal string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != c.NodeIP() || net.ParseIP(internal).IsLoopback() {
		t.Errorf("node InternalIP %q, want the non-loopback %s", internal, c.NodeIP())
	}
	if !strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://") {
		t.Errorf("container runtime %q, want containerd", node.Status.NodeInfo.ContainerRuntimeVersion)
	}
}

func TestPodScheduledAndRuns(t *testing.T) {
	c := kube.Shared(t)
	ns := c.Namespace(t)
	pod := kube.BusyboxPod("hello", "sh", "-c", "echo hello from $(hostname); exec sleep 3600")
	if _, err := c.CreatePod(ns, pod); err != nil {
		t.Fatal(err)
	}
	p, err := c.WaitPodRunning(ns, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != c.NodeName() {
		t.Errorf("pod bound to %q, want %q", p.Spec.NodeName, c.NodeName())
	}
	// The real scheduler bound it: its event says so.
	ev, err := c.WaitEvent(ns, "hello", "Scheduled", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Source.Component != "default-scheduler" && ev.ReportingController != "default-scheduler" {
		t.Errorf("Scheduled event from %q/%q, want default-scheduler", ev.Source.Component, ev.ReportingController)
	}
	// The pod's address is on the CNI bridge's subnet.
	_, subnet, _ := net.ParseCIDR(c.PodSubnet())
	if ip := net.ParseIP(p.Status.PodIP); ip == nil || !subnet.Contains(ip) {
		t.Errorf("pod IP %q, want one in %s", p.Status.PodIP, c.PodSubnet())
	}
	// Logs and exec go through the API server to the kubelet at its
	// InternalIP, whose serving certificate the API server checks.
	logs, err := c.Kubectl("logs", "-n", ns, "hello")
	if err != nil || !strings.Contains(logs, "hello from hello") {
		t.Errorf("kubectl logs: %q, %v", logs, err)
	}
	out, err := c.Exec(ns, "hello", "main", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil || out != ns {
		t.Errorf("exec: the service account's namespace is %q (%v), want %q", out, err, ns)
	}
}

func TestPodSurvivesKubeletRestart(t *testing.T) {
	c := kube.Shared(t)
	ns := c.Namespace(t)
	pod := kube.BusyboxPod("survivor", "sh", "-c", "cat /proc/sys/kernel/random/uuid > /tmp/boot; exec sleep 3600")
	if _, err := c.CreatePod(ns, pod); err != nil {
		t.Fatal(err)
	}
	before, err := c.WaitPodRunning(ns, "survivor")
	if err != nil {
		t.Fatal(err)
	}
	boot, err := c.Exec(ns, "survivor", "main", "cat", "/tmp/boot")
	if err != nil {
		t.Fatal(err)
	}

	if err := c.RestartKubelet(); err != nil {
		t.Fatal(err)
	}

	after, err := c.WaitPodRunning(ns, "survivor")
	if err != nil {
		t.Fatal(err)
	}
	b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]
	if a.ContainerID != b.ContainerID || a.RestartCount != 0 {
		t.Errorf("after the kubelet's restart the container is %s (restarts %d), want %s (0)",
			a.ContainerID, a.RestartCount, b.ContainerID)
	}
	if again, err := c.Exec(ns, "survivor", "main", "cat", "/tmp/boot"); err != nil || again != boot {
		t.Errorf("after the kubelet's restart the container's boot mark is %q (%v), want %q", again, err, boot)
	}
	// And the new kubelet runs new pods.
	if _, err := c.CreatePod(ns, kube.BusyboxPod("newcomer")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPodRunning(ns, "newcomer"); err != nil {
		t.Fatal(err)
	}
}
