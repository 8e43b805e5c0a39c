package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/kube"
)

const (
	gpuMem  = "volcano.sh/gpu-mem.128Mi"
	gpuCore = "volcano.sh/gpu-core.percentage"
)

// withVolcano gives the pod's first container the reference's resources:
// gpu-mem mem128 (units of 128 MiB) and gpu-core cores, each left out
// when negative.
func withVolcano(pod *corev1.Pod, mem128, cores int) *corev1.Pod {
	limits := corev1.ResourceList{}
	if mem128 >= 0 {
		limits[gpuMem] = *apiresource.NewQuantity(int64(mem128), apiresource.DecimalSI)
	}
	if cores >= 0 {
		limits[gpuCore] = *apiresource.NewQuantity(int64(cores), apiresource.DecimalSI)
	}
	pod.Spec.Containers[0].Resources.Limits = limits
	return pod
}

// referencePod is a busybox pod in the reference's form.
func referencePod(name string, mem128, cores int) *corev1.Pod {
	return withVolcano(kube.BusyboxPod(name), mem128, cores)
}

// withGPUs gives the pod's first container nvidia.com/gpu of f.
func withGPUs(pod *corev1.Pod, f string) *corev1.Pod {
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": apiresource.MustParse(f)}
	return pod
}

// checkTranslated checks that the admitted pod's container asks for its
// vGPU by a claim and no longer by the reference's resources.
func checkTranslated(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	ctr := pod.Spec.Containers[0]
	for _, l := range []corev1.ResourceList{ctr.Resources.Limits, ctr.Resources.Requests} {
		for k := range l {
			if k == gpuMem || k == gpuCore || k == "nvidia.com/gpu" {
				t.Errorf("%s: %s is still in the admitted pod", pod.Name, k)
			}
		}
	}
	if len(pod.Spec.ResourceClaims) != 1 || len(ctr.Resources.Claims) != 1 ||
		pod.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil {
		t.Errorf("%s: the admitted pod's claims %+v, its container's %+v; want one claim of a template",
			pod.Name, pod.Spec.ResourceClaims, ctr.Resources.Claims)
	}
}

// A pod written for the reference product runs unchanged: gpu-mem 32 and
// gpu-core 30 is a vGPU of 4096 MiB and 30 %; nvidia.com/gpu 0.5 half a
// 16 GiB card's memory, memory isolation only.
func TestReferenceForm(t *testing.T) {
	w := theWebhook(t)
	n := theNode(t)
	ns := n.c.Namespace(t)
	w.registered(t, ns)
	for _, c := range []struct {
		pod          *corev1.Pod
		memMiB, pcnt int
		mode         string
	}{
		{withVolcano(n.gpuPod("volcano", ""), 32, 30), 4096, 30, "compute"},
		{withGPUs(n.gpuPod("half", ""), "0.5"), 8192, 0, "memory"},
	} {
		admitted, err := n.c.CreatePod(ns, c.pod)
		if err != nil {
			t.Fatalf("creating %s: %v\nwebhook log:\n%s", c.pod.Name, err, w.logText())
		}
		checkTranslated(t, admitted)
		if _, err := n.c.WaitPodRunning(ns, c.pod.Name); err != nil {
			t.Fatalf("%v\nagent log:\n%s", err, n.agentLog())
		}
		v := n.waitVGPUs(t, ns, c.pod.Name, 1)[0]
		checkCap(t, c.pod.Name, v, c.memMiB, c.pcnt)
		if v.Mode != c.mode {
			t.Errorf("%s: a %s vGPU; want %s", c.pod.Name, v.Mode, c.mode)
		}
		n.checkVGPU(t, ns, c.pod.Name, c.memMiB, c.pcnt)
	}
}

// refusal is a pod the API server must refuse, and the message it must
// give with the webhook up and with it down (the policies alone).
type refusal struct {
	name     string
	pod      func() *corev1.Pod
	up, down string
}

func refusals() []refusal {
	initPod := func() *corev1.Pod {
		p := referencePod("init", 8, -1)
		setup := p.Spec.Containers[0]
		setup.Name = "setup"
		p.Spec.InitContainers = []corev1.Container{setup}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		return p
	}
	both := func() *corev1.Pod {
		p := referencePod("both", 32, 30)
		p.Annotations = map[string]string{"gpuslice.io/gpu-memory": "4Gi"}
		return p
	}
	const initMsg = `init container "setup": resource volcano.sh/gpu-mem.128Mi: init containers may not request vGPU resources`
	const coresOnly = `container "main": resource volcano.sh/gpu-core.percentage=30 without volcano.sh/gpu-mem.128Mi: compute is given only with memory`
	const cores33 = `container "main": resource volcano.sh/gpu-core.percentage=33: want 0-100 in steps of 5`
	const mem0 = `container "main": resource volcano.sh/gpu-mem.128Mi=0: want 1-16384 (units of 128 MiB: 128Mi to 2Ti)`
	const bothMsg = `container "main": resource volcano.sh/gpu-mem.128Mi with annotation gpuslice.io/gpu-memory: a pod asks for vGPUs by gpuslice.io/gpu-* annotations or by resources, not both`
	return []refusal{
		{"an init container with gpu-mem", initPod, initMsg, initMsg},
		{"cores without memory", func() *corev1.Pod { return referencePod("cores-only", -1, 30) }, coresOnly, coresOnly},
		{"cores 33", func() *corev1.Pod { return referencePod("cores-33", 32, 33) }, cores33, cores33},
		{"gpu-mem 0", func() *corev1.Pod { return referencePod("mem-0", 0, -1) }, mem0, mem0},
		{"annotations and resources", both, bothMsg, bothMsg},
		{"a fraction under 128 MiB", func() *corev1.Pod { return withGPUs(kube.BusyboxPod("tiny"), "0.005") },
			`container "main": resource nvidia.com/gpu=0.005: 0.005 of a 16Gi card is under 128 MiB`,
			`must be an integer`},
		// Valid, but nothing may admit it untranslated.
		{"the reference's form", func() *corev1.Pod { return referencePod("reference", 32, 30) }, "",
			`container "main": resource volcano.sh/gpu-mem.128Mi was not translated into a gpu.gpuslice.io claim: the gpuslice admission webhook did not handle this pod (is it running?)`},
		{"half a card", func() *corev1.Pod { return withGPUs(kube.BusyboxPod("half"), "0.5") }, "", `must be an integer`},
	}
}

