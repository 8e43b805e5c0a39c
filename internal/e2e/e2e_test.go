package e2e_test

// These tests prove the harness itself: containerd runs pods and busybox
// containers through CRI, Exec sees a container's environment, and NRI
// plugins are really called, external (StartPlugin) and pre-registered
// (Options.PreRegistered), including a plugin's refusal reaching crictl.
// The plugin is internal/e2e/envplugin. They need root; GPUSLICE_SKIP_E2E=1
// is the only way to skip them.

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/e2e"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// buildPlugin builds internal/e2e/envplugin into a temporary directory
// under the given file name.
func buildPlugin(t *testing.T, name string) string {
	t.Helper()
	e2e.Require(t) // skip (or fail) before building anything
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "./internal/e2e/envplugin")
	cmd.Dir = testenv.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the test NRI plugin: %v\n%s", err, out)
	}
	return bin
}

// runSleeper runs a pod with the given annotations and a started busybox
// container that sleeps, with env, and returns the container's ID.
func runSleeper(t *testing.T, e *e2e.Env, pod string, annotations, env map[string]string) string {
	t.Helper()
	podID, err := e.RunPod(pod, annotations)
	if err != nil {
		t.Fatalf("RunPod %s: %v\n%s", pod, err, e.Logs())
	}
	ctr, err := e.CreateContainer(podID, "sleeper", nil, []string{"sleep", "3600"}, env)
	if err != nil {
		t.Fatalf("CreateContainer in %s: %v\n%s", pod, err, e.Logs())
	}
	if err := e.StartContainer(ctr); err != nil {
		t.Fatalf("StartContainer in %s: %v\n%s", pod, err, e.Logs())
	}
	return ctr
}

// envOf is a container's environment, by Exec of env.
func envOf(t *testing.T, e *e2e.Env, ctr string) map[string]string {
	t.Helper()
	out, err := e.Exec(ctr, "env")
	if err != nil {
		t.Fatalf("Exec env: %v\n%s", err, e.Logs())
	}
	vars := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			vars[k] = v
		}
	}
	return vars
}

func TestPodAndExec(t *testing.T) {
	e := e2e.Start(t, e2e.Options{})
	ctr := runSleeper(t, e, "plain", nil, map[string]string{"E2E_HELLO": "hello world"})

	vars := envOf(t, e, ctr)
	if vars["E2E_HELLO"] != "hello world" {
		t.Errorf("E2E_HELLO = %q in the container, want %q; env:\n%v", vars["E2E_HELLO"], "hello world", vars)
	}
	if _, ok := vars["E2E_NRI"]; ok {
		t.Errorf("E2E_NRI is set without any NRI plugin: %v", vars)
	}

	// Arguments reach the command untouched (flags included), and the
	// container lives under the Env's cgroup parent.
	out, err := e.Exec(ctr, "cat", "-n", "/proc/self/cgroup")
	if err != nil {
		t.Fatalf("Exec cat: %v", err)
	}
	if !strings.Contains(out, e.CgroupParent()+"/") || !strings.Contains(out, "1\t") {
		t.Errorf("cat -n /proc/self/cgroup in the container:\n%s\nwant numbered lines naming %s", out, e.CgroupParent())
	}

	// A failing command is an error with its stderr.
	_, err = e.Exec(ctr, "sh", "-c", "echo no-such-thing >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "no-such-thing") {
		t.Errorf("Exec of a failing command: err = %v, want its stderr", err)
	}
}

func TestExternalPlugin(t *testing.T) {
	bin := buildPlugin(t, "envplugin")
	e := e2e.Start(t, e2e.Options{})
	p := e.StartPlugin(bin, "-socket", e.NRISocket(), "-idx", "10", "-name", "envplugin")
	if err := p.WaitReady("10-envplugin"); err != nil {
		t.Fatal(err)
	}

	ctr := runSleeper(t, e, "adjusted", nil, nil)
	vars := envOf(t, e, ctr)
	if vars["E2E_NRI"] != "1" || vars["E2E_NRI_PLUGIN"] != "10-envplugin" {
		t.Errorf("the plugin's environment is not in the container: E2E_NRI=%q E2E_NRI_PLUGIN=%q",
			vars["E2E_NRI"], vars["E2E_NRI_PLUGIN"])
	}

	// A pod annotation the plugin refuses: crictl create fails with the
	// plugin's words.
	podID, err := e.RunPod("rejected", map[string]string{"e2e/reject": "no vGPU left on this node"})
	if err != nil {
		t.Fatalf("RunPod: %v\n%s", err, e.Logs())
	}
	_, err = e.CreateContainer(podID, "refused", nil, []string{"sleep", "3600"}, nil)
	if err == nil {
		t.Fatal("CreateContainer in a pod annotated e2e/reject succeeded; want the plugin's refusal")
	}
	for _, want := range []string{`envplugin rejects container "refused"`, "no vGPU left on this node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CreateContainer error lacks %q:\n%v", want, err)
		}
	}
	if err := e.RemovePod(podID); err != nil {
		t.Errorf("RemovePod: %v", err)
	}

	// Once the plugin is gone (containerd notices the closed connection),
	// containers are no longer adjusted.
	mark := e.LogMark()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitLog(mark, time.Minute, `plugin "10-envplugin"`, "closed"); err != nil {
		t.Fatalf("containerd did not notice the plugin's exit: %v\n%s", err, e.Logs())
	}
	ctr = runSleeper(t, e, "after", nil, nil)
	if v, ok := envOf(t, e, ctr)["E2E_NRI"]; ok {
		t.Errorf("E2E_NRI=%q in a container created after the plugin stopped", v)
	}
}

func TestPreRegisteredPlugin(t *testing.T) {
	bin := buildPlugin(t, "envplugin")
	e := e2e.Start(t, e2e.Options{PreRegistered: map[string]string{"10-envplugin": bin}})
	if err := e.WaitPluginReady("10-envplugin"); err != nil {
		t.Fatal(err)
	}
	ctr := runSleeper(t, e, "adjusted", nil, nil)
	vars := envOf(t, e, ctr)
	if vars["E2E_NRI"] != "1" || vars["E2E_NRI_PLUGIN"] != "10-envplugin" {
		t.Errorf("the pre-registered plugin's environment is not in the container: E2E_NRI=%q E2E_NRI_PLUGIN=%q\n%s",
			vars["E2E_NRI"], vars["E2E_NRI_PLUGIN"], e.Logs())
	}

	podID, err := e.RunPod("rejected", map[string]string{"e2e/reject": "refused at start-up"})
	if err != nil {
		t.Fatalf("RunPod: %v\n%s", err, e.Logs())
	}
	_, err = e.CreateContainer(podID, "refused", nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "refused at start-up") {
		t.Errorf("CreateContainer in a pod annotated e2e/reject: err = %v, want the plugin's refusal", err)
	}
}
