package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/gpuslice/gpuslice/internal/leftovers"
)

// owner is what an Env's state directory says about it, so that another
// test process can clean up after one that died without its teardown.
type owner struct {
	Pid        int    `json:"pid"`   // the test process
	Start      string `json:"start"` // its start time (/proc/PID/stat)
	Dir        string `json:"dir"`
	Cgroup     string `json:"cgroup"`
	Config     string `json:"config"`
	Containerd int    `json:"containerd,omitempty"`
	// Plugins are the external plugins StartPlugin started: PID and start.
	Plugins map[int]string `json:"plugins,omitempty"`
}

const ownerFile = "owner.json"

// writeOwner writes the Env's owner file, with containerd's PID once known
// and the plugins' PIDs.
func (e *Env) writeOwner() error {
	o := owner{Pid: os.Getpid(), Start: leftovers.ProcStart(os.Getpid()),
		Dir: e.dir, Cgroup: e.cgroup, Config: e.config, Plugins: map[int]string{}}
	if e.cmd != nil && e.cmd.Process != nil {
		o.Containerd = e.cmd.Process.Pid
	}
	e.mu.Lock()
	for _, p := range e.plugins {
		o.Plugins[p.Pid()] = leftovers.ProcStart(p.Pid())
	}
	e.mu.Unlock()
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(e.state, ownerFile), b, 0o644)
}

// sweepStale tears down what is left of the Envs whose test process is
// gone: containerd (by its PID, when that process still runs this Env's
// config), leftovers as in a teardown, and the Env's directory.
func sweepStale(logf func(string, ...any)) {
	states, _ := filepath.Glob("/run/gpuslice-e2e/*")
	for _, state := range states {
		o, ok := staleOwner(state)
		if !ok {
			continue
		}
		logf("e2e: cleaning up after a test process (%d) that left %s behind", o.Pid, state)
		o.kill()
		stale := &Env{dir: o.Dir, state: state, cgroup: o.Cgroup}
		stale.sweep(nil, logf)
		_ = os.RemoveAll(o.Dir)
		_ = os.Remove(filepath.Dir(o.Dir)) // the test's temp root, when empty
	}
}

// staleOwner is the owner of the Env whose state directory is state, and
// whether its test process is known to be gone. A directory without a
// readable owner file is starting, or not ours; an owner whose process is
// alive, or unknown, is left alone.
func staleOwner(state string) (owner, bool) {
	var o owner
	b, err := os.ReadFile(filepath.Join(state, ownerFile))
	if err != nil {
		return o, false
	}
	if json.Unmarshal(b, &o) != nil || o.Pid <= 0 || o.Dir == "" || o.Cgroup == "" {
		return o, false
	}
	if o.Start == "" || leftovers.ProcStart(o.Pid) == o.Start {
		return o, false
	}
	return o, true
}

// kill kills the stale Env's containerd (by its PID, when that process
// still runs the Env's config), waiting for it to go, and its plugins
// (when their PIDs still name the processes started).
func (o owner) kill() {
	if o.Containerd > 0 && slices.Contains(leftovers.ProcArgs(o.Containerd), o.Config) {
		_ = syscall.Kill(o.Containerd, syscall.SIGKILL)
		_ = pollFor(stopTimeout, func() error {
			if len(leftovers.ProcArgs(o.Containerd)) > 0 {
				return errors.New("still there")
			}
			return nil
		})
	}
	for pid, start := range o.Plugins {
		if start != "" && leftovers.ProcStart(pid) == start {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
