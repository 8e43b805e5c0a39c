package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/kube"
)

// probeDriver is the driver name of the probe's devices: no kubelet
// plugin serves it, so nothing but the control plane is tested.
const probeDriver = "probe.kube.gpuslice.io"

// probeCapacity is a card's capacities in the shape the node agent
// publishes (memory 16 GiB in whole MiB, cores 100 in steps of 5, at most
// 20 vGPUs of one each), with memory's request policy given.
func probeCapacity(memory *resourcev1.CapacityRequestPolicy) map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
	q := apiresource.MustParse
	return map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
		"memory": {Value: q("16Gi"), RequestPolicy: memory},
		"cores": {Value: q("100"), RequestPolicy: &resourcev1.CapacityRequestPolicy{
			Default:    ptr.To(q("0")),
			ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: ptr.To(q("0")), Max: ptr.To(q("100")), Step: ptr.To(q("5"))},
		}},
		"vgpus": {Value: q("20"), RequestPolicy: &resourcev1.CapacityRequestPolicy{
			Default: ptr.To(q("1")), ValidValues: []apiresource.Quantity{q("1")},
		}},
	}
}

// probeSlice is a ResourceSlice of the node with one shareable device.
func probeSlice(node string, capacity map[resourcev1.QualifiedName]resourcev1.DeviceCapacity) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-" + node},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   probeDriver,
			NodeName: ptr.To(node),
			Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{
				Name:                     "gpu-0",
				AllowMultipleAllocations: ptr.To(true),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"index": {IntValue: ptr.To(int64(0))},
					"uuid":  {StringValue: ptr.To("GPU-00000000-0000-0000-0000-000000000000")},
					"mode":  {StringValue: ptr.To("unused")},
				},
				Capacity: capacity,
			}},
		},
	}
}

// wholeMiB is the memory policy the annotations' rule would give: whole
// MiB from 1 MiB, with default.
func wholeMiB(def *apiresource.Quantity) *resourcev1.CapacityRequestPolicy {
	one := apiresource.MustParse("1Mi")
	return &resourcev1.CapacityRequestPolicy{Default: def,
		ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: &one, Step: &one}}
}

// TestDRARequestPolicies asks the API server (a dry run) which request
// policies a ResourceSlice may carry: v1.37 wants a default wherever a
// policy is given, so a memory capacity cannot force claims to ask for
// memory by having none; the default may be the whole card.
func TestDRARequestPolicies(t *testing.T) {
	c := kube.Shared(t)
	tests := []struct {
		name   string
		memory *resourcev1.CapacityRequestPolicy
		want   string // "" accepted, else in the refusal
	}{
		{"whole MiB, default 1Mi", wholeMiB(ptr.To(apiresource.MustParse("1Mi"))), ""},
		{"whole MiB, default the whole card", wholeMiB(ptr.To(apiresource.MustParse("16Gi"))), ""},
		// v1.37 checks a range's default against its max, not the capacity.
		{"default over the card, no max", wholeMiB(ptr.To(apiresource.MustParse("17Gi"))), ""},
		{"no policy", nil, ""},
		{"whole MiB, no default", wholeMiB(nil), "default: Required value: required when validRange is defined"},
		{"default off the step", wholeMiB(ptr.To(apiresource.MustParse("1536Ki"))), "not a multiple of a given step"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slice := probeSlice(c.NodeName(), probeCapacity(tt.memory))
			_, err := c.Client().ResourceV1().ResourceSlices().Create(t.Context(), slice,
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && err == nil:
				t.Errorf("accepted, want refused with %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("refused with %q, want %q", err, tt.want)
			}
		})
	}
}

