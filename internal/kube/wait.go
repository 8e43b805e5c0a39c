package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodTimeout bounds the pod waits: a pod scheduled, its containers
// created, or its scheduler's verdict; generous for a loaded machine
// (the kubelet retries a claim's preparation every 12-15 s).
const PodTimeout = 2 * time.Minute

// pollFor calls f until it succeeds, fails for good (a backoff error) or
// timeout passes (0: once), and returns f's last error.
func pollFor(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		var final backoff
		if err == nil || errors.As(err, &final) || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFor calls f until it succeeds, timeout passes or a component the
// cluster runs has died, and returns f's last error (or the death).
func (c *Cluster) waitFor(timeout time.Duration, f func() error) error {
	return pollFor(timeout, func() error {
		if err := c.deadComponent(); err != nil {
			return err
		}
		return f()
	})
}

// deadComponent is an error naming a component that exited while it
// should run, with its log.
func (c *Cluster) deadComponent() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, p := range c.procs {
		if p.exited() && !p.stopping {
			return backoff{fmt.Errorf("%s exited (%v)\n%s", name, p.waitErr, c.Logs(name, 40))}
		}
	}
	return nil
}

// backoff marks an error that no retry will mend.
type backoff struct{ error }

func (b backoff) Unwrap() error { return b.error }

// ctx is a context for one API call.
func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func (c *Cluster) waitEtcd() error {
	url := "http://127.0.0.1:" + strconv.Itoa(c.ports.EtcdClient) + "/health"
	return c.waitFor(upTimeout, func() error { return getOK(url, `"health":"true"`) })
}

func (c *Cluster) waitAPIServer() error {
	return c.waitFor(upTimeout, func() error {
		cx, cancel := ctx()
		defer cancel()
		b, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(cx)
		if err != nil {
			return fmt.Errorf("readyz: %v: %s", err, b)
		}
		return nil
	})
}

// waitNodeUp waits for the node to register and be Ready.
func (c *Cluster) waitNodeUp() error { return c.WaitNodeReady(time.Time{}) }

