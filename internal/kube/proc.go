package kube

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/e2e"
)

// proc is one running component (etcd, kube-apiserver, ..., kubelet).
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error
	// stopping is set (under the cluster's mu) when the cluster ends the
	// process itself: its exit is no failure.
	stopping bool
}

// componentEnv is the environment of the components: the test's, without
// proxy settings (the API server would send webhook calls to the node's
// address through a proxy), with the Kubernetes tools first on PATH.
func (c *Cluster) componentEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "PATH":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+c.bin+":"+os.Getenv("PATH"))
}

// startProc starts the component name (the binary of that name in the
// tools directory) with args, appending its output to logs/<name>.log
// after a line that says when it started, and records it in the owner
// file.
func (c *Cluster) startProc(name string, args ...string) (*proc, error) {
	p := &proc{name: name, logPath: filepath.Join(c.dir, "logs", name+".log"), done: make(chan struct{})}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== gpuslice kube: %s started at %s: %s\n", name,
		time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	p.cmd = exec.Command(filepath.Join(c.bin, name), args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = c.componentEnv()
	p.cmd.Dir = c.dir
	// Its own process group: a ^C reaches the test, which stops the
	// components in order.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = p.cmd.Start()
	logf.Close()
	if err != nil {
		return nil, fmt.Errorf("kube: starting %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return p, c.writeOwner()
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGTERM, and after a grace period a second
// SIGTERM (the API server may need it), then SIGKILL; it waits for it.
func (p *proc) stop() error {
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM, syscall.SIGKILL} {
		if p.exited() {
			return nil
		}
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
			if i == 2 {
				return fmt.Errorf("kube: %s ignored SIGTERM twice and was killed", p.name)
			}
			return nil
		case <-time.After(stopTimeout):
		}
	}
	return fmt.Errorf("kube: %s (pid %d) does not die", p.name, p.cmd.Process.Pid)
}

// Logs is the last lines of a component's log ("etcd", "kube-apiserver",
// "kube-controller-manager", "kube-scheduler", "kubelet"), for failure
// messages.
func (c *Cluster) Logs(component string, lines int) string {
	path := filepath.Join(c.dir, "logs", component+".log")
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no " + component + " log: " + err.Error() + ")"
	}
	return component + " log (" + path + "), last lines:\n" + e2e.Tail(string(b), lines)
}

// LogPath is the path of a component's log.
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.dir, "logs", component+".log")
}
