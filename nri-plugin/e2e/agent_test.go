package e2e_test

// End-to-end tests of the node agent (./nri-plugin) as a real external NRI
// plugin of a real containerd, runc and crictl (internal/e2e), in no-module
// (file) enforcement on simulated cards: what a vGPU container gets, the
// refusals, max_inst, and an agent restart with its reconcile. They need
// root; GPUSLICE_SKIP_E2E=1 is the only way to skip them.

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/quota"
)

const gib = 1 << 30

// perContainer is the pod annotation of key for container name only.
func perContainer(key, name string) string { return key + quota.ContainerSuffix + name }

// checkEnv checks that vars has every variable of want (value "" : unset).
func checkEnv(t *testing.T, what string, vars, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := vars[k]
		switch {
		case v == "" && ok:
			t.Errorf("%s: %s=%q is set; want it unset", what, k, got)
		case v != "" && got != v:
			t.Errorf("%s: %s=%q; want %q", what, k, got, v)
		}
	}
}

// A vGPU container gets its card, the control nodes, the xGPU variables,
// the shim read-only and its ledger directory; per-container annotations
// win over the pod's; a container that asks for nothing is untouched; the
// ledger directory goes with the container.
func TestVGPUContainer(t *testing.T) {
	n := startNode(t, nodeConfig{simulate: "0:16384,1:16384"})
	pod := n.runPod("vgpu", map[string]string{
		quota.KeyMemory: "4Gi",
		quota.KeyCores:  "30",
		// "big" overrides the memory and adds a pin and a priority.
		perContainer(quota.KeyMemory, "big"):   "6Gi",
		perContainer(quota.KeyIndex, "big"):    "1",
		perContainer(quota.KeyPriority, "big"): "high",
	})
	app := n.run(pod, "app", nil)
	big := n.run(pod, "big", map[string]string{"LD_PRELOAD": "/opt/other.so"})

	// The environment.
	checkEnv(t, "app", n.envOf(app), map[string]string{
		"GPU_IDX":                     "0",
		"GPU_CONTAINER_MEM":           "4096",
		"GPU_CONTAINER_QUOTA_PERCENT": "30",
		"GPU_POLICY":                  "1",
		"GPU_CONTAINER_PRIORITY":      "0",
		"GPUSLICE_ENFORCE":            "file",
		"GPUSLICE_LEDGER_DIR":         ledgerMount,
		"LD_PRELOAD":                  shimMount,
		"CUDA_DEVICE_ORDER":           "PCI_BUS_ID",
	})
	checkEnv(t, "big (per-container annotations)", n.envOf(big), map[string]string{
		"GPU_IDX":                     "1",
		"GPU_CONTAINER_MEM":           "6144",
		"GPU_CONTAINER_QUOTA_PERCENT": "30",
		"GPU_POLICY":                  "1",
		"GPU_CONTAINER_PRIORITY":      "1",
		"GPUSLICE_ENFORCE":            "file",
		// The image's own preload is kept, after the shim.
		"LD_PRELOAD": shimMount + ":/opt/other.so",
	})

	// The devices: the chosen card's node (the host node's numbers) and
	// the control nodes, as character devices; not the other card.
	chr := func(path string) string { return "character special file " + n.hostDev[path] }
	for _, c := range []struct {
		ctr, name, card string
	}{{app, "app", "/dev/nvidia0"}, {big, "big", "/dev/nvidia1"}} {
		want := map[string]string{c.card: chr(c.card)}
		for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
			want[p] = chr(p)
		}
		if got := n.nvidiaNodes(c.ctr); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: /dev/nvidia* in the container:\n%v\nwant\n%v", c.name, got, want)
		}
	}

	// The shim: the real one, mounted read-only.
	mounts := n.mountsOf(app)
	if opts, ok := mounts[shimMount]; !ok || !slices.Contains(opts, "ro") {
		t.Errorf("app: the shim at %s: mounted %v (options %v); want a read-only mount", shimMount, ok, opts)
	}
	if _, err := n.env.Exec(app, "sh", "-c", "echo overwritten >> "+shimMount); err == nil {
		t.Errorf("app: writing to %s succeeded; want a read-only file", shimMount)
	}
	b, err := os.ReadFile(testenv.Shim())
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(b)
	if out := n.exec(app, "md5sum", shimMount); !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
		t.Errorf("app: md5sum %s in the container: %q; want the host shim's %x", shimMount, out, sum)
	}

	// The ledger directory: the container's own, writable, on the host
	// under the ledger root by container ID.
	if opts, ok := mounts[ledgerMount]; !ok || !slices.Contains(opts, "rw") {
		t.Errorf("app: the ledger directory at %s: mounted %v (options %v); want a read-write mount", ledgerMount, ok, opts)
	}
	n.exec(app, "sh", "-c", "echo probe > "+ledgerMount+"/probe")
	if got, err := os.ReadFile(filepath.Join(n.ledgerDir, app, "probe")); err != nil || string(got) != "probe\n" {
		t.Errorf("app: a file written to %s is not in the host's %s: %q, %v",
			ledgerMount, filepath.Join(n.ledgerDir, app), got, err)
	}

	// The state file.
	all := n.allocations()
	al, ok := all[app]
	switch {
	case !ok:
		t.Errorf("the state file does not list app %s: %v", short(app), all)
	case al.Name != "app" || al.Pod != "vgpu" || al.Enforce != agent.EnforceFile ||
		al.LedgerDir != filepath.Join(n.ledgerDir, app) || len(al.VGPUs) != 1 ||
		al.VGPUs[0].Card != 0 || al.VGPUs[0].MemoryBytes != 4*gib || al.VGPUs[0].Cores != 30:
		t.Errorf("app's allocation in the state file: %+v", al)
	}
	if c := n.cardsOf(big); !reflect.DeepEqual(c, []int{1}) {
		t.Errorf("big's cards in the state file: %v; want [1]", c)
	}

	// A container asking for nothing is left alone.
	plainPod := n.runPod("plain", nil)
	plain := n.run(plainPod, "plain", nil)
	checkEnv(t, "plain", n.envOf(plain), map[string]string{
		"GPU_IDX": "", "GPU_CONTAINER_MEM": "", "GPUSLICE_ENFORCE": "", "LD_PRELOAD": "",
	})
	if got := n.nvidiaNodes(plain); len(got) != 0 {
		t.Errorf("plain: /dev/nvidia* in a container without annotations: %v", got)
	}
	pm := n.mountsOf(plain)
	for _, m := range []string{shimMount, ledgerMount} {
		if _, ok := pm[m]; ok {
			t.Errorf("plain: %s is mounted in a container without annotations", m)
		}
	}
	if _, ok := n.allocations()[plain]; ok {
		t.Errorf("the state file lists the plain container")
	}
	if got, want := n.ledgerEntries(), sortedIDs(app, big); !reflect.DeepEqual(got, want) {
		t.Errorf("the ledger root holds %v; want %v (app, big)", got, want)
	}

	// Removing the pod releases its containers.
	n.removePod(pod)
	n.waitReleased(app, big)
	if got := n.ledgerEntries(); len(got) != 0 {
		t.Errorf("the ledger root holds %v after the pod's removal", got)
	}
}

