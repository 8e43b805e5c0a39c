package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Plugin is an external NRI plugin process an Env started. The Env stops
// it in its teardown, after the pods and before containerd.
type Plugin struct {
	env     *Env
	cmd     *exec.Cmd
	logPath string
	mark    int64 // containerd's log length when the plugin started

	done    chan struct{} // closed when the process has exited
	waitErr error
	stop    sync.Mutex
}

// StartPlugin starts binary with args as an external NRI plugin of the
// Env. It is the plugin's business to dial NRISocket(): pass it in args
// (the env's socket is also in the plugin's environment as SocketEnv).
// Its output goes to a log file (Log). Wait for its registration with
// WaitReady before creating containers it must see. It fails the test when
// the binary does not start.
func (e *Env) StartPlugin(binary string, args ...string) *Plugin {
	e.t.Helper()
	n := e.next()
	p := &Plugin{
		env:     e,
		logPath: filepath.Join(e.dir, "plugins", fmt.Sprintf("%s-%d.log", filepath.Base(binary), n)),
		done:    make(chan struct{}),
	}
	f, err := os.Create(p.logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = append(os.Environ(), SocketEnv+"="+e.NRISocket())
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.mark = e.LogMark()
	if err := p.cmd.Start(); err != nil {
		e.t.Fatalf("e2e: starting NRI plugin %s: %v", binary, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	e.mu.Lock()
	e.plugins = append(e.plugins, p)
	e.mu.Unlock()
	if err := e.writeOwner(); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// WaitReady waits until containerd has registered and synchronized this
// process as the NRI plugin name ("NN-name") after it started: from then on
// the plugin sees every container created. It fails early when the
// process exits.
func (p *Plugin) WaitReady(name string) error {
	want := `plugin "` + name + `" connected and synchronized`
	deadline := time.Now().Add(readyTimeout)
	for {
		if _, err := p.env.WaitLog(p.mark, 0, want); err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("NRI plugin %s exited before registering: %v\nplugin log:\n%s\n%s",
				name, p.waitErr, Tail(p.Log(), 40), p.env.Logs())
		default:
		}
		if p.env.isExited() {
			return fmt.Errorf("containerd exited (%v) before NRI plugin %s registered\n%s",
				p.env.waitErr, name, p.env.Logs())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("NRI plugin %s not registered in %s\nplugin log:\n%s\n%s",
				name, readyTimeout, Tail(p.Log(), 40), p.env.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pid is the plugin's process ID.
func (p *Plugin) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the plugin process has exited.
func (p *Plugin) Done() <-chan struct{} { return p.done }

// Log is everything the plugin wrote to stdout and stderr so far.
func (p *Plugin) Log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no plugin log: " + err.Error() + ")"
	}
	return string(b)
}

// Stop ends the plugin with SIGTERM, or SIGKILL when it is still there
// after a grace period, and waits for it. It does nothing once the plugin
// has exited.
func (p *Plugin) Stop() error {
	return p.signal(syscall.SIGTERM)
}

// Kill ends the plugin with SIGKILL (a crash, as containerd sees it) and
// waits for it.
func (p *Plugin) Kill() error {
	return p.signal(syscall.SIGKILL)
}

func (p *Plugin) signal(sig syscall.Signal) error {
	p.stop.Lock()
	defer p.stop.Unlock()
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		if sig == syscall.SIGKILL {
			return nil
		}
		return fmt.Errorf("NRI plugin %d ignored %v for %s and was killed", p.Pid(), sig, stopTimeout)
	case <-time.After(stopTimeout):
		return fmt.Errorf("NRI plugin %d does not die", p.Pid())
	}
}
