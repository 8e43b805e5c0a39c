package kube

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

var tools struct {
	once sync.Once
	bin  string
	err  error
}

// Tools runs nri-plugin/e2e/kube-tools.sh once per test process and returns
// the directory of etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kubectl; the CNI plugins are in the
// directory "cni" beside it.
func Tools() (string, error) {
	tools.once.Do(func() {
		tools.bin, tools.err = buildTools()
	})
	return tools.bin, tools.err
}

// buildTools runs the script and checks the directory it printed.
func buildTools() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), toolsTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.Root(), "nri-plugin", "e2e", "kube-tools.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("nri-plugin/e2e/kube-tools.sh failed: %v\n%s", err, tail(stderr.String(), 60))
	}
	bin := strings.TrimSpace(stdout.String())
	for _, p := range []string{filepath.Join(bin, "kubelet"), filepath.Join(bin, "..", "cni", "bridge")} {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			return bin, fmt.Errorf("nri-plugin/e2e/kube-tools.sh printed %q, which has no %s", bin, p)
		}
	}
	return bin, nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
