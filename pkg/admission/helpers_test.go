package admission

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuslice/gpuslice/pkg/admission/admissiontest"

	"github.com/gpuslice/gpuslice/pkg/draapi"
)

const gib = 1 << 30

// ctr is a container asking for resources (admissiontest.Container).
func ctr(name string, resources ...string) corev1.Container {
	return admissiontest.Container(name, resources...)
}

// podOf is a pod of the given containers, with annotations given as
// "KEY=VALUE".
func podOf(containers []corev1.Container, annotations ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team"}, Spec: corev1.PodSpec{Containers: containers}}
	for _, a := range annotations {
		k, v, _ := strings.Cut(a, "=")
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
	return p
}

// withInitClaim is a pod whose init container "setup" uses the pod's
// claim "gpu", made as pc says (its name is set here).
func withInitClaim(pc corev1.PodResourceClaim) *corev1.Pod {
	setup := ctr("setup")
	setup.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	p := withInit(podOf([]corev1.Container{ctr("main")}), setup)
	pc.Name = "gpu"
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{pc}
	return p
}

// withInit adds init containers to a pod.
func withInit(p *corev1.Pod, inits ...corev1.Container) *corev1.Pod {
	p.Spec.InitContainers = inits
	return p
}

// cardSlice is a node's ResourceSlice of the driver with one device per
// memory size.
func cardSlice(node string, memories ...int64) *resourcev1.ResourceSlice {
	return admissiontest.CardSlice(draapi.DriverName, node, memories...)
}

func node(name string, labels ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		n.Labels[k] = v
	}
	return n
}

// mutator is a Mutator over a fake API holding objects.
func mutator(objects ...runtime.Object) (*Mutator, *fake.Clientset) {
	client := fake.NewClientset(objects...)
	return &Mutator{Client: client, Cards: &Cards{Client: client}}, client
}

// apply applies a patch to a pod as the API server does.
func apply(t *testing.T, pod *corev1.Pod, ops []PatchOp) *corev1.Pod {
	t.Helper()
	got, err := admissiontest.Apply(pod, ops)
	if err != nil {
		t.Fatalf("applying %v: %v", ops, err)
	}
	return got
}

// templates lists the templates of the fake API's namespace "team".
func templates(t *testing.T, client *fake.Clientset) []resourcev1.ResourceClaimTemplate {
	t.Helper()
	list, err := client.ResourceV1().ResourceClaimTemplates("team").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}