// apply runs kubectl apply on the pod.
func apply(c *kube.Cluster, ns string, pod *corev1.Pod) error {
	pod = pod.DeepCopy()
	pod.APIVersion, pod.Kind, pod.Namespace = "v1", "Pod", ns
	b, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	_, err = c.Apply(string(b))
	return err
}

// What is wrong is refused by kubectl apply with a message naming the
// container, the field and the allowed values: by the webhook, and with it
// stopped by the policies, which also refuse what only the webhook could
// have translated. Nothing is admitted either way.
func TestAdmissionRefusals(t *testing.T) {
	w := theWebhook(t)
	n := theNode(t)
	ns := n.c.Namespace(t)
	w.registered(t, ns)
	check := func(t *testing.T, r refusal, want, by string) {
		err := apply(n.c, ns, r.pod())
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: refused: %v", r.name, err)
		case want != "" && err == nil:
			t.Errorf("%s: admitted; want refused with %q", r.name, want)
		case want != "" && !strings.Contains(err.Error(), want):
			t.Errorf("%s: refused with\n%v\nwant %q", r.name, err, want)
		case want != "" && by != "" && !strings.Contains(err.Error(), by) && !strings.Contains(want, "integer"):
			t.Errorf("%s: refused, but not by %s: %v", r.name, by, err)
		}
		// Nothing stays of a refused pod; an admitted one goes.
		_ = n.c.Client().CoreV1().Pods(ns).Delete(context.Background(), r.pod().Name, metav1.DeleteOptions{})
	}
	t.Run("webhook up", func(t *testing.T) {
		for _, r := range refusals() {
			check(t, r, r.up, `admission webhook "vgpu.gpuslice.io" denied the request`)
		}
	})
	w.stop()
	t.Run("webhook down", func(t *testing.T) {
		for _, r := range refusals() {
			check(t, r, r.down, "ValidatingAdmissionPolicy 'gpuslice-vgpu-resources'")
		}
	})
}

// A claim written by hand whose parameters the driver could not use is
// refused at the API server, with the field and what is allowed.
func TestClaimRefusals(t *testing.T) {
	theWebhook(t) // the policies
	n := theNode(t)
	ns := n.c.Namespace(t)
	claim := func(capacity, params string) string {
		return fmt.Sprintf(`apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: hand, namespace: %s}
spec:
  devices:
    requests:
    - name: vgpu
      exactly:
        deviceClassName: gpu.gpuslice.io
        capacity: {requests: {%s}}
    config:
    - requests: [vgpu]
      opaque:
        driver: gpu.gpuslice.io
        parameters: {apiVersion: gpu.gpuslice.io/v1alpha1, kind: VGPUConfig%s}
`, ns, capacity, params)
	}
	for _, c := range []struct{ name, manifest, want string }{
		{"a bad priority", claim("memory: 4Gi, cores: '30'", ", priority: urgent"),
			`spec.devices.config[0].opaque.parameters.priority: want low or high`},
		{"an unknown field", claim("memory: 4Gi", ", quota: 30"), `unknown field "quota"`},
		{"cores 33", claim("memory: 4Gi, cores: '33'", ""),
			`spec.devices.requests "vgpu": capacity.requests.cores=33: want 0-100 in steps of 5`},
		{"memory not whole MiB", claim("memory: 1536Ki", ""),
			`spec.devices.requests "vgpu": capacity.requests.memory=1536Ki: want whole MiB from 1Mi to 16Ti`},
	} {
		_, err := n.c.Apply(c.manifest)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: kubectl apply: %v; want refused with %q", c.name, err, c.want)
		}
	}
	if _, err := n.c.Apply(claim("memory: 4Gi, cores: '30'", ", priority: high")); err != nil {
		t.Errorf("a good claim: %v", err)
	}
}

// A pod asking both by annotations and by a claim written by hand (which
// no admission rule sees: the webhook is not called for it) is refused by
// the node agent at container creation, with the reason as an event; it
// never runs with either vGPU.
func TestBothWaysAtTheNode(t *testing.T) {
	n := theNode(t)
	ns := n.c.Namespace(t)
	template(t, n.c, ns, "four", vgpu{memory: "4Gi", cores: 30})
	pod := n.gpuPod("both", "four")
	pod.Annotations = map[string]string{"gpuslice.io/gpu-memory": "2Gi"}
	if _, err := n.c.CreatePod(ns, pod); err != nil {
		t.Fatal(err)
	}
	ev, err := n.c.WaitEvent(ns, "both", "both by", pollTimeout)
	if err != nil {
		t.Fatalf("%v\nagent log:\n%s", err, n.agentLog())
	}
	t.Logf("refused: %s: %s", ev.Reason, ev.Message)
	p, err := n.c.Client().CoreV1().Pods(ns).Get(context.Background(), "both", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting == nil || s.RestartCount != 0 || s.LastTerminationState.Terminated != nil {
			t.Errorf("container %s of the pod asking both ways: %+v; want it never created", s.Name, s)
		}
	}
}
