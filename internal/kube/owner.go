package kube

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gpuslice/gpuslice/internal/leftovers"
)

// owner is what a cluster's directory says about it, so that the next
// cluster on the machine can clean up after a test process that died
// without its teardown.
type owner struct {
	Pid    int    `json:"pid"`   // the test process
	Start  string `json:"start"` // its start time (/proc/PID/stat)
	Test   string `json:"test"`  // the test (or package) that started it
	Cgroup string `json:"cgroup"`
	Bridge string `json:"bridge"`
	// Saved are the host's sysctls before the kubelet started.
	Saved sysctls `json:"saved,omitempty"`
	// Procs are the components: name to PID and start time.
	Procs map[string]procID `json:"procs,omitempty"`
	// Created are the host paths outside the directory that did not exist
	// before the kubelet ran (it makes some whatever its root is).
	Created []string `json:"created,omitempty"`
}

type procID struct {
	Pid   int    `json:"pid"`
	Start string `json:"start"`
}

const ownerFile = "owner.json"

// writeOwner writes the cluster's owner file as things stand.
func (c *Cluster) writeOwner() error {
	o := owner{Pid: os.Getpid(), Start: leftovers.ProcStart(os.Getpid()), Test: c.tb.Name(),
		Cgroup: c.cgroup, Bridge: c.bridge, Saved: c.saved, Procs: map[string]procID{},
		Created: c.created}
	c.mu.Lock()
	for name, p := range c.procs {
		if !p.exited() {
			o.Procs[name] = procID{Pid: p.cmd.Process.Pid, Start: leftovers.ProcStart(p.cmd.Process.Pid)}
		}
	}
	c.mu.Unlock()
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.dir, ownerFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.dir, ownerFile))
}

// readOwner reads the owner file of the cluster directory dir.
func readOwner(dir string) (owner, error) {
	var o owner
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return o, err
	}
	return o, json.Unmarshal(b, &o)
}

// sweepStale removes what is left of clusters whose test processes died
// without their teardown. It runs with the host lock held, so every
// cluster directory it finds is stale: a live cluster would hold the lock.
func sweepStale(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(baseDir, "*"))
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		o, err := readOwner(dir)
		if err != nil {
			logf("kube: removing %s (no owner file: %v)", dir, err)
		} else {
			logf("kube: cleaning up after a test process (%d, %s) that left %s behind", o.Pid, o.Test, dir)
			o.kill()
		}
		stale := &Cluster{dir: dir, cgroup: o.Cgroup, bridge: o.Bridge, saved: o.Saved, created: o.Created}
		stale.sweep(logf)
	}
}

// kill kills the stale cluster's components whose PIDs still name the
// processes started, and waits a little for them to go.
func (o owner) kill() {
	for _, id := range o.Procs {
		if id.Start != "" && leftovers.ProcStart(id.Pid) == id.Start {
			_ = syscall.Kill(id.Pid, syscall.SIGKILL)
		}
	}
	_ = pollFor(stopTimeout, func() error {
		for _, id := range o.Procs {
			if id.Start != "" && leftovers.ProcStart(id.Pid) == id.Start {
				return os.ErrExist
			}
		}
		return nil
	})
}
