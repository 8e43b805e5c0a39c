package install_test

// The workloads: a pod with a vGPU claim of a ResourceClaimTemplate, and
// a pod in the reference's form (volcano.sh/gpu-mem.128Mi and
// gpu-core.percentage) that the chart's webhook turns into a claim. Their
// container is the e2e busybox with the host's build/bin (gstest) and
// build/lib (the simulated driver) mounted, so a check runs CUDA through
// the shim the claim brings.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/gpuslice/gpuslice/internal/kube"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// workload is one pod and the vGPU it must get.
type workload struct {
	name   string
	memMiB int
	cores  int
	// resources are the container's limits (the reference's form); ""
	// gives it the claim of the template "vgpu" instead.
	resources string
}

// The pods, in the release's workload namespace.
var workloads = []workload{
	{name: "claim", memMiB: 4096, cores: 30},
	{name: "volcano", memMiB: 2048, cores: 20,
		resources: `{limits: {volcano.sh/gpu-mem.128Mi: "16", volcano.sh/gpu-core.percentage: "20"}}`},
}

// claimTemplate is the template the claim pod uses: 4 GiB and 30 %.
const claimTemplate = `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: vgpu, namespace: {{.NS}}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.gpuslice.io
          selectors:
          - cel: {expression: "device.attributes['gpu.gpuslice.io'].mode in ['unused', 'compute']"}
          capacity: {requests: {memory: 4Gi, cores: "30"}}
`

const podTemplate = `apiVersion: v1
kind: Pod
metadata: {name: {{.W.Name}}, namespace: {{.NS}}}
spec:
  terminationGracePeriodSeconds: 1
  {{- if not .W.Resources}}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: vgpu}]
  {{- end}}
  containers:
  - name: main
    image: {{.Busybox}}
    imagePullPolicy: Never
    {{- if .W.Resources}}
    resources: {{.W.Resources}}
    {{- else}}
    resources: {claims: [{name: gpu}]}
    {{- end}}
    env:
    - {name: LD_LIBRARY_PATH, value: /gs/lib}
    - {name: SIMCUDA_STATE, value: /gs/sim/state}
    - {name: SIMCUDA_DEVICES, value: "2"}
    - {name: SIMCUDA_MEM_MIB, value: "{{.CardMiB}},{{.CardMiB}}"}
    - {name: SIMCUDA_DEVICE_NODES, value: /dev}
    volumeMounts:
    {{- range .Mounts}}
    - {name: {{.Name}}, mountPath: {{.In}}, readOnly: {{.RO}}}
    {{- end}}
  volumes:
  {{- range .Mounts}}
  - {name: {{.Name}}, hostPath: {path: {{.Host}}, type: Directory}}
  {{- end}}
`

// mount is a host directory of the workload pods.
type mount struct {
	Name, Host, In string
	RO             bool
}

