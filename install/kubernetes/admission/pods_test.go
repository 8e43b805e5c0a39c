package manifests

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuslice/gpuslice/internal/celpolicy"
	gs "github.com/gpuslice/gpuslice/pkg/admission"
	"github.com/gpuslice/gpuslice/pkg/admission/admissiontest"

	"github.com/gpuslice/gpuslice/pkg/draapi"
)

const (
	mem   = gs.ResourceMemory
	cores = gs.ResourceCores
	gpu   = gs.ResourceGPU
)

// container is a container with the given limits ("NAME=VALUE").
func container(name string, limits ...string) corev1.Container {
	return admissiontest.Container(name, limits...)
}

type podSpec struct {
	containers, inits []corev1.Container
	annotations       map[string]string
}

// pod is a pod as the API server holds it when admission runs: requests
// defaulted from limits.
func (s podSpec) pod() *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team", Annotations: s.annotations},
		Spec: corev1.PodSpec{Containers: s.containers, InitContainers: s.inits}}
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			if l := cs[i].Resources.Limits; l != nil {
				cs[i].Resources.Requests = l.DeepCopy()
			}
		}
	}
	return p.DeepCopy()
}

func untranslated(container, res string) string {
	return `container "` + container + `": resource ` + res + ` was not translated into a gpu.gpuslice.io claim: ` +
		`the gpuslice admission webhook did not handle this pod (is it running?), and a pod is not admitted without its vGPU isolation`
}

// The webhook and the pod policy, together as the API server runs them
// (webhook, then policies on the mutated pod) and with the webhook down
// (policies on the pod as written): every refusal CEL can express gets
// the same message both ways; a pod the webhook translates passes every
// policy, and so do the templates it creates; a pod still carrying the
// reference's resources is refused whatever happened to the webhook.
func TestWebhookAndPoliciesAgree(t *testing.T) {
	l := load(t)
	initMsg := `: init containers may not request vGPU resources (the reference product does not support them); ` +
		`request the vGPU in a regular container`
	otherClaim := container("setup")
	otherClaim.Resources.Claims = []corev1.ResourceClaim{{Name: "nic"}}
	for _, tc := range []struct {
		name    string
		pod     podSpec
		called  bool   // the webhook's matchConditions send it the pod
		refused string // the webhook's refusal; "" when it admits the pod
		down    string // the policies' refusal of the pod as written
	}{
		{name: "the reference's form", pod: podSpec{containers: []corev1.Container{container("main", mem+"=32", cores+"=30")}},
			called: true, down: untranslated("main", mem)},
		{name: "memory only, beside a plain container",
			pod:    podSpec{containers: []corev1.Container{container("side", "cpu=1"), container("main", mem+"=64")}},
			called: true, down: untranslated("main", mem)},
		{name: "with a priority", pod: podSpec{containers: []corev1.Container{container("main", mem+"=32", cores+"=30")},
			annotations: map[string]string{gs.AnnotationPriority: "high"}},
			called: true, down: untranslated("main", mem)},
		{name: "init container", pod: podSpec{containers: []corev1.Container{container("main")},
			inits: []corev1.Container{container("setup", mem+"=8")}},
			called: true, refused: `init container "setup": resource volcano.sh/gpu-mem.128Mi` + initMsg},
		{name: "cores without memory", pod: podSpec{containers: []corev1.Container{container("main", cores+"=30")}},
			called: true, refused: `container "main": resource volcano.sh/gpu-core.percentage=30 without volcano.sh/gpu-mem.128Mi: ` +
				`compute is given only with memory; add volcano.sh/gpu-mem.128Mi (1-16384, units of 128 MiB)`},
		{name: "cores 33", pod: podSpec{containers: []corev1.Container{container("main", mem+"=32", cores+"=33")}},
			called: true, refused: `container "main": resource volcano.sh/gpu-core.percentage=33: want 0-100 in steps of 5`},
		{name: "cores 105", pod: podSpec{containers: []corev1.Container{container("main", mem+"=32", cores+"=105")}},
			called: true, refused: `container "main": resource volcano.sh/gpu-core.percentage=105: want 0-100 in steps of 5`},
		{name: "gpu-mem 0", pod: podSpec{containers: []corev1.Container{container("main", mem+"=0")}},
			called: true, refused: `container "main": resource volcano.sh/gpu-mem.128Mi=0: want 1-16384 (units of 128 MiB: 128Mi to 2Ti)`},
		{name: "the bounds: 16384 units and 100 %", pod: podSpec{containers: []corev1.Container{container("main", mem+"=16384", cores+"=100")}},
			called: true, down: untranslated("main", mem)},
		{name: "the bounds: 1 unit and 0 %", pod: podSpec{containers: []corev1.Container{container("main", mem+"=1", cores+"=0")}},
			called: true, down: untranslated("main", mem)},
		{name: "gpu-mem 16385", pod: podSpec{containers: []corev1.Container{container("main", mem+"=16385")}},
			called: true, refused: `container "main": resource volcano.sh/gpu-mem.128Mi=16385: want 1-16384 (units of 128 MiB: 128Mi to 2Ti)`},
		{name: "gpu-mem 20000, written as the API server writes it", pod: podSpec{containers: []corev1.Container{container("main", mem+"=20000")}},
			called: true, refused: `container "main": resource volcano.sh/gpu-mem.128Mi=20k: want 1-16384 (units of 128 MiB: 128Mi to 2Ti)`},
		{name: "several wrongs: the first validation's, the first container's",
			pod:    podSpec{containers: []corev1.Container{container("a", mem+"=0", cores+"=33"), container("b", mem+"=8", cores+"=31")}},
			called: true, refused: `container "a": resource volcano.sh/gpu-core.percentage=33: want 0-100 in steps of 5`},
		{name: "both ways", pod: podSpec{containers: []corev1.Container{container("main", mem+"=32")},
			annotations: map[string]string{"gpuslice.io/gpu-memory/container.main": "4Gi", "gpuslice.io/gpu-index": "0"}},
			called: true, refused: `container "main": resource volcano.sh/gpu-mem.128Mi with annotation gpuslice.io/gpu-index: a pod asks ` +
				`for vGPUs by gpuslice.io/gpu-* annotations or by resources, not both (only gpuslice.io/gpu-priority goes with resources)`},
		// What only the webhook refuses is refused without it all the same.
		{name: "a priority neither high nor low", pod: podSpec{containers: []corev1.Container{container("main", mem+"=32", cores+"=30")},
			annotations: map[string]string{gs.AnnotationPriority: "urgent"}},
			called: true, refused: `annotation gpuslice.io/gpu-priority="urgent": want high or low`, down: untranslated("main", mem)},
		{name: "gpu-mem with a whole card", pod: podSpec{containers: []corev1.Container{container("main", mem+"=32", gpu+"=1")}},
			called: true, refused: `container "main": resources volcano.sh/gpu-mem.128Mi and nvidia.com/gpu=1: ask for a vGPU by one of them, not both`,
			down: untranslated("main", mem)},
		// A fraction the API server's validation refuses before any policy.
		{name: "half a card", pod: podSpec{containers: []corev1.Container{container("main", gpu+"=0.5")}}, called: true},
		{name: "whole cards", pod: podSpec{containers: []corev1.Container{container("main", gpu+"=2")}}},
		{name: "nothing", pod: podSpec{containers: []corev1.Container{container("main", "cpu=1", "memory=1Gi")}}},
		{name: "the annotation route", pod: podSpec{containers: []corev1.Container{container("main")},
			annotations: map[string]string{"gpuslice.io/gpu-memory": "4Gi", gs.AnnotationPriority: "high"}}},
		{name: "an init container using another device's claim",
			pod:    podSpec{containers: []corev1.Container{container("main")}, inits: []corev1.Container{otherClaim}},
			called: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod.pod()
			if tc.refused != "" && tc.down == "" {
				tc.down = tc.refused
			}
			called, err := l.matcher.Match(celpolicy.Request{Object: pod, Kind: podKind, Resource: podResource,
				Operation: admission.Create, Namespace: "team"})
			if err != nil || called != tc.called {
				t.Errorf("webhook called: %v, %v; want %v", called, err, tc.called)
			}
			if got := l.admit(t, "gpuslice-vgpu-resources", pod, "user"); got != tc.down {
				t.Errorf("webhook down, the policy says\n  %q\nwant\n  %q", got, tc.down)
			}
			if !called {
				return
			}
			l.throughWebhook(t, pod, tc.refused)
		})
	}
}

