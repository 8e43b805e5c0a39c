package e2e_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/e2e"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/quota"
)

// Pre-registered, containerd starts the agent from its NRI plugin
// directory with no arguments and hands it the configuration of its NRI
// drop-in (<plugin_config_path>/50-gpuslice-nri.conf): it serves as the
// external plugin does.
func TestPreRegistered(t *testing.T) {
	e2e.Require(t)
	bin := agentBinary(t)
	dir := t.TempDir()
	devRoot := filepath.Join(dir, "devroot")
	makeDevRoot(t, devRoot)
	conf := fmt.Sprintf(`enforcement: file
guard: optional
cdi: never
metricsAddress: ""
statusSocket: %s
deviceRoot: %s
shim: %s
shimMountPath: %s
stateDir: %s
ledgerDir: %s
schedDir: %s
simulatedCards: [{index: 0, memoryMiB: 16384}]
`, filepath.Join(dir, "agent.sock"), devRoot, testenv.Shim(), shimMount, filepath.Join(dir, "state"), filepath.Join(dir, "ledger"),
		filepath.Join(dir, "sched"))
	env := e2e.Start(t, e2e.Options{
		PreRegistered: map[string]string{"50-gpuslice-nri": bin},
		PluginConfigs: map[string]string{"50-gpuslice-nri.conf": conf},
	})
	if err := env.WaitPluginReady("50-gpuslice-nri"); err != nil {
		t.Fatalf("%v\n%s", err, env.Logs())
	}
	pod, err := env.RunPod("prereg", map[string]string{quota.KeyMemory: "2Gi"})
	if err != nil {
		t.Fatalf("RunPod: %v\n%s", err, env.Logs())
	}
	ctr, err := env.CreateContainer(pod, "app", nil, nil, nil)
	if err != nil {
		t.Fatalf("CreateContainer: %v\n%s", err, env.Logs())
	}
	if err := env.StartContainer(ctr); err != nil {
		t.Fatalf("StartContainer: %v\n%s", err, env.Logs())
	}
	out, err := env.Exec(ctr, "env")
	if err != nil {
		t.Fatalf("exec env: %v", err)
	}
	for _, want := range []string{"GPU_IDX=0", "GPU_CONTAINER_MEM=2048", "GPUSLICE_ENFORCE=file", "LD_PRELOAD=" + shimMount} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("the container's environment lacks %s:\n%s", want, out)
		}
	}
	_, err = env.CreateContainer(pod, "refused", map[string]string{quota.KeyCores: "33"}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `gpuslice.io/gpu-cores="33"`) {
		t.Errorf("a bad annotation: err = %v, want the agent's refusal", err)
	}
}
