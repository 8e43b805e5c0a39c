package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/pkg/draapi"
)

// hasInitClaims reports whether an init container uses a DRA claim.
func hasInitClaims(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.InitContainers {
		if len(c.Resources.Claims) > 0 {
			return true
		}
	}
	return false
}

// checkInitClaims refuses an init container that uses a claim (or a
// claim made from a template) asking for the driver's devices: init
// containers may not have vGPUs, whichever way they ask. A claim it cannot
// read is refused too, since it cannot tell.
func checkInitClaims(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, namespace string) error {
	for _, c := range pod.Spec.InitContainers {
		for _, ref := range c.Resources.Claims {
			spec, what, err := podClaimSpec(ctx, client, pod, namespace, ref.Name)
			if err != nil {
				return refusef("init container %q: resources.claims %q: %v; cannot tell whether it asks for a vGPU", c.Name, ref.Name, err)
			}
			if spec != nil && asksForVGPU(spec) {
				return refusef("init container %q: resources.claims %q (%s) asks for %s devices: init containers may not "+
					"request vGPU resources (the reference product does not support them); request the vGPU in a regular container",
					c.Name, ref.Name, what, draapi.DriverName)
			}
		}
	}
	return nil
}

// podClaimSpec reads the spec of one of the pod's claims, by the pod's
// name for it, and says what it read; nil when the pod names no such claim
// (the API server refuses the pod).
func podClaimSpec(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, namespace, name string) (*resourcev1.ResourceClaimSpec, string, error) {
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.Name != name {
			continue
		}
		switch {
		case pc.ResourceClaimTemplateName != nil:
			what := fmt.Sprintf("ResourceClaimTemplate %q", *pc.ResourceClaimTemplateName)
			t, err := client.ResourceV1().ResourceClaimTemplates(namespace).Get(ctx, *pc.ResourceClaimTemplateName, metav1.GetOptions{})
			if err != nil {
				return nil, what, readError(what, err)
			}
			return &t.Spec.Spec, what, nil
		case pc.ResourceClaimName != nil:
			what := fmt.Sprintf("ResourceClaim %q", *pc.ResourceClaimName)
			cl, err := client.ResourceV1().ResourceClaims(namespace).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				return nil, what, readError(what, err)
			}
			return &cl.Spec, what, nil
		}
	}
	return nil, "", nil
}

func readError(what string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s not found", what)
	}
	return fmt.Errorf("reading %s: %w", what, err)
}

// asksForVGPU reports whether a claim asks for a device of the driver's
// class, directly or among its alternatives.
func asksForVGPU(spec *resourcev1.ResourceClaimSpec) bool {
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil && r.Exactly.DeviceClassName == draapi.DeviceClassName {
			return true
		}
		for _, s := range r.FirstAvailable {
			if s.DeviceClassName == draapi.DeviceClassName {
				return true
			}
		}
	}
	return false
}