// TestDRAConsumableCapacity writes a DeviceClass and a node's ResourceSlice
// through the API, with no driver, and has the real scheduler allocate
// consumable capacity from the shared device: a 10 GiB claim of the 16
// GiB card is allocated (its consumed capacity and share recorded), a
// second stays Pending with the scheduler's reason, and runs out of
// Pending once the first pod (and with it its claim) is gone.
func TestDRAConsumableCapacity(t *testing.T) {
	c := kube.Shared(t)
	cx := t.Context()
	res := c.Client().ResourceV1()
	makeDeviceClass(t, c, probeDriver)
	slice := probeSlice(c.NodeName(), probeCapacity(wholeMiB(ptr.To(apiresource.MustParse("1Mi")))))
	if _, err := res.ResourceSlices().Create(cx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.ResourceSlices().Delete(context.Background(), slice.Name, metav1.DeleteOptions{}) })

	ns := c.Namespace(t)
	if _, err := res.ResourceClaimTemplates(ns).Create(cx, vgpuTemplate("vgpu-10g", "10Gi", "30"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second"} {
		if _, err := c.CreatePod(ns, podWithTemplate(name, "vgpu-10g")); err != nil {
			t.Fatal(err)
		}
		if name == "first" {
			// The first is placed before the second exists.
			if _, err := c.WaitPod(ns, name, kube.PodTimeout, bound); err != nil {
				t.Fatal(err)
			}
		}
	}

	first, err := c.WaitPod(ns, "first", kube.PodTimeout, bound)
	if err != nil {
		t.Fatal(err)
	}
	checkAllocation(t, c, ns, first, map[string]string{"memory": "10Gi", "cores": "30", "vgpus": "1"})

	msg, err := c.WaitPodUnschedulable(ns, "second")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "cannot allocate all claims") {
		t.Errorf("the second pod is unschedulable with %q, want the scheduler's \"cannot allocate all claims\"", msg)
	}

	if err := c.DeletePod(ns, "first"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPod(ns, "second", kube.PodTimeout, bound); err != nil {
		t.Fatal(err)
	}
}

// makeDeviceClass makes the DeviceClass driver of the driver's devices,
// deleted when the test ends.
func makeDeviceClass(t *testing.T, c *kube.Cluster, driver string) {
	t.Helper()
	classes := c.Client().ResourceV1().DeviceClasses()
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}},
	}
	if _, err := classes.Create(t.Context(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = classes.Delete(context.Background(), driver, metav1.DeleteOptions{}) })
}

// vgpuTemplate is a ResourceClaimTemplate of one device of the probe's
// class with memory and cores requested, in the form the admission layer
// writes for the node agent's class.
func vgpuTemplate(name, memory, cores string) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{
			Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "vgpu",
				Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: probeDriver,
					AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
					Count:           1,
					Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]apiresource.Quantity{
						"memory": apiresource.MustParse(memory), "cores": apiresource.MustParse(cores)}},
					Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
						Expression: fmt.Sprintf("device.attributes[%q].mode in ['unused', 'compute']", probeDriver)}}},
				},
			}}},
		}},
	}
}

// podWithTemplate is a busybox pod whose container uses a claim made from
// the template.
func podWithTemplate(name, template string) *corev1.Pod {
	pod := kube.BusyboxPod(name)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return pod
}

// bound is true once the scheduler has bound the pod to a node (without a
// driver its containers never start).
func bound(p *corev1.Pod) (bool, error) { return p.Spec.NodeName != "", nil }

// checkAllocation checks the pod's claim's allocation: the probe's device,
// a share of it, and the consumed capacities want.
func checkAllocation(t *testing.T, c *kube.Cluster, ns string, pod *corev1.Pod, want map[string]string) {
	t.Helper()
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has claim statuses %+v, want the generated claim", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	name := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	claim, err := c.Client().ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: allocation %+v, want one device", name, claim.Status.Allocation)
	}
	r := claim.Status.Allocation.Devices.Results[0]
	if r.Driver != probeDriver || r.Device != "gpu-0" || r.ShareID == nil || *r.ShareID == "" {
		t.Errorf("claim %s got %s/%s share %v, want %s/gpu-0 with a share ID", name, r.Driver, r.Device, r.ShareID, probeDriver)
	}
	for k, v := range want {
		got, ok := r.ConsumedCapacity[resourcev1.QualifiedName(k)]
		if !ok || got.Cmp(apiresource.MustParse(v)) != 0 {
			t.Errorf("claim %s consumed %s = %v, want %s (all: %v)", name, k, got.String(), v, r.ConsumedCapacity)
		}
	}
}
