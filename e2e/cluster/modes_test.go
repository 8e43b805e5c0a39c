package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// deploy creates a Deployment of one gpuPod of the template.
func (n *node) deploy(t *testing.T, ns, name, template string) {
	t.Helper()
	labels := map[string]string{"app": name}
	pod := n.gpuPod(name, template)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deployments := n.c.Client().AppsV1().Deployments(ns)
	if _, err := deployments.Create(cx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment %s: %v", name, err)
	}
	// Before the namespace's cleanup (registered earlier, run later),
	// which deletes pods a live ReplicaSet would make again: foreground,
	// so the Deployment is gone only once its pods are.
	t.Cleanup(func() {
		cx, cancel := context.WithTimeout(context.Background(), 2*pollTimeout)
		defer cancel()
		err := deployments.Delete(cx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		for err == nil {
			if _, err = deployments.Get(cx, name, metav1.GetOptions{}); err == nil {
				time.Sleep(200 * time.Millisecond)
			}
		}
		if !apierrors.IsNotFound(err) {
			t.Errorf("deleting Deployment %s: %v", name, err)
		}
	})
}

// deployed waits until the Deployment app has exactly one pod, Running,
// and returns its name.
func (n *node) deployed(t *testing.T, ns, app string) string {
	t.Helper()
	var last string
	deadline := time.Now().Add(2 * pollTimeout)
	for time.Now().Before(deadline) {
		cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := n.c.Client().CoreV1().Pods(ns).List(cx, metav1.ListOptions{LabelSelector: "app=" + app})
		cancel()
		if err == nil && len(list.Items) == 1 && list.Items[0].DeletionTimestamp == nil {
			p := list.Items[0]
			if _, err := n.c.WaitPod(ns, p.Name, time.Second, func(p *corev1.Pod) (bool, error) {
				return p.Status.Phase == corev1.PodRunning, nil
			}); err == nil {
				return p.Name
			}
			last = p.Name + " " + string(p.Status.Phase)
		} else if err == nil {
			last = fmt.Sprintf("%d pods", len(list.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("Deployment %s has no one Running pod (last: %s)\nagent log:\n%s", app, last, n.agentLog())
	return ""
}

// allocatedDevices waits until every claim in ns is allocated and returns
// each claim's device.
func (n *node) allocatedDevices(t *testing.T, ns string, want int) map[string]string {
	t.Helper()
	out := map[string]string{}
	deadline := time.Now().Add(pollTimeout)
	for time.Now().Before(deadline) {
		cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := n.c.Client().ResourceV1().ResourceClaims(ns).List(cx, metav1.ListOptions{})
		cancel()
		clear(out)
		if err == nil {
			for _, c := range list.Items {
				if a := c.Status.Allocation; a != nil && len(a.Devices.Results) == 1 {
					out[c.Name] = a.Devices.Results[0].Device
				}
			}
			if len(out) == want {
				return out
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("claims allocated in %s: %v; want %d", ns, out, want)
	return nil
}

// One isolation mode per card. Two claims of different modes allocated
// the same unused card before either is prepared (the kubelet is stopped
// while the scheduler places them, so the slice still says unused): one
// prepare fails with an event naming the reason, its pod (a Deployment's)
// is evicted, and its successor's claim goes to the other card. Then a
// claim of the other mode that only the first card may take stays
// Pending: the scheduler itself keeps modes apart.
func TestIsolationModes(t *testing.T) {
	n := theNode(t)
	ns := n.c.Namespace(t)
	template(t, n.c, ns, "compute", vgpu{memory: "4Gi", cores: 30})
	template(t, n.c, ns, "memory", vgpu{memory: "4Gi"})

	if err := n.c.StopKubelet(); err != nil {
		t.Fatal(err)
	}
	kubeletUp := false
	defer func() {
		if !kubeletUp {
			_ = n.c.StartKubelet()
		}
	}()
	n.deploy(t, ns, "cmp", "compute")
	n.deploy(t, ns, "mem", "memory")
	devs := n.allocatedDevices(t, ns, 2)
	same := len(devs) == 2
	var first string
	for _, d := range devs {
		if first == "" {
			first = d
		}
		same = same && d == first
	}
	if !same {
		t.Fatalf("the two claims were allocated %v before any prepare; want one unused card for both (the race)", devs)
	}
	if err := n.c.StartKubelet(); err != nil {
		t.Fatal(err)
	}
	kubeletUp = true

	cmp, mem := n.deployed(t, ns, "cmp"), n.deployed(t, ns, "mem")
	cv, mv := n.waitVGPUs(t, ns, cmp, 1)[0], n.waitVGPUs(t, ns, mem, 1)[0]
	if cv.Card == mv.Card || cv.Mode != "compute" || mv.Mode != "memory" {
		t.Fatalf("compute vGPU on card %d (%s), memory vGPU on card %d (%s); want different cards", cv.Card, cv.Mode, mv.Card, mv.Mode)
	}
	ev, err := n.c.WaitEvent(ns, "", "one isolation mode per card", pollTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Reason != "FailedPrepareDynamicResources" {
		t.Errorf("the race's event: %s %q; want FailedPrepareDynamicResources", ev.Reason, ev.Message)
	}
	t.Logf("the race's loser: %s %s: %s", ev.InvolvedObject.Name, ev.Reason, ev.Message)
	n.checkVGPU(t, ns, cmp, 4096, 30)
	n.checkVGPU(t, ns, mem, 4096, 0)
	err = n.waitSlice(func(d []sliceDevice) error {
		for _, dev := range d {
			want := map[int]string{cv.Card: "compute", mv.Card: "memory"}[int(dev.Index)]
			if dev.Mode != want {
				return fmt.Errorf("card %d's mode %q; want %q", dev.Index, dev.Mode, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A memory claim that only the compute card may take.
	var uuid string
	d, _ := n.slice()
	for _, dev := range d {
		if int(dev.Index) == cv.Card {
			uuid = dev.UUID
		}
	}
	template(t, n.c, ns, "memory-there", vgpu{memory: "1Gi",
		cel: []string{fmt.Sprintf("device.attributes['%s'].uuid == '%s'", driverName, uuid)}})
	n.pending(t, ns, "mismatch", "memory-there", "the mismatched claim")
}