func sortedIDs(ids ...string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}

// A request the agent cannot honour fails the container's creation with a
// message naming the annotation and its value, and leaves nothing behind.
func TestRefusals(t *testing.T) {
	n := startNode(t, nodeConfig{simulate: "0:16384,1:16384"})
	for _, c := range []struct {
		name        string
		annotations map[string]string
		want        []string // in the error
	}{
		{"cores not a step of 5", map[string]string{quota.KeyMemory: "4Gi", quota.KeyCores: "33"},
			[]string{quota.KeyCores, `"33"`}},
		{"memory over the card", map[string]string{quota.KeyMemory: "20Gi"},
			[]string{quota.KeyMemory, `"20Gi"`, "16384 MiB"}},
		{"per-container memory over the card", map[string]string{quota.KeyMemory: "4Gi",
			perContainer(quota.KeyMemory, "refused"): "17Gi"},
			[]string{perContainer(quota.KeyMemory, "refused"), `"17Gi"`}},
		{"unknown key", map[string]string{quota.KeyMemory: "4Gi", "gpuslice.io/gpu-memroy": "4Gi"},
			[]string{"gpuslice.io/gpu-memroy", "unknown"}},
		{"cores without memory", map[string]string{quota.KeyCores: "30"},
			[]string{quota.KeyCores, quota.KeyMemory}},
	} {
		pod := n.runPod("refusal", c.annotations)
		_, err := n.env.CreateContainer(pod, "refused", nil, nil, nil)
		errContains(t, c.name, err, append([]string{"gpuslice"}, c.want...)...)
		if out, err := n.env.Crictl("ps", "-a", "-q", "--pod", pod); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("%s: containers of the pod after the refusal: %q, %v; want none", c.name, out, err)
		}
		if all := n.allocations(); len(all) != 0 {
			t.Errorf("%s: the state file lists %v after the refusal", c.name, all)
		}
		if got := n.ledgerEntries(); len(got) != 0 {
			t.Errorf("%s: the ledger root holds %v after the refusal", c.name, got)
		}
	}
	if t.Failed() {
		t.Log(n.diag())
	}

	// The agent still places what fits: a whole card.
	pod := n.runPod("fits", map[string]string{quota.KeyMemory: "16Gi"})
	ctr := n.create(pod, "whole", nil)
	if c := n.cardsOf(ctr); !reflect.DeepEqual(c, []int{0}) {
		t.Errorf("a 16Gi container on cards %v; want [0]", c)
	}
}

