package admission

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

const gib = 1 << 30

// ctr is a container whose limits are "NAME=VALUE" pairs; a pair written
// "requests:NAME=VALUE" goes to its requests.
func ctr(name string, resources ...string) corev1.Container {
	c := corev1.Container{Name: name, Image: "busybox"}
	for _, r := range resources {
		list := &c.Resources.Limits
		if rest, ok := strings.CutPrefix(r, "requests:"); ok {
			list, r = &c.Resources.Requests, rest
		}
		k, v, _ := strings.Cut(r, "=")
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		// As the API server sends it: written in canonical form (0.5 as
		// 500m) and parsed back.
		q := resource.MustParse(v)
		(*list)[corev1.ResourceName(k)] = resource.MustParse(q.String())
	}
	return c
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

// withInit adds init containers to a pod.
func withInit(p *corev1.Pod, inits ...corev1.Container) *corev1.Pod {
	p.Spec.InitContainers = inits
	return p
}

// cardSlice is a node's ResourceSlice of the driver with one device per
// memory size.
func cardSlice(node string, memories ...int64) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.gpuslice.io"},
		Spec: resourcev1.ResourceSliceSpec{Driver: DriverName, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}},
	}
	for i, m := range memories {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name:     "gpu-" + string(rune('0'+i)),
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{CapacityMemory: {Value: *resource.NewQuantity(m, resource.BinarySI)}},
		})
	}
	return s
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

// apply applies a patch to a pod as the API server does (the same JSON
// patch library).
func apply(t *testing.T, pod *corev1.Pod, ops []PatchOp) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
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
