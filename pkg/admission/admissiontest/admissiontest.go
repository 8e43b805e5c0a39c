// Package admissiontest builds what the admission tests feed the webhook
// and the policies (containers asking for resources, a node's
// ResourceSlice of cards) and applies the webhook's patches as the API
// server does, with the same JSON patch library.
package admissiontest

import (
	"encoding/json"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Container is a container whose limits are "NAME=VALUE" pairs; a pair
// written "requests:NAME=VALUE" goes to its requests. The values are as
// the API server sends them: written in canonical form (0.5 as 500m) and
// parsed back.
func Container(name string, resources ...string) corev1.Container {
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
		q := resource.MustParse(v)
		(*list)[corev1.ResourceName(k)] = resource.MustParse(q.String())
	}
	return c
}

// CardSlice is a node's ResourceSlice of a driver, with one device of
// each memory size given.
func CardSlice(driver, node string, memories ...int64) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: &node,
			Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}},
	}
	for i, m := range memories {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name:     "gpu-" + string(rune('0'+i)),
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: *resource.NewQuantity(m, resource.BinarySI)}},
		})
	}
	return s
}

// Apply applies a JSON patch (any value that marshals to one) to a pod.
func Apply(pod *corev1.Pod, ops any) (*corev1.Pod, error) {
	doc, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, err
	}
	var got corev1.Pod
	return &got, json.Unmarshal(out, &got)
}