// throughWebhook admits the pod through the webhook, then the policies on
// what it wrote, as the API server does; refused is the webhook's
// expected refusal ("" for none).
func (l *loaded) throughWebhook(t *testing.T, pod *corev1.Pod, refused string) {
	t.Helper()
	client := fake.NewClientset(admissiontest.CardSlice(draapi.DriverName, "node-a", 16<<30))
	m := &gs.Mutator{Client: client, Cards: &gs.Cards{Client: client}}
	ops, err := m.Mutate(context.Background(), pod.DeepCopy(), "team", false)
	var r *gs.Refusal
	switch {
	case refused != "" && (!errors.As(err, &r) || r.Message != refused):
		t.Fatalf("webhook: %v\nwant the refusal %q", err, refused)
	case refused != "":
		return
	case err != nil:
		t.Fatalf("webhook: %v", err)
	}
	mutated, err := admissiontest.Apply(pod, ops)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.admit(t, "gpuslice-vgpu-resources", mutated, "user"); got != "" {
		t.Errorf("the translated pod is refused: %s", got)
	}
	list, err := client.ResourceV1().ResourceClaimTemplates("team").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		tmpl := &list.Items[i]
		for _, p := range []string{"gpuslice-vgpu-claims", "gpuslice-webhook-templates"} {
			if got := l.admit(t, p, tmpl, webhookUser); got != "" {
				t.Errorf("the webhook's template %s is refused: %s", tmpl.Name, got)
			}
		}
	}
}

// The pod policy sees every pod of the cluster and must not fail on any:
// an error would refuse it (failurePolicy Fail).
func TestPodPolicyPassesOtherPods(t *testing.T) {
	l := load(t)
	claimed := container("main")
	claimed.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	for name, pod := range map[string]*corev1.Pod{
		"bare":               {Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "i"}}}},
		"empty limits":       {Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}}}},
		"init, no resources": podSpec{containers: []corev1.Container{container("main")}, inits: []corev1.Container{container("setup")}}.pod(),
		"annotations":        podSpec{containers: []corev1.Container{container("main")}, annotations: map[string]string{"a": "b"}}.pod(),
		"claims":             podSpec{containers: []corev1.Container{claimed}}.pod(),
		"whole cards":        podSpec{containers: []corev1.Container{container("main", gpu+"=8")}}.pod(),
		"priority alone":     podSpec{containers: []corev1.Container{container("main")}, annotations: map[string]string{gs.AnnotationPriority: "x"}}.pod(),
	} {
		if got := l.admit(t, "gpuslice-vgpu-resources", pod, "user"); got != "" {
			t.Errorf("%s: refused: %s", name, got)
		}
	}
}
