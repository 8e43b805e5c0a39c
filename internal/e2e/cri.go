package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Crictl runs crictl against the Env's containerd and returns its stdout;
// a failure's error carries crictl's stderr (a plugin's rejection message,
// for one), with its escaped quotes (\") unescaped, so a message reads as
// the plugin wrote it.
func (e *Env) Crictl(args ...string) (string, error) {
	full := append([]string{"--config", e.crictlCfg,
		"--runtime-endpoint", "unix://" + e.Address(),
		"--image-endpoint", "unix://" + e.Address(),
		"--timeout", "120s"}, args...)
	return e.run(crictlTimeout, filepath.Join(e.bin, "crictl"), full...)
}

// next is a number unique within the Env, for file and pod names.
func (e *Env) next() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	return e.seq
}

// writeJSON writes v as indented JSON to a new file under dir.
func (e *Env) writeJSON(dir, name string, v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(e.dir, dir, name)
	return p, os.WriteFile(p, b, 0o644)
}

// RunPod runs a pod sandbox on the host's network (no CNI) under the Env's
// cgroup parent, with the given annotations (NRI plugins see them through
// the pod, not through its containers), and returns its ID. The pod config
// is written under Dir()/pods, and every pod gets a fresh log directory
// under Dir()/logs.
func (e *Env) RunPod(name string, annotations map[string]string) (string, error) {
	n := e.next()
	logDir := filepath.Join(e.dir, "logs", fmt.Sprintf("%s-%d", name, n))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return "", err
	}
	cfg := map[string]any{
		"metadata": map[string]any{
			"name":      name,
			"namespace": "default",
			"uid":       fmt.Sprintf("%s-%s-%d", e.id, name, n),
			"attempt":   0,
		},
		"log_directory": logDir,
		"annotations":   orEmpty(annotations),
		"labels":        map[string]string{"gpuslice-e2e": e.id},
		"linux": map[string]any{
			"cgroup_parent": e.cgroup,
			"security_context": map[string]any{
				// NODE: the host's network, so no CNI is needed.
				"namespace_options": map[string]any{"network": 2},
			},
		},
	}
	path, err := e.writeJSON("pods", fmt.Sprintf("%s-%d.json", name, n), cfg)
	if err != nil {
		return "", err
	}
	out, err := e.Crictl("runp", path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(out)
	e.mu.Lock()
	e.pods[id] = path
	e.mu.Unlock()
	return id, nil
}

// CreateContainer creates (does not start) a container of the Env's image
// in a pod RunPod made, with the given annotations, command (nil: the
// image's /pause, which idles) and environment, and returns its ID. When
// containerd or an NRI plugin refuses it, the error carries crictl's
// message, plugin's words included.
func (e *Env) CreateContainer(podID, name string, annotations map[string]string, cmd []string, env map[string]string) (string, error) {
	e.mu.Lock()
	podCfg, ok := e.pods[podID]
	e.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("pod %s was not made by this Env's RunPod", podID)
	}
	n := e.next()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	envs := make([]map[string]string, 0, len(env))
	for _, k := range keys {
		envs = append(envs, map[string]string{"key": k, "value": env[k]})
	}
	cfg := map[string]any{
		"metadata":    map[string]any{"name": name},
		"image":       map[string]any{"image": Image},
		"envs":        envs,
		"annotations": orEmpty(annotations),
		"labels":      map[string]string{"gpuslice-e2e": e.id},
		"log_path":    fmt.Sprintf("%s-%d.log", name, n),
		"linux":       map[string]any{},
	}
	if len(cmd) > 0 {
		cfg["command"] = cmd
	}
	path, err := e.writeJSON("containers", fmt.Sprintf("%s-%d.json", name, n), cfg)
	if err != nil {
		return "", err
	}
	out, err := e.Crictl("create", "--no-pull", podID, path, podCfg)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// StartContainer starts a container CreateContainer made.
func (e *Env) StartContainer(ctrID string) error {
	_, err := e.Crictl("start", ctrID)
	return err
}

// Exec runs a command in a running container (CRI ExecSync) and returns
// its stdout; a non-zero exit is an error that carries stderr.
func (e *Env) Exec(ctrID string, cmd ...string) (string, error) {
	return e.Crictl(append([]string{"exec", "--sync", "--timeout", "120", ctrID}, cmd...)...)
}

// RemovePod stops and removes a pod and its containers.
func (e *Env) RemovePod(podID string) error {
	if _, err := e.Crictl("stopp", podID); err != nil {
		return err
	}
	if _, err := e.Crictl("rmp", podID); err != nil {
		return err
	}
	e.mu.Lock()
	delete(e.pods, podID)
	e.mu.Unlock()
	return nil
}

// orEmpty is m, or an empty map for nil (crictl wants an object).
func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