// A card holds max_inst vGPUs: the next is refused, naming max_inst, until
// one goes.
func TestMaxInst(t *testing.T) {
	const maxInst = 20
	n := startNode(t, nodeConfig{simulate: "0:16384", args: []string{"-max-inst", fmt.Sprint(maxInst)}})
	pod := n.runPod("many", map[string]string{quota.KeyMemory: "512Mi"})
	var ctrs []string
	for i := 1; i <= maxInst; i++ {
		ctrs = append(ctrs, n.create(pod, fmt.Sprintf("c%02d", i), nil))
	}
	// A few of them run, with their share.
	for _, i := range []int{0, maxInst - 1} {
		if err := n.env.StartContainer(ctrs[i]); err != nil {
			t.Fatalf("StartContainer c%02d: %v\n%s", i+1, err, n.diag())
		}
		checkEnv(t, fmt.Sprintf("c%02d", i+1), n.envOf(ctrs[i]), map[string]string{
			"GPU_IDX": "0", "GPU_CONTAINER_MEM": "512", "GPU_CONTAINER_QUOTA_PERCENT": "0",
		})
	}
	if all := n.allocations(); len(all) != maxInst {
		t.Errorf("the state file lists %d allocations; want %d", len(all), maxInst)
	}

	_, err := n.env.CreateContainer(pod, "c21", nil, nil, nil)
	errContains(t, "the 21st vGPU on the card", err, quota.KeyMemory, fmt.Sprintf("max_inst %d", maxInst))
	if err != nil {
		t.Logf("the 21st vGPU's refusal: %v", err)
	}
	if all := n.allocations(); len(all) != maxInst {
		t.Errorf("the state file lists %d allocations after the refusal; want %d", len(all), maxInst)
	}

	// Removing one container makes room for one more.
	if _, err := n.env.Crictl("rm", ctrs[4]); err != nil {
		t.Fatalf("crictl rm c05: %v\n%s", err, n.diag())
	}
	n.waitReleased(ctrs[4])
	late := n.create(pod, "late", nil)
	if c := n.cardsOf(late); !reflect.DeepEqual(c, []int{0}) {
		t.Errorf("the container created after a removal: cards %v; want [0]", c)
	}
}

