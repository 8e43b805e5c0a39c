package kube

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// StopKubelet stops the kubelet (SIGTERM) and waits for it to exit; the
// pods' containers keep running in containerd. StartKubelet starts it
// again.
func (c *Cluster) StopKubelet() error {
	c.kubeMu.Lock()
	defer c.kubeMu.Unlock()
	return c.stopComponent("kubelet")
}

// StartKubelet starts the kubelet stopped by StopKubelet, with the same
// configuration, and waits until it has reported the node Ready.
func (c *Cluster) StartKubelet() error {
	c.kubeMu.Lock()
	defer c.kubeMu.Unlock()
	c.mu.Lock()
	p := c.procs["kubelet"]
	c.mu.Unlock()
	if p != nil && !p.exited() {
		return fmt.Errorf("kube: the kubelet runs already")
	}
	began := time.Now()
	if err := c.runKubelet(); err != nil {
		return err
	}
	if err := c.WaitNodeReady(began); err != nil {
		return err
	}
	return c.waitKubeletSynced()
}

// waitKubeletSynced waits until the kubelet knows every pod the API server
// has bound to the node (its /pods, through the API server's node proxy):
// before that, a restarted kubelet answers exec and logs of a running pod
// with "pod does not exist".
func (c *Cluster) waitKubeletSynced() error {
	var missing []string
	err := c.waitFor(nodeTimeout, func() error {
		cx, cancel := ctx()
		defer cancel()
		bound, err := c.client.CoreV1().Pods("").List(cx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + c.node})
		if err != nil {
			return err
		}
		raw, err := c.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", c.node, "proxy", "pods").DoRaw(cx)
		if err != nil {
			return err
		}
		var known corev1.PodList
		if err := json.Unmarshal(raw, &known); err != nil {
			return err
		}
		uids := map[types.UID]bool{}
		for _, p := range known.Items {
			uids[p.UID] = true
		}
		missing = missing[:0]
		for _, p := range bound.Items {
			if !uids[p.UID] && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				missing = append(missing, p.Namespace+"/"+p.Name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("the kubelet does not know %v yet", missing)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kube: after its restart: %v\n%s", err, c.Logs("kubelet", 30))
	}
	return nil
}

// RestartKubelet stops the kubelet and starts it again, with pods running,
// as an upgrade or a crash-looping kubelet would; it returns once the new
// kubelet has reported the node Ready.
func (c *Cluster) RestartKubelet() error {
	if err := c.StopKubelet(); err != nil {
		return err
	}
	return c.StartKubelet()
}

// stopComponent stops the named component, marking its exit as wanted.
func (c *Cluster) stopComponent(name string) error {
	c.mu.Lock()
	p := c.procs[name]
	if p != nil {
		p.stopping = true
	}
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	err := p.stop()
	if werr := c.writeOwner(); err == nil {
		err = werr
	}
	return err
}
