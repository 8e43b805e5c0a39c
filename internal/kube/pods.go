package kube

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var nsUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a namespace for the test (named after it), waits until
// pods can be made there, and when the test ends deletes its pods, waits
// for them to be gone (their containers stopped, their claims unprepared)
// and deletes the namespace, so the next test finds the node as this one
// did.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	c.mu.Lock()
	c.nsSeq++
	n := c.nsSeq
	c.mu.Unlock()
	base := strings.Trim(nsUnsafe.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	name := fmt.Sprintf("%s-%d", base, n)
	cx, cancel := ctx()
	defer cancel()
	_, err := c.client.CoreV1().Namespaces().Create(cx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kube: creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() { c.emptyNamespace(t, name) })
	if err := c.waitServiceAccount(name); err != nil {
		t.Fatalf("kube: namespace %s has no default ServiceAccount: %v", name, err)
	}
	return name
}

// emptyNamespace deletes the namespace's pods, waits for them to go, and
// deletes the namespace (the namespace controller finishes that alone).
func (c *Cluster) emptyNamespace(t testing.TB, ns string) {
	cx, cancel := ctx()
	defer cancel()
	grace := int64(1)
	pods := c.client.CoreV1().Pods(ns)
	if err := pods.DeleteCollection(cx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil {
		t.Errorf("kube: deleting the pods of %s: %v", ns, err)
	}
	err := pollFor(drainTimeout, func() error {
		cx, cancel := ctx()
		defer cancel()
		left, err := pods.List(cx, metav1.ListOptions{})
		if err == nil && len(left.Items) > 0 {
			err = fmt.Errorf("%d pods left:\n%s", len(left.Items), c.DescribePod(ns, left.Items[0].Name))
		}
		return err
	})
	if err != nil {
		t.Errorf("kube: the pods of %s did not go in %s: %v", ns, drainTimeout, err)
	}
	if err := c.client.CoreV1().Namespaces().Delete(cx, ns, metav1.DeleteOptions{}); err != nil {
		t.Errorf("kube: deleting namespace %s: %v", ns, err)
	}
}

// BusyboxPod is a pod of one container, "main", of the node's busybox
// image (never pulled) running command (none: /pause, which idles), with a
// one-second grace period. Tests add what they need (resources, claims)
// before they create it.
func BusyboxPod(name string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           Image,
				ImagePullPolicy: corev1.PullNever,
				Command:         command,
			}},
		},
	}
}

// CreatePod creates the pod in ns and returns it as created.
func (c *Cluster) CreatePod(ns string, pod *corev1.Pod) (*corev1.Pod, error) {
	cx, cancel := ctx()
	defer cancel()
	return c.client.CoreV1().Pods(ns).Create(cx, pod, metav1.CreateOptions{})
}

// DeletePod deletes the pod with a one-second grace and waits for it to be
// gone.
func (c *Cluster) DeletePod(ns, name string) error {
	cx, cancel := ctx()
	defer cancel()
	grace := int64(1)
	if err := c.client.CoreV1().Pods(ns).Delete(cx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		return err
	}
	return c.WaitPodGone(ns, name, drainTimeout)
}

// Exec runs command in the pod's container through the API server and the
// kubelet (kubectl exec) and returns its stdout.
func (c *Cluster) Exec(ns, pod, container string, command ...string) (string, error) {
	args := append([]string{"exec", "-n", ns, pod, "-c", container, "--"}, command...)
	return c.Kubectl(args...)
}
