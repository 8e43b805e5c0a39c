package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// Tools runs nri-plugin/e2e/tools.sh (once per test process) and returns
// the directory of containerd, ctr, containerd-shim-runc-v2, runc and
// crictl.
func Tools() (string, error) {
	return BuildTools("tools.sh", toolsTimeout, "containerd")
}

// built are the tools scripts' results, by script: each runs once per
// test process.
var built struct {
	sync.Mutex
	runs map[string]*toolsRun
}

type toolsRun struct {
	once sync.Once
	bin  string
	err  error
}

// BuildTools runs script, a tools script of nri-plugin/e2e (tools.sh,
// kube-tools.sh), once per test process: it builds at pinned versions into
// a cache outside the clone once per machine and prints the directory of
// the binaries. BuildTools returns that directory once each of want
// (paths relative to it) is a file there; its error carries the end of
// the script's output.
func BuildTools(script string, timeout time.Duration, want ...string) (string, error) {
	built.Lock()
	if built.runs == nil {
		built.runs = map[string]*toolsRun{}
	}
	r := built.runs[script]
	if r == nil {
		r = &toolsRun{}
		built.runs[script] = r
	}
	built.Unlock()
	r.once.Do(func() { r.bin, r.err = runToolsScript(script, timeout, want) })
	return r.bin, r.err
}

// runToolsScript runs the script and checks the directory it printed.
func runToolsScript(script string, timeout time.Duration, want []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.Root(), "nri-plugin", "e2e", script))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("nri-plugin/e2e/%s failed: %v\n%s", script, err, Tail(stderr.String(), 60))
	}
	bin := strings.TrimSpace(stdout.String())
	for _, w := range want {
		if fi, err := os.Stat(filepath.Join(bin, w)); err != nil || fi.IsDir() {
			return bin, fmt.Errorf("nri-plugin/e2e/%s printed %q, which has no %s", script, bin, w)
		}
	}
	return bin, nil
}

// buildImage writes the busybox image, as Image, to the tar file image,
// with nri-plugin/e2e/image.sh.
func buildImage(image string) error {
	if out, err := exec.Command(filepath.Join(testenv.Root(), "nri-plugin", "e2e", "image.sh"),
		image, Image).CombinedOutput(); err != nil {
		return fmt.Errorf("e2e: nri-plugin/e2e/image.sh failed: %v\n%s", err, out)
	}
	return nil
}

// ImportImage imports an image tar (an OCI layout, as buildImage and
// install/image/build.sh write, or docker save's) into the namespace CRI
// uses, k8s.io, under the names its index gives: the kubelet's pods then
// run it with imagePullPolicy Never.
func (e *Env) ImportImage(image string) error {
	out, err := e.run(crictlTimeout, filepath.Join(e.bin, "ctr"), "--address", e.Address(),
		"-n", "k8s.io", "image", "import", "--platform", "linux/amd64", image)
	if err != nil {
		return fmt.Errorf("e2e: importing the image: %v\n%s\n%s", err, out, e.Logs())
	}
	return nil
}
