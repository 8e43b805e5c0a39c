package kube

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// KubectlPath is the kubectl binary (v1.37.2).
func (c *Cluster) KubectlPath() string { return filepath.Join(c.bin, "kubectl") }

// Kubectl runs kubectl with the admin kubeconfig and returns its stdout;
// a failure's error carries its stderr (the API server's refusal, an
// admission webhook's or policy's message).
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.kubectl(nil, args...)
}

// Apply runs kubectl apply -f - on the manifest (YAML, several documents
// allowed) and returns its output; a refusal's error carries the
// message.
func (c *Cluster) Apply(manifest string) (string, error) {
	return c.kubectl(strings.NewReader(manifest), "apply", "-f", "-")
}

func (c *Cluster) kubectl(stdin *strings.Reader, args ...string) (string, error) {
	cx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(cx, c.KubectlPath(), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Env = c.componentEnv()
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err,
			strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