// An agent killed and restarted with the same state keeps the allocations
// of the containers that are still there and releases those removed while
// it was down.
func TestAgentRestart(t *testing.T) {
	n := startNode(t, nodeConfig{simulate: "0:16384,1:16384", args: []string{"-placement", "binpack"}})
	// Card 0 full: three 4Gi in one pod (two running, one only created)
	// and one 4Gi in another.
	kept := n.runPod("kept", map[string]string{quota.KeyMemory: "4Gi"})
	a1 := n.run(kept, "a1", nil)
	a2 := n.create(kept, "a2", nil)
	a3 := n.run(kept, "a3", nil)
	gone := n.runPod("gone", map[string]string{quota.KeyMemory: "4Gi"})
	b1 := n.run(gone, "b1", nil)
	for name, id := range map[string]string{"a1": a1, "a2": a2, "a3": a3, "b1": b1} {
		if c := n.cardsOf(id); !reflect.DeepEqual(c, []int{0}) {
			t.Fatalf("%s on cards %v before the restart; want [0] (binpack)\n%s", name, c, n.diag())
		}
	}
	n.exec(a1, "sh", "-c", "echo before > "+ledgerMount+"/probe")
	before := n.allocations()

	// The agent dies; the pod "gone" goes while it is away.
	n.killAgent()
	n.removePod(gone)
	if _, ok := n.allocations()[b1]; !ok {
		t.Fatalf("the state file lost b1 while the agent was dead; nothing should touch it")
	}
	n.startAgent()

	// The reconcile released b1, and only b1.
	n.waitReleased(b1)
	after := n.allocations()
	for name, id := range map[string]string{"a1": a1, "a2": a2, "a3": a3} {
		if !reflect.DeepEqual(after[id], before[id]) {
			t.Errorf("%s's allocation changed across the restart:\nbefore %+v\nafter  %+v", name, before[id], after[id])
		}
		if _, err := os.Stat(filepath.Join(n.ledgerDir, id)); err != nil {
			t.Errorf("%s's ledger directory after the restart: %v", name, err)
		}
	}
	if len(after) != 3 {
		t.Errorf("the state file lists %d allocations after the restart; want 3 (a1-a3): %v", len(after), after)
	}
	if got := strings.TrimSpace(n.exec(a1, "cat", ledgerMount+"/probe")); got != "before" {
		t.Errorf("a1's ledger file after the restart: %q; want %q", got, "before")
	}
	checkEnv(t, "a1 after the restart", n.envOf(a1), map[string]string{"GPU_IDX": "0", "GPU_CONTAINER_MEM": "4096"})

	// New placements account for what is kept: card 0 has 12Gi of 16Gi
	// (a 6Gi goes to card 1), and b1's 4Gi is free again (a 4Gi goes to
	// card 0, the fuller card that fits).
	next := n.runPod("next", map[string]string{
		perContainer(quota.KeyMemory, "six"):  "6Gi",
		perContainer(quota.KeyMemory, "four"): "4Gi",
	})
	six := n.run(next, "six", nil)
	if c := n.cardsOf(six); !reflect.DeepEqual(c, []int{1}) {
		t.Errorf("a 6Gi container after the restart: cards %v; want [1] (card 0 keeps 12Gi of a1-a3)\n%s", c, n.diag())
	}
	four := n.run(next, "four", nil)
	if c := n.cardsOf(four); !reflect.DeepEqual(c, []int{0}) {
		t.Errorf("a 4Gi container after the restart: cards %v; want [0] (b1's 4Gi released)\n%s", c, n.diag())
	}
	checkEnv(t, "four", n.envOf(four), map[string]string{"GPU_IDX": "0", "GPU_CONTAINER_MEM": "4096"})

	// With the agent up, a removal releases at once.
	n.removePod(kept)
	n.waitReleased(a1, a2, a3)
	if got, want := n.ledgerEntries(), sortedIDs(six, four); !reflect.DeepEqual(got, want) {
		t.Errorf("the ledger root holds %v; want %v (six, four)", got, want)
	}
}
