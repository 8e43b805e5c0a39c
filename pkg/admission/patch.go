package admission

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// PatchOp is one operation of a JSON patch (RFC 6902), the form of an
// admission webhook's mutation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// patcher writes the patch of a pod against the pod as the API server
// sent it.
type patcher struct {
	pod       *corev1.Pod
	ops       []PatchOp
	podClaims int // claims added to spec.resourceClaims so far
}

// translate replaces container i's vGPU resources with its claim: the
// pod's claim named claim, made from template, used by the container.
func (p *patcher) translate(i int, a *ask, claim, template string) {
	res := p.pod.Spec.Containers[i].Resources
	base := fmt.Sprintf("/spec/containers/%d/resources", i)
	names := []string{ResourceMemory, ResourceCores}
	if a.gpu != nil {
		names = append(names, ResourceGPU)
	}
	for _, list := range []struct {
		field string
		list  corev1.ResourceList
	}{{"limits", res.Limits}, {"requests", res.Requests}} {
		for _, n := range names {
			if _, ok := list.list[corev1.ResourceName(n)]; ok {
				p.ops = append(p.ops, PatchOp{Op: "remove", Path: base + "/" + list.field + "/" + escape(n)})
			}
		}
	}
	use := corev1.ResourceClaim{Name: claim}
	if len(res.Claims) == 0 {
		p.ops = append(p.ops, PatchOp{Op: "add", Path: base + "/claims", Value: []corev1.ResourceClaim{use}})
	} else {
		p.ops = append(p.ops, PatchOp{Op: "add", Path: base + "/claims/-", Value: use})
	}
	pc := corev1.PodResourceClaim{Name: claim, ResourceClaimTemplateName: &template}
	if len(p.pod.Spec.ResourceClaims) == 0 && p.podClaims == 0 {
		p.ops = append(p.ops, PatchOp{Op: "add", Path: "/spec/resourceClaims", Value: []corev1.PodResourceClaim{pc}})
	} else {
		p.ops = append(p.ops, PatchOp{Op: "add", Path: "/spec/resourceClaims/-", Value: pc})
	}
	p.podClaims++
}

// removePriorities drops the priority annotations, now in the claims'
// parameters: the node agent would otherwise read them as a request by
// annotation without its memory.
func (p *patcher) removePriorities() {
	var keys []string
	for k := range p.pod.Annotations {
		if isPriorityAnnotation(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		p.ops = append(p.ops, PatchOp{Op: "remove", Path: "/metadata/annotations/" + escape(k)})
	}
}

// escape makes a map key one token of a JSON pointer (RFC 6901).
func escape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}
