package cluster_test

// The scenarios' pods and claims: ResourceClaimTemplates in the contract's
// shape (nri-plugin/README.md, "A claim"), and pods whose container can
// run the C test programs on the simulated driver through the shim the
// claim brings.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/kube"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// Where a pod's container finds the test programs and their libraries.
const (
	gsBin = "/gs/bin"
	gsLib = "/gs/lib"
	gsSim = "/gs/sim"
	// multiarchLib is the host's glibc on a multiarch layout.
	multiarchLib = "/usr/lib/x86_64-linux-gnu"
)

// vgpu is one claim's request.
type vgpu struct {
	memory string // a quantity: "10Gi"
	cores  int
	// cel are more selectors (a card's UUID); the mode's is always there.
	cel []string
}

func (v vgpu) mode() string {
	if v.cores > 0 {
		return "compute"
	}
	return "memory"
}

// template creates a ResourceClaimTemplate of one vGPU in ns.
func template(t testing.TB, c *kube.Cluster, ns, name string, v vgpu) {
	t.Helper()
	sel := []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes['%s'].mode in ['unused', '%s']", driverName, v.mode())}}}
	for _, e := range v.cel {
		sel = append(sel, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
	}
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{
			Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpu",
				Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: driverName,
					AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
					Count:           1,
					Selectors:       sel,
					Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]apiresource.Quantity{
						"memory": apiresource.MustParse(v.memory),
						"cores":  *apiresource.NewQuantity(int64(v.cores), apiresource.DecimalSI),
					}},
				},
			}}},
		}},
	}
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Client().ResourceV1().ResourceClaimTemplates(ns).Create(cx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceClaimTemplate %s/%s: %v", ns, name, err)
	}
}

// gpuPod is a pod whose container "main" idles with the claim of the
// template (none: no claim) and can run build/bin's programs on the
// simulated driver: the host's build/bin and build/lib, its glibc (the
// image is a static busybox) and the simulator's shared state are mounted
// read-only but for the state.
func (n *node) gpuPod(name, template string) *corev1.Pod {
	pod := kube.BusyboxPod(name)
	hostPath := func(vol, path string) corev1.Volume {
		return corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(corev1.HostPathDirectory)}}}
	}
	pod.Spec.Volumes = []corev1.Volume{
		hostPath("gs-bin", testenv.Build()+"/bin"),
		hostPath("gs-lib", testenv.Lib()),
		hostPath("gs-sim", n.simDir),
		hostPath("ld", "/lib64"),
	}
	ctr := &pod.Spec.Containers[0]
	ctr.VolumeMounts = []corev1.VolumeMount{
		{Name: "gs-bin", MountPath: gsBin, ReadOnly: true},
		{Name: "gs-lib", MountPath: gsLib, ReadOnly: true},
		{Name: "gs-sim", MountPath: gsSim},
		{Name: "ld", MountPath: "/lib64", ReadOnly: true},
	}
	// A multiarch host (Debian, Ubuntu) keeps glibc there; elsewhere it
	// is in /lib64, mounted above.
	if st, err := os.Stat(multiarchLib); err == nil && st.IsDir() {
		pod.Spec.Volumes = append(pod.Spec.Volumes, hostPath("glibc", multiarchLib))
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "glibc", MountPath: "/lib/x86_64-linux-gnu", ReadOnly: true})
	}
	ctr.Env = []corev1.EnvVar{
		{Name: "LD_LIBRARY_PATH", Value: gsLib},
		{Name: "SIMCUDA_STATE", Value: gsSim + "/state"},
		{Name: "SIMCUDA_DEVICES", Value: "2"},
		{Name: "SIMCUDA_MEM_MIB", Value: fmt.Sprintf("%d,%d", cardMiB, cardMiB)},
		// CUDA shows the cards whose device nodes the container holds.
		{Name: "SIMCUDA_DEVICE_NODES", Value: "/dev"},
	}
	if template != "" {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}}
		ctr.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
	return pod
}

// run creates the pod and waits until it runs.
func (n *node) run(t *testing.T, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := n.c.CreatePod(ns, pod); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	p, err := n.c.WaitPodRunning(ns, pod.Name)
	if err != nil {
		t.Fatalf("pod %s: %v\nagent log:\n%s", pod.Name, err, n.agentLog())
	}
	return p
}

// gstest runs build/bin/gstest in the pod's container (kubectl exec, so
// with the container's environment: the claim's variables and the shim)
// and returns its key=value lines.
func (n *node) gstest(ns, pod string, args ...string) (map[string]string, error) {
	out, err := n.c.Exec(ns, pod, "main", append([]string{gsBin + "/gstest"}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("gstest %s in %s/%s: %v\n%s", strings.Join(args, " "), ns, pod, err, out)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			kv[k] = v
		}
	}
	return kv, nil
}

// env is the container's environment as its processes see it.
func (n *node) env(ns, pod string) (map[string]string, error) {
	out, err := n.c.Exec(ns, pod, "main", "env")
	if err != nil {
		return nil, err
	}
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
		}
	}
	return kv, nil
}

// checkVGPU checks what the pod's container sees: the cap and the quota in
// its environment, CUDA's total memory the cap, and the shim letting the
// simulated driver allocate exactly what is left of the cap and not a unit
// more (gstest cap alloc exits non-zero otherwise).
func (n *node) checkVGPU(t *testing.T, ns, pod string, memMiB, cores int) {
	t.Helper()
	env, err := n.env(ns, pod)
	if err != nil {
		t.Errorf("%s: env: %v", pod, err)
		return
	}
	for k, want := range map[string]string{
		"GPU_CONTAINER_MEM":           strconv.Itoa(memMiB),
		"GPU_CONTAINER_QUOTA_PERCENT": strconv.Itoa(cores),
		"GPUSLICE_ENFORCE":            "file",
		"LD_PRELOAD":                  "/usr/local/gpuslice/libgpuslice.so",
	} {
		if env[k] != want {
			t.Errorf("%s: %s=%q in the container; want %q", pod, k, env[k], want)
		}
	}
	if env["GPUSLICE_CLAIM"] == "" {
		t.Errorf("%s: no GPUSLICE_CLAIM in the container: not a claim's vGPU", pod)
	}
	kv, err := n.gstest(ns, pod, "meminfo")
	if err != nil {
		t.Errorf("%s: %v", pod, err)
		return
	}
	if want := strconv.Itoa(memMiB * mib); kv["devices"] != "1" || kv["cuda.total"] != want {
		t.Errorf("%s: %s CUDA devices, cuMemGetInfo total %s in the container; want 1 device, the cap %s",
			pod, kv["devices"], kv["cuda.total"], want)
	}
	if _, err := n.gstest(ns, pod, "cap", "alloc"); err != nil {
		t.Errorf("%s: the cap does not hold in the container: %v", pod, err)
	}
}