// WaitNodeReady waits until the node is Ready with a heartbeat from
// since on (the zero time: any), that is a kubelet started after since
// has reported.
func (c *Cluster) WaitNodeReady(since time.Time) error {
	since = since.Truncate(time.Second) // heartbeats have whole seconds
	var last string
	err := c.waitFor(nodeTimeout, func() error {
		cx, cancel := ctx()
		defer cancel()
		n, err := c.client.CoreV1().Nodes().Get(cx, c.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type != corev1.NodeReady {
				continue
			}
			last = fmt.Sprintf("Ready=%s (%s: %s), heartbeat %s", cond.Status, cond.Reason,
				cond.Message, cond.LastHeartbeatTime.Format(time.RFC3339))
			if cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Time.Before(since) {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready: %s", c.node, last)
	})
	if err != nil {
		return fmt.Errorf("%v\n%s", err, c.Logs("kubelet", 40))
	}
	return nil
}

// waitControllers waits until pods can be made: the controller-manager has
// made the default namespace's ServiceAccount and root CA ConfigMap (the
// kubelet waits for it to mount a token), and the scheduler and the
// controller-manager answer their health checks.
func (c *Cluster) waitControllers() error {
	if err := c.waitServiceAccount("default"); err != nil {
		return err
	}
	for _, port := range []int{c.ports.Scheduler, c.ports.ControllerManager} {
		url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
		if err := c.waitFor(upTimeout, func() error { return getOK(url, "ok") }); err != nil {
			return err
		}
	}
	return nil
}

// waitServiceAccount waits for namespace ns's default ServiceAccount and
// its kube-root-ca.crt ConfigMap, without which no pod runs there.
func (c *Cluster) waitServiceAccount(ns string) error {
	return c.waitFor(upTimeout, func() error {
		cx, cancel := ctx()
		defer cancel()
		if _, err := c.client.CoreV1().ServiceAccounts(ns).Get(cx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := c.client.CoreV1().ConfigMaps(ns).Get(cx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
}

// getOK GETs url (https without checking the certificate: the
// components' self-signed health endpoints on loopback) and wants a 200
// whose body contains want.
func getOK(url, want string) error {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Proxy: nil}}
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return nil
}

// WaitPod waits up to timeout until the pod satisfies cond, and returns
// it. cond's error is final (the pod failed); its false is "not yet". On
// failure the error describes the pod (status and events).
func (c *Cluster) WaitPod(ns, name string, timeout time.Duration, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := c.waitFor(timeout, func() error {
		cx, cancel := ctx()
		defer cancel()
		p, err := c.client.CoreV1().Pods(ns).Get(cx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		ok, err := cond(p)
		if err != nil {
			return backoff{err}
		}
		if !ok {
			return errors.New("not yet")
		}
		return nil
	})
	var final backoff
	if errors.As(err, &final) {
		return pod, fmt.Errorf("pod %s/%s: %v\n%s", ns, name, final.error, c.DescribePod(ns, name))
	}
	if err != nil {
		return pod, fmt.Errorf("pod %s/%s: %v after %s\n%s", ns, name, err, timeout, c.DescribePod(ns, name))
	}
	return pod, nil
}

// WaitPodRunning waits until the pod runs with all its containers started,
// and fails early when it has failed or a container terminated.
func (c *Cluster) WaitPodRunning(ns, name string) (*corev1.Pod, error) {
	return c.WaitPod(ns, name, PodTimeout, podRunning)
}

func podRunning(p *corev1.Pod) (bool, error) {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Errorf("phase %s, want Running", p.Status.Phase)
	case corev1.PodRunning:
	default:
		return false, nil
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Terminated != nil {
			return false, fmt.Errorf("container %s terminated: %s (exit %d)", s.Name,
				s.State.Terminated.Reason, s.State.Terminated.ExitCode)
		}
		if s.State.Running == nil {
			return false, nil
		}
	}
	return len(p.Status.ContainerStatuses) == len(p.Spec.Containers), nil
}

// WaitPodUnschedulable waits until the scheduler has said it cannot place
// the pod (PodScheduled False, reason Unschedulable) and returns its
// message ("0/1 nodes are available: 1 cannot allocate all claims. ...").
// A pod bound to the node instead is an error.
func (c *Cluster) WaitPodUnschedulable(ns, name string) (string, error) {
	var msg string
	_, err := c.WaitPod(ns, name, PodTimeout, func(p *corev1.Pod) (bool, error) {
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("bound to node %s, want Pending unschedulable", p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse &&
				cond.Reason == corev1.PodReasonUnschedulable {
				msg = cond.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg, err
}

// WaitPodGone waits until the pod no longer exists.
func (c *Cluster) WaitPodGone(ns, name string, timeout time.Duration) error {
	err := c.waitFor(timeout, func() error {
		cx, cancel := ctx()
		defer cancel()
		_, err := c.client.CoreV1().Pods(ns).Get(cx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errors.New("still there")
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s not gone after %s: %v\n%s", ns, name, timeout, err, c.DescribePod(ns, name))
	}
	return nil
}

// WaitEvent waits until an event about the object name in ns (name "":
// any object there, for one whose name a test cannot know) has a reason
// or message containing text, and returns it.
func (c *Cluster) WaitEvent(ns, name, text string, timeout time.Duration) (*corev1.Event, error) {
	var found *corev1.Event
	err := c.waitFor(timeout, func() error {
		evs, err := c.events(ns, name)
		if err != nil {
			return err
		}
		for i := range evs {
			if strings.Contains(evs[i].Reason, text) || strings.Contains(evs[i].Message, text) {
				found = &evs[i]
				return nil
			}
		}
		return errors.New("no such event")
	})
	if err != nil {
		return nil, fmt.Errorf("no event about %s/%s with %q in %s: %v\n%s", ns, name, text, timeout, err,
			c.eventLines(ns, name))
	}
	return found, nil
}

// events are the events about the object name in ns ("": any object).
func (c *Cluster) events(ns, name string) ([]corev1.Event, error) {
	cx, cancel := ctx()
	defer cancel()
	var opts metav1.ListOptions
	if name != "" {
		opts.FieldSelector = "involvedObject.name=" + name
	}
	list, err := c.client.CoreV1().Events(ns).List(cx, opts)
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// eventLines are the events about an object, one a line.
func (c *Cluster) eventLines(ns, name string) string {
	evs, err := c.events(ns, name)
	if err != nil {
		return "(events: " + err.Error() + ")"
	}
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s %s %s: %s (x%d)\n", e.LastTimestamp.Format(time.TimeOnly), e.Type, e.Reason, e.Message, e.Count)
	}
	return b.String()
}

// DescribePod is a pod's status and events, for failure messages.
func (c *Cluster) DescribePod(ns, name string) string {
	cx, cancel := ctx()
	defer cancel()
	p, err := c.client.CoreV1().Pods(ns).Get(cx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("pod %s/%s: %v", ns, name, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s: phase %s, node %q\n", ns, name, p.Status.Phase, p.Spec.NodeName)
	for _, cond := range p.Status.Conditions {
		fmt.Fprintf(&b, "  condition %s=%s %s %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, "  container %s: ready %v, restarts %d, state %s\n", s.Name, s.Ready, s.RestartCount, stateText(s.State))
	}
	b.WriteString("events:\n" + c.eventLines(ns, name))
	return b.String()
}

func stateText(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.Format(time.TimeOnly)
	case s.Waiting != nil:
		return "waiting: " + s.Waiting.Reason + " " + s.Waiting.Message
	case s.Terminated != nil:
		return fmt.Sprintf("terminated: %s (exit %d) %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "unknown"
}
