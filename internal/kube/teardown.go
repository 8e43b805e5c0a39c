package kube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/leftovers"
)

// components in the order a teardown stops them: the node first, so no
// pod restarts while the control plane goes.
var components = []string{"kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"}

// teardown runs before containerd's: it deletes every pod through the API
// (so the kubelet stops them and DRA drivers unprepare their claims, as
// on a drained node) and stops the components.
func (c *Cluster) teardown() {
	c.ending = time.Now()
	if c.running("kube-apiserver") && c.running("kubelet") {
		c.drain()
	}
	for _, name := range components {
		if err := c.stopComponent(name); err != nil {
			c.tb.Logf("kube teardown: %v", err)
		}
	}
}

// running reports whether the component runs.
func (c *Cluster) running(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[name]
	return p != nil && !p.exited()
}

// drain deletes every pod with a one-second grace and waits for them to be
// gone; those left are logged (containerd's teardown removes them).
func (c *Cluster) drain() {
	cx, cancel := ctx()
	defer cancel()
	pods, err := c.client.CoreV1().Pods("").List(cx, metav1.ListOptions{})
	if err != nil {
		c.tb.Logf("kube teardown: listing pods: %v", err)
		return
	}
	grace := int64(1)
	for _, p := range pods.Items {
		err := c.client.CoreV1().Pods(p.Namespace).Delete(cx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil {
			c.tb.Logf("kube teardown: deleting pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	err = pollFor(drainTimeout, func() error {
		cx, cancel := ctx()
		defer cancel()
		left, err := c.client.CoreV1().Pods("").List(cx, metav1.ListOptions{})
		if err == nil && len(left.Items) > 0 {
			err = fmt.Errorf("%d pods left, %s/%s first", len(left.Items), left.Items[0].Namespace, left.Items[0].Name)
		}
		return err
	})
	if err != nil {
		c.tb.Logf("kube teardown: the pods did not go in %s: %v", drainTimeout, err)
	}
}

// finish is the teardown's end, after containerd's: whatever still runs
// is stopped (a start that failed half way), the host swept, the result
// checked, and the host lock released.
func (c *Cluster) finish() {
	for _, name := range components {
		if err := c.stopComponent(name); err != nil {
			c.tb.Logf("kube teardown: %v", err)
		}
	}
	c.sweep(c.tb.Logf)
	if err := c.leftovers(); err != nil {
		c.tb.Errorf("kube: the teardown of cluster %s left things behind:\n%v", c.id, err)
	} else if !c.ending.IsZero() {
		c.tb.Logf("kube: cluster %s torn down in %.1f s, nothing left behind", c.id, time.Since(c.ending).Seconds())
	}
	c.host.unlock()
	running.Lock()
	running.yes = false
	running.Unlock()
}

// sweep removes what the cluster's processes leave on the host once they
// are gone: processes in the kubelet's cgroups, mounts under the
// directory, the cgroups, the bridge, the changed sysctls, the paths the
// kubelet made, the directory. It also cleans up a stale cluster, from
// its owner file. logf reports what it had to do or could not.
func (c *Cluster) sweep(logf func(string, ...any)) {
	for _, pid := range leftovers.CgroupPids(leftovers.CgroupDirs(c.cgroup)) {
		logf("kube teardown: killing leftover process %d of %s", pid, c.cgroup)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, m := range leftovers.MountsUnder(c.dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			logf("kube teardown: unmounting %s: %v", m, err)
		}
	}
	if c.cgroup != "" {
		err := pollFor(stopTimeout, func() error {
			var errs []error
			for _, d := range leftovers.CgroupDirs(c.cgroup) {
				errs = append(errs, leftovers.RemoveCgroup(d))
			}
			return errors.Join(errs...)
		})
		if err != nil {
			logf("kube teardown: cgroups: %v", err)
		}
	}
	if c.bridge != "" {
		if err := deleteLink(c.bridge); err != nil {
			logf("kube teardown: deleting the bridge %s: %v", c.bridge, err)
		}
	}
	if err := c.saved.restore(); err != nil {
		logf("kube teardown: sysctls: %v", err)
	}
	c.removeHostPaths(logf)
	if err := os.RemoveAll(c.dir); err != nil {
		logf("kube teardown: %v", err)
	}
}

// removeHostPaths removes the kubelet's paths outside the directory that
// were not there before it ran, and its links in /var/log/containers to
// the cluster's pod logs.
func (c *Cluster) removeHostPaths(logf func(string, ...any)) {
	links, _ := filepath.Glob("/var/log/containers/*")
	for _, l := range links {
		if dst, err := os.Readlink(l); err == nil && strings.HasPrefix(dst, c.dir+"/") {
			_ = os.Remove(l)
		}
	}
	// Deepest first.
	for i := len(c.created) - 1; i >= 0; i-- {
		if err := os.RemoveAll(c.created[i]); err != nil {
			logf("kube teardown: %v", err)
		}
	}
}

// leftovers lists what the cluster left behind after its teardown.
func (c *Cluster) leftovers() error {
	var errs []error
	for _, pid := range leftovers.PidsWithArgPrefix(c.dir) {
		errs = append(errs, fmt.Errorf("process %d still runs (%s)", pid,
			strings.Join(leftovers.ProcArgs(pid), " ")))
	}
	if c.env != nil {
		for _, pid := range leftovers.PidsWithArg(c.env.Address()) {
			errs = append(errs, fmt.Errorf("containerd shim %d still runs", pid))
		}
		for _, d := range leftovers.CgroupDirs(c.env.CgroupParent()) {
			errs = append(errs, fmt.Errorf("containerd's cgroup %s is still there", d))
		}
	}
	for _, d := range leftovers.CgroupDirs(c.cgroup) {
		errs = append(errs, fmt.Errorf("cgroup %s is still there", d))
	}
	for _, m := range leftovers.MountsUnder(c.dir) {
		errs = append(errs, fmt.Errorf("%s is still mounted", m))
	}
	if linkExists(c.bridge) {
		errs = append(errs, fmt.Errorf("the bridge %s is still there", c.bridge))
	}
	for _, l := range allSysctls().changedFrom(c.before) {
		errs = append(errs, errors.New(l))
	}
	for _, p := range append([]string{c.dir}, c.created...) {
		if _, err := os.Lstat(p); err == nil {
			errs = append(errs, fmt.Errorf("%s is still there", p))
		}
	}
	return errors.Join(errs...)
}