// manifest renders text with the workload namespace ns and w.
func manifest(text, ns string, w workload, simDir string) (string, error) {
	mounts := []mount{
		{"gs-bin", testenv.Build() + "/bin", "/gs/bin", true},
		{"gs-lib", testenv.Lib(), "/gs/lib", true},
		{"gs-sim", simDir, "/gs/sim", false},
		{"ld", "/lib64", "/lib64", true},
	}
	// The busybox image has no glibc: a multiarch host keeps it here.
	if st, err := os.Stat("/usr/lib/x86_64-linux-gnu"); err == nil && st.IsDir() {
		mounts = append(mounts, mount{"glibc", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", true})
	}
	var b bytes.Buffer
	err := template.Must(template.New("").Parse(text)).Execute(&b, map[string]any{
		"NS": ns, "Busybox": kube.Image, "CardMiB": cardMiB, "Mounts": mounts,
		"W": map[string]any{"Name": w.name, "Resources": w.resources},
	})
	return b.String(), err
}

// start applies the workloads' manifests and waits until they run.
func startWorkloads(t *testing.T, c *kube.Cluster, ns, simDir string) {
	t.Helper()
	tmpl, err := manifest(claimTemplate, ns, workload{}, simDir)
	if err == nil {
		_, err = c.Apply(tmpl)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workloads {
		m, err := manifest(podTemplate, ns, w, simDir)
		if err != nil {
			t.Fatal(err)
		}
		if err := applyAdmitted(c, m); err != nil {
			t.Fatalf("creating %s: %v", w.name, err)
		}
	}
	for _, w := range workloads {
		if _, err := c.WaitPodRunning(ns, w.name); err != nil {
			t.Fatal(err)
		}
	}
}

// applyAdmitted applies the manifest, again while the policies refuse
// the reference's form untranslated because the webhook was not called:
// its Service's endpoints may lag its Ready pod (a minute at most).
func applyAdmitted(c *kube.Cluster, manifest string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.Apply(manifest)
		if err == nil || !strings.Contains(err.Error(), "webhook did not handle") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

// checkCaps checks each workload's vGPU as the agent reports it (the
// status command run in the agent's pod) and as its container sees it:
// the cap and quota in its environment, CUDA's total memory the cap, and
// the shim letting the simulated driver allocate exactly the cap and not
// a unit more (gstest cap alloc fails otherwise).
func checkCaps(t *testing.T, c *kube.Cluster, ns string) {
	t.Helper()
	// The status is the agent's last sample (one a second): a vGPU
	// prepared since appears at the next.
	var vgpus map[string]status.VGPU
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		vgpus, err = agentVGPUs(c)
		if err == nil && len(vgpus) >= len(workloads) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workloads {
		v, ok := vgpus[ns+"/"+w.name]
		if !ok || v.MemoryCapBytes != uint64(w.memMiB)<<20 || v.QuotaPercent != w.cores || v.Claim == "" {
			t.Errorf("%s's vGPU as the agent reports it: %+v (found %v); want a claim's, %d MiB, %d %%",
				w.name, v, ok, w.memMiB, w.cores)
		}
		env, err := c.Exec(ns, w.name, "main", "env")
		if err != nil {
			t.Errorf("%s: env: %v", w.name, err)
			continue
		}
		for k, want := range map[string]string{
			"GPU_CONTAINER_MEM":           strconv.Itoa(w.memMiB),
			"GPU_CONTAINER_QUOTA_PERCENT": strconv.Itoa(w.cores),
			"GPUSLICE_ENFORCE":            "file",
			"LD_PRELOAD":                  "/usr/local/gpuslice/libgpuslice.so",
		} {
			if !strings.Contains("\n"+env, "\n"+k+"="+want+"\n") {
				t.Errorf("%s: no %s=%s in the container's environment", w.name, k, want)
			}
		}
		out, err := c.Exec(ns, w.name, "main", "/gs/bin/gstest", "meminfo")
		kv := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
				kv[k] = v
			}
		}
		if want := strconv.Itoa(w.memMiB << 20); err != nil || kv["devices"] != "1" || kv["cuda.total"] != want {
			t.Errorf("%s: gstest meminfo: %v\n%s\nwant devices=1, cuda.total=%s (the cap)", w.name, err, out, want)
		}
		if out, err := c.Exec(ns, w.name, "main", "/gs/bin/gstest", "cap", "alloc"); err != nil {
			t.Errorf("%s: the cap does not hold: %v\n%s", w.name, err, out)
		}
	}
}

// checkMetrics checks that the agent's /metrics, served on the node's
// network from its pod, has each workload's cap as xgpu_memory_total
// (polled: a new agent has the series from its first sample on).
func checkMetrics(t *testing.T, url, ns string) {
	t.Helper()
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing = missingCaps(url, ns)
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, m := range missing {
		t.Error(m)
	}
}

// missingCaps says what the metrics lack of the workloads' caps.
func missingCaps(url, ns string) []string {
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return []string{fmt.Sprintf("the agent's metrics: %v", err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return []string{fmt.Sprintf("the agent's metrics: %v", err)}
	}
	var missing []string
	for _, w := range workloads {
		found := ""
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "xgpu_memory_total{") && strings.Contains(l, `namespace="`+ns+`"`) &&
				strings.Contains(l, `pod="`+w.name+`"`) {
				found = l
			}
		}
		f := strings.Fields(found)
		v, err := 0.0, error(nil)
		if len(f) > 0 {
			v, err = strconv.ParseFloat(f[len(f)-1], 64)
		}
		if found == "" || err != nil || v != float64(w.memMiB<<20) {
			missing = append(missing, fmt.Sprintf("%s: xgpu_memory_total %q in the agent's metrics at %s; want %d",
				w.name, found, url, w.memMiB<<20))
		}
	}
	return missing
}

// agentVGPUs runs `gpuslice status --json` in the agent's pod and returns
// its vGPUs by namespace/pod.
func agentVGPUs(c *kube.Cluster) (map[string]status.VGPU, error) {
	out, err := c.Kubectl("exec", "-n", releaseNS, "ds/"+releaseName+"-agent", "-c", "agent", "--",
		"/usr/bin/gpuslice", "status", "--json")
	if err != nil {
		return nil, err
	}
	var node status.Node
	if err := json.Unmarshal([]byte(out), &node); err != nil {
		return nil, fmt.Errorf("gpuslice status --json: %v\n%s", err, out)
	}
	vgpus := map[string]status.VGPU{}
	for _, card := range node.Cards {
		for _, v := range card.VGPUs {
			vgpus[v.Namespace+"/"+v.Pod] = v
		}
	}
	return vgpus, nil
}
