package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/leftovers"
)

// teardown undoes Start, in the order the runtime needs: pods, plugins,
// containerd, leftover processes, mounts, files, cgroups. It logs what
// fails and carries on.
func (e *Env) teardown() {
	running := e.cmd != nil && !e.isExited()
	// 1. Pods (their containers with them), while containerd still runs;
	// their IDs first, to find their shims' sockets later.
	ids := e.sandboxIDs(running)
	if running {
		e.removeAllPods()
	}
	// 2. The plugins this Env started.
	e.stopPlugins()
	// 3. containerd, by PID: SIGTERM, then SIGKILL.
	if running {
		e.stopContainerd()
	}
	e.sweep(ids, e.t.Logf)
}

// sandboxIDs are the IDs of the pods RunPod made and, when containerd
// runs, of every pod and container it lists.
func (e *Env) sandboxIDs(running bool) map[string]bool {
	ids := map[string]bool{}
	e.mu.Lock()
	for id := range e.pods {
		ids[id] = true
	}
	e.mu.Unlock()
	if running {
		for _, list := range [][]string{{"pods", "-q", "--no-trunc"}, {"ps", "-a", "-q", "--no-trunc"}} {
			out, _ := e.Crictl(list...)
			for _, id := range strings.Fields(out) {
				ids[id] = true
			}
		}
	}
	return ids
}

// removeAllPods stops and removes every pod, and their containers.
func (e *Env) removeAllPods() {
	if out, err := e.run(crictlTimeout, filepath.Join(e.bin, "crictl"), "--config", e.crictlCfg,
		"rmp", "--all", "--force"); err != nil {
		e.t.Logf("e2e teardown: removing the pods: %v\n%s", err, out)
	}
}

// stopPlugins stops the external plugins StartPlugin started.
func (e *Env) stopPlugins() {
	e.mu.Lock()
	plugins := append([]*Plugin(nil), e.plugins...)
	e.mu.Unlock()
	for _, p := range plugins {
		if err := p.Stop(); err != nil {
			e.t.Logf("e2e teardown: %v", err)
		}
	}
}

// stopContainerd ends containerd, by PID: SIGTERM, then SIGKILL when it is
// still there after a grace period; it waits for it.
func (e *Env) stopContainerd() {
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(stopTimeout):
		e.t.Logf("e2e teardown: containerd ignored SIGTERM for %s; killing it", stopTimeout)
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
}

// sweep is the end of a teardown, once containerd is gone: it kills what
// is left of this Env's processes, unmounts what is left mounted, and
// removes its state directory, its shims' sockets (those of the sandbox
// and container IDs given) and its cgroup directories. logf reports what
// it had to do or could not.
func (e *Env) sweep(ids map[string]bool, logf func(string, ...any)) {
	e.killLeftovers(logf)
	e.unmountLeftovers(logf)
	e.removeFiles(ids, logf)
	e.removeCgroups(logf)
}

// killLeftovers kills the shims of this containerd (their command lines
// name its socket) and whatever still runs in the pods' cgroups.
func (e *Env) killLeftovers(logf func(string, ...any)) {
	for _, pid := range leftovers.PidsWithArg(e.Address()) {
		logf("e2e teardown: killing leftover shim %d", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range leftovers.CgroupPids(e.cgroupDirs()) {
		logf("e2e teardown: killing leftover process %d of %s", pid, e.cgroup)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// unmountLeftovers unmounts what is left mounted under the Env's
// directories (snapshots, shm, rootfs).
func (e *Env) unmountLeftovers(logf func(string, ...any)) {
	for _, m := range leftovers.MountsUnder(e.dir, e.state) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			logf("e2e teardown: unmounting %s: %v", m, err)
		}
	}
}

// removeFiles removes the state directory (t.TempDir removes the rest),
// and the shim sockets containerd puts under /run/containerd/s whatever
// its state is: only this Env's, a neighbour's live shims keep theirs.
// The shims' IDs are ids and the names of their bundles in the state
// directory, which is how a stale sweep (no pod list) finds them.
func (e *Env) removeFiles(ids map[string]bool, logf func(string, ...any)) {
	if ids == nil {
		ids = map[string]bool{}
	}
	bundles, _ := os.ReadDir(filepath.Join(e.state, "io.containerd.runtime.v2.task", "k8s.io"))
	for _, b := range bundles {
		ids[b.Name()] = true
	}
	if err := os.RemoveAll(e.state); err != nil {
		logf("e2e teardown: %v", err)
	}
	_ = os.Remove(filepath.Dir(e.state)) // only when empty
	for id := range ids {
		for _, suffix := range []string{"", "/debug"} {
			_ = os.Remove(shimSocket(e.Address(), id, suffix))
		}
	}
	for _, d := range []string{"/run/containerd/s", "/run/containerd"} {
		_ = os.Remove(d) // only when empty
	}
}

// shimSocket is where containerd puts the socket of the shim with the
// given ID (a sandbox's) in the k8s.io namespace of the containerd at
// address: /run/containerd/s, named by a hash of the three. suffix is ""
// for the shim's socket, "/debug" for its debug socket.
func shimSocket(address, id, suffix string) string {
	sum := sha256.Sum256([]byte(filepath.Join(address, "k8s.io", id) + suffix))
	return filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:]))
}

// removeCgroups removes the pods' cgroup directories, innermost first; a
// cgroup empties asynchronously after its last process dies, so it
// retries a while.
func (e *Env) removeCgroups(logf func(string, ...any)) {
	err := pollFor(stopTimeout, func() error {
		var errs []error
		for _, d := range e.cgroupDirs() {
			if err := leftovers.RemoveCgroup(d); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		logf("e2e teardown: cgroups: %v", err)
	}
}

// cgroupDirs are the existing directories of the pods' cgroup parent, in
// every hierarchy.
func (e *Env) cgroupDirs() []string { return leftovers.CgroupDirs(e.cgroup) }
