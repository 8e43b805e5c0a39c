package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// startContainerd starts containerd with the Env's config, its output in
// containerd.log, and records its PID in the owner file.
func (e *Env) startContainerd() error {
	logf, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(e.bin, "containerd"), "--config", e.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "PATH="+e.bin+":"+os.Getenv("PATH"))
	// Its own process group: a ^C to go test reaches the test, which tears
	// containerd down in order, rather than containerd first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("e2e: starting containerd: %v", err)
	}
	// Only a started containerd is one teardown must stop.
	e.cmd = cmd
	if err := e.writeOwner(); err != nil {
		return err
	}
	go func() {
		e.waitErr = e.cmd.Wait()
		close(e.exited)
	}()
	return nil
}

// waitUp waits until containerd is up: CRI answers and the NRI socket is
// there. Its error carries containerd's log.
func (e *Env) waitUp() error {
	ready := func() error {
		if _, err := e.Crictl("version"); err != nil {
			return err
		}
		if _, err := os.Stat(e.NRISocket()); err != nil {
			return fmt.Errorf("no NRI socket yet: %w", err)
		}
		return nil
	}
	if err := e.poll(startTimeout, ready); err != nil {
		return fmt.Errorf("e2e: containerd did not come up in %s: %v\n%s", startTimeout, err, e.Logs())
	}
	return nil
}

func (e *Env) isExited() bool {
	select {
	case <-e.exited:
		return true
	default:
		return false
	}
}

// pollFor calls f until it succeeds or timeout passes (0: once), and
// returns f's last error.
func pollFor(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// poll calls f until it succeeds, containerd exits, or timeout passes (0:
// once), and returns f's last error.
func (e *Env) poll(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if e.cmd != nil {
			select {
			case <-e.exited:
				if err := f(); err == nil { // a last look
					return nil
				}
				return fmt.Errorf("%v (containerd exited: %v)", err, e.waitErr)
			default:
			}
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run runs a command with a timeout; the error carries its stderr.
func (e *Env) run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "PATH="+e.bin+":"+os.Getenv("PATH"))
	err := cmd.Run()
	if err != nil {
		// crictl's messages quote the runtime's, which quote the plugin's:
		// unescape the quotes so a test can look for a message as written.
		msg := strings.ReplaceAll(strings.TrimSpace(stderr.String()), `\"`, `"`)
		if ctx.Err() != nil {
			msg = fmt.Sprintf("timed out after %s; %s", timeout, msg)
		}
		select {
		case <-e.exited:
			msg += fmt.Sprintf(" (containerd has exited: %v)", e.waitErr)
		default:
		}
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", filepath.Base(name),
			strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}
