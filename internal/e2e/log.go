package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Logs is the tail of containerd's log, for failure messages.
func (e *Env) Logs() string {
	b, err := os.ReadFile(e.logPath)
	if err != nil {
		return "(no containerd log: " + err.Error() + ")"
	}
	return "containerd log (" + e.logPath + "), last lines:\n" + Tail(string(b), 60)
}

// LogMark is the current length of containerd's log, for WaitLog.
func (e *Env) LogMark() int64 {
	fi, err := os.Stat(e.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// WaitLog waits until containerd's log, from byte offset since on, has a
// line containing every one of parts, and returns that line. containerd
// quotes its messages (msg="plugin \"10-x\" ..."): the escaped quotes are
// plain quotes for the match.
func (e *Env) WaitLog(since int64, timeout time.Duration, parts ...string) (string, error) {
	var found string
	err := e.poll(timeout, func() error {
		line, err := findLine(e.logPath, since, parts)
		found = line
		return err
	})
	return found, err
}

// findLine is the first line of the file at path, from byte offset since
// on, that contains every one of parts once its escaped quotes are
// unescaped.
func findLine(path string, since int64, parts []string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Seek(since, io.SeekStart); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
lines:
	for sc.Scan() {
		line := strings.ReplaceAll(sc.Text(), `\"`, `"`)
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue lines
			}
		}
		return line, nil
	}
	return "", fmt.Errorf("no log line with %q", parts)
}

// WaitPluginReady waits until containerd has registered and synchronized
// the NRI plugin name ("NN-name"), which from then on sees every container
// created: a pre-registered plugin at start-up, or an external one.
func (e *Env) WaitPluginReady(name string) error {
	err := e.poll(readyTimeout, func() error {
		if _, err := e.WaitLog(0, 0, `pre-installed NRI plugin "`+name+`" synchronization success`); err == nil {
			return nil
		}
		_, err := e.WaitLog(0, 0, `plugin "`+name+`" connected and synchronized`)
		return err
	})
	if err != nil {
		return fmt.Errorf("NRI plugin %s not ready in %s: %v\n%s", name, readyTimeout, err, e.Logs())
	}
	return nil
}

// Tail is the last n lines of s, for failure messages.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
