package install_test

// The release: helm install, upgrade and uninstall of the chart as an
// operator runs them, with the values that put the agent on the test's
// node: the image imported (never pulled), the node containerd's NRI
// socket, the kubelet's root directory and CDI directory, scratch host
// paths, two simulated cards and the no-module enforcement.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/kube"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

const (
	releaseName = "gpuslice"
	releaseNS   = "gpuslice-system"
	// imageRepo is the image's name in the node's containerd; tags
	// tagOld and tagNew are two builds (the second with a label more).
	imageRepo = "localhost/gpuslice/gpuslice"
	tagOld    = "1"
	tagNew    = "2"
	// instanceLabel is on every object the chart creates.
	instanceLabel = "app.kubernetes.io/instance=" + releaseName
	cardMiB       = 16384
	// helmTimeout bounds helm's --wait (the pods Ready) and the command.
	helmTimeout = 3 * time.Minute
)

// release is the chart installed on the cluster under releaseName.
type release struct {
	c      *kube.Cluster
	helm   string
	env    []string // HELM_*_HOME in the test's directory
	values string   // the values file
	host   hostPaths
	// metrics is the agent's /metrics on the node (the pod has the
	// host's network).
	metrics string
}

// hostPaths are the agent's host paths, scratch directories of the test.
type hostPaths struct {
	dir, devRoot, shim, state, run, socket string
}

func newHostPaths(dir string) hostPaths {
	return hostPaths{dir: dir,
		devRoot: filepath.Join(dir, "devroot"),
		shim:    filepath.Join(dir, "lib", "libgpuslice.so"),
		state:   filepath.Join(dir, "state"),
		run:     filepath.Join(dir, "run"),
		socket:  filepath.Join(dir, "run", "agent.sock"),
	}
}

// writeValues writes the release's values for the node.
func (r *release) writeValues(path string) error {
	u, err := url.Parse(r.c.Server())
	if err != nil {
		return err
	}
	_, p, err := net.SplitHostPort(u.Host)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return err
	}
	metricsPort, err := kube.FreePorts("127.0.0.1", 1)
	if err != nil {
		return err
	}
	r.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort[0])
	h := r.host
	values := map[string]any{
		"image": map[string]any{"repository": imageRepo, "tag": tagOld, "pullPolicy": "Never"},
		// No kube-proxy routes the kubernetes Service here.
		"apiServer": map[string]any{"host": r.c.NodeIP(), "port": port},
		"nri":       map[string]any{"socket": r.c.Containerd().NRISocket()},
		"metrics":   map[string]any{"port": metricsPort[0]},
		"webhook":   map[string]any{"replicas": 1},
		"config": map[string]any{
			"enforcement": "file",
			"guard":       "optional", // no module, no BPF LSM here
			"cdi":         "never",
			"cdiSpecDirs": []string{},
			"simulatedCards": []map[string]int{
				{"index": 0, "memoryMiB": cardMiB}, {"index": 1, "memoryMiB": cardMiB}},
			"deviceRoot":     h.devRoot,
			"shim":           h.shim,
			"stateDir":       h.state,
			"ledgerDir":      filepath.Join(h.run, "ledger"),
			"schedDir":       filepath.Join(h.run, "sched"),
			"statusSocket":   h.socket,
			"kubeletRootDir": r.c.KubeletRootDir(),
			"draCDIDir":      r.c.CDIDir(),
		},
	}
	b, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	r.values = path
	return os.WriteFile(path, b, 0o644)
}

// chart is the chart's directory in the clone.
func chart() string { return filepath.Join(testenv.Root(), "install", "helm", "gpuslice") }

// run runs helm against the cluster and returns its output.
func (r *release) run(args ...string) (string, error) {
	cx, cancel := context.WithTimeout(context.Background(), helmTimeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cx, r.helm, append(args, "--kubeconfig", r.c.Kubeconfig())...)
	cmd.Env = append(os.Environ(), r.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// install runs helm install with the image of tag, waiting for the pods.
func (r *release) install(tag string) error {
	_, err := r.run("install", releaseName, chart(), "-n", releaseNS, "--create-namespace",
		"-f", r.values, "--set-string", "image.tag="+tag, "--wait", "--timeout", helmTimeout.String())
	return err
}

// upgrade runs helm upgrade to the image of tag, the values kept.
func (r *release) upgrade(tag string) error {
	_, err := r.run("upgrade", releaseName, chart(), "-n", releaseNS,
		"-f", r.values, "--set-string", "image.tag="+tag, "--wait", "--timeout", helmTimeout.String())
	return err
}

// uninstall runs helm uninstall, waiting for what it deletes to go.
func (r *release) uninstall() error {
	_, err := r.run("uninstall", releaseName, "-n", releaseNS, "--wait", "--timeout", helmTimeout.String())
	return err
}

// objects are the release's objects as helm records them (helm get
// manifest), as kubectl names them: kind/name.
func (r *release) objects() ([]string, error) {
	out, err := r.run("get", "manifest", releaseName, "-n", releaseNS)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, doc := range strings.Split(out, "\n---") {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return nil, fmt.Errorf("helm get manifest: %v\n%s", err, doc)
		}
		if o.Kind == "" {
			continue
		}
		if o.Metadata.Namespace != "" && o.Metadata.Namespace != releaseNS {
			return nil, fmt.Errorf("helm get manifest: %s/%s in namespace %s, not the release's", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
		names = append(names, o.Kind+"/"+o.Metadata.Name)
	}
	return names, nil
}

// existing are those of the objects (kind/name, in the release's
// namespace when namespaced) that exist, and the release's own records
// (helm's Secrets).
func existing(c *kube.Cluster, objects []string) ([]string, error) {
	out, err := c.Kubectl(append([]string{"get", "-n", releaseNS, "--ignore-not-found", "-o", "name"}, objects...)...)
	if err != nil {
		return nil, err
	}
	records, err := c.Kubectl("get", "secrets", "-n", releaseNS, "-l", "owner=helm,name="+releaseName, "-o", "name")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out + records), nil
}

// labelled lists every object of every listable kind, in all namespaces
// and cluster-wide, that carries the release's instance label.
func labelled(c *kube.Cluster) ([]string, error) {
	kinds, err := c.Kubectl("api-resources", "--verbs=list", "-o", "name")
	if err != nil {
		return nil, err
	}
	var list []string
	for _, k := range strings.Fields(kinds) {
		// Events carry no labels of the objects they are about.
		if k != "events" && k != "events.events.k8s.io" {
			list = append(list, k)
		}
	}
	out, err := c.Kubectl("get", strings.Join(list, ","), "-A", "-l", instanceLabel, "-o", "name",
		"--ignore-not-found")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}
