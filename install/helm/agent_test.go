package chart

import (
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/config"
)

// one returns the only object of kind and name, decoded into T.
func one[T any](t *testing.T, objs []object, kind, name string) *T {
	t.Helper()
	var found []object
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s %s rendered, want 1", len(found), kind, name)
	}
	v := new(T)
	if err := yaml.UnmarshalStrict(found[0].doc, v); err != nil {
		t.Fatalf("%s: %v", found[0], err)
	}
	return v
}

// agentConfig renders the chart and reads its agent's config.yaml as the
// agent does.
func agentConfig(t *testing.T, args ...string) config.Config {
	t.Helper()
	cm := one[corev1.ConfigMap](t, mustTemplate(t, args...), "ConfigMap", release+"-config")
	c, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the agent refuses config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the agent refuses config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}
	return c
}

// The chart's defaults are the agent's own, but for the DRA driver, which
// a DaemonSet's agent is (dra: on, so that one that cannot start is seen).
func TestAgentConfigDefaults(t *testing.T) {
	got := agentConfig(t)
	want := config.Default()
	want.DRA = config.DRAOn
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the chart's config.yaml reads as\n%+v\nwant the agent's defaults\n%+v", got, want)
	}
}

// Every key of the agent's configuration reaches config.yaml: testdata
// sets each away from its default, and each arrives so.
func TestAgentConfigEveryKey(t *testing.T) {
	got := reflect.ValueOf(agentConfig(t, "-f", "testdata/every-key.yaml"))
	def := reflect.ValueOf(config.Default())
	for i, f := range reflect.VisibleFields(got.Type()) {
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if key == "" || key == "-" {
			continue
		}
		if reflect.DeepEqual(got.Field(i).Interface(), def.Field(i).Interface()) {
			t.Errorf("%s: %v, the default: testdata/every-key.yaml's value did not reach config.yaml", key, got.Field(i))
		}
	}
}

// Every key install/config.yaml names (commented ones too, as
// simulatedCards) is a value of the chart's config block.
func TestInstallConfigKeysReachable(t *testing.T) {
	b, err := os.ReadFile(path.Join(testenv.Root(), "install", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	props := loadSchema(t).Properties["config"].Properties
	keys := regexp.MustCompile(`(?m)^(?:# )?([a-zA-Z]+):`).FindAllSubmatch(b, -1)
	if len(keys) < 20 {
		t.Fatalf("found only %d keys in install/config.yaml", len(keys))
	}
	for _, k := range keys {
		if props[string(k[1])] == nil {
			t.Errorf("install/config.yaml's %s is not a key of the chart's config block", k[1])
		}
	}
}

// The agent's pod keeps the pod contract (spec15's, install/image's): every
// path of its configuration mounted from the host at the same path, once;
// the shim's directory writable for the init container only; one agent
// per node at a time; the node's name and the NRI socket given.
func TestAgentPod(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"every key", []string{"-f", "testdata/every-key.yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := mustTemplate(t, c.args...)
			ds := one[appsv1.DaemonSet](t, objs, "DaemonSet", release+"-agent")
			cfg := agentConfig(t, c.args...)
			var values struct {
				NRI struct{ Socket string } `json:"nri"`
			}
			values.NRI.Socket = "/var/run/nri/nri.sock"
			if len(c.args) > 0 {
				b, err := os.ReadFile(c.args[1])
				if err != nil {
					t.Fatal(err)
				}
				if err := yaml.Unmarshal(b, &values); err != nil {
					t.Fatal(err)
				}
			}
			checkAgentPod(t, &ds.Spec, cfg, values.NRI.Socket)
		})
	}
}

func checkAgentPod(t *testing.T, ds *appsv1.DaemonSetSpec, cfg config.Config, nriSocket string) {
	t.Helper()
	pod := ds.Template.Spec
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 1 {
		t.Fatalf("%d containers and %d init containers, want 1 and 1", len(pod.Containers), len(pod.InitContainers))
	}
	agent, init := pod.Containers[0], pod.InitContainers[0]
	hostPaths := map[string]string{} // volume: host path
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]bool{} // path: read-only
	for _, m := range agent.VolumeMounts {
		if _, dup := mounted[m.MountPath]; dup {
			t.Errorf("%s mounted twice", m.MountPath)
		}
		mounted[m.MountPath] = m.ReadOnly
		if hp, ok := hostPaths[m.Name]; ok && hp != m.MountPath {
			t.Errorf("volume %s: host path %s mounted at %s, want the same path", m.Name, hp, m.MountPath)
		}
	}
	dev := path.Join(cfg.DeviceRoot, "dev")
	want := map[string]bool{ // path: read-only
		cfg.StateDir: false, cfg.LedgerDir: false, cfg.SchedDir: false, dev: false,
		path.Join(cfg.KubeletRootDir, "plugins"): false, path.Join(cfg.KubeletRootDir, "plugins_registry"): false,
		cfg.DRACDIDir: false, path.Dir(nriSocket): false, path.Dir(cfg.Shim): true, "/etc/gpuslice": true,
	}
	if cfg.StatusSocket != "" {
		want[path.Dir(cfg.StatusSocket)] = false
	}
	for _, d := range cfg.CDISpecDirs {
		if _, rw := want[d]; !rw {
			want[d] = true
		}
	}
	for p, ro := range want {
		if got, ok := mounted[p]; !ok || got != ro {
			t.Errorf("%s: mounted %v read-only %v, want mounted read-only %v", p, ok, got, ro)
		}
	}
	shimDir := path.Dir(cfg.Shim)
	if len(init.VolumeMounts) != 1 || init.VolumeMounts[0].MountPath != shimDir || init.VolumeMounts[0].ReadOnly {
		t.Errorf("init container mounts %+v, want only %s read-write", init.VolumeMounts, shimDir)
	}
	if want := []string{"/usr/bin/gpuslice", "install-shim", "/usr/share/gpuslice/libgpuslice.so", cfg.Shim}; !slices.Equal(init.Command, want) {
		t.Errorf("init container command %q, want %q", init.Command, want)
	}
	if !slices.Contains(agent.Args, "-nri-socket="+nriSocket) {
		t.Errorf("agent args %q, want -nri-socket=%s", agent.Args, nriSocket)
	}
	if i := slices.IndexFunc(agent.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" }); i < 0 ||
		agent.Env[i].ValueFrom == nil || agent.Env[i].ValueFrom.FieldRef == nil || agent.Env[i].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("agent env %+v, want NODE_NAME from spec.nodeName", agent.Env)
	}
	if sc := agent.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged || !pod.HostPID || !pod.HostNetwork {
		t.Errorf("agent: privileged %v, hostPID %v, hostNetwork %v; want all", sc, pod.HostPID, pod.HostNetwork)
	}
	if ru := ds.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		t.Errorf("updateStrategy %+v, want maxSurge 0: two agents on a node would share its state", ds.UpdateStrategy)
	}
	if agent.LivenessProbe != nil {
		t.Error("agent has a liveness probe: restarting it lets containers be created unisolated meanwhile")
	}
	if (agent.ReadinessProbe != nil) != (cfg.StatusSocket != "") {
		t.Errorf("readiness probe %v with statusSocket %q", agent.ReadinessProbe, cfg.StatusSocket)
	}
}
