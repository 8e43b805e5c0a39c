package dra

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/quota"
	"github.com/gpuslice/gpuslice/pkg/state"
)

const gib = uint64(1) << 30

// result is what the scheduler allocates a request of memory and cores on
// device gpu-<card> of node's pool.
func result(request string, card int, memory, cores string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: "gpu.gpuslice.io",
		Pool: "node", Device: deviceName(card), ShareID: ptr.To(types.UID("share-" + request)),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
			"memory": resource.MustParse(memory), "cores": resource.MustParse(cores), "vgpus": resource.MustParse("1")}}
}

// allocatedClaim is claim ns/train (UID u1) reserved for pod p, with its
// allocation's results and configurations.
func allocatedClaim(results []resourceapi.DeviceRequestAllocationResult, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "u1"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: results, Config: configs}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}},
		}}
}

func opaque(source resourceapi.AllocationConfigSource, driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}
}

const (
	fromClaim = resourceapi.AllocationConfigSourceClaim
	fromClass = resourceapi.AllocationConfigSourceClass
	vgpuID    = `"apiVersion": "gpu.gpuslice.io/v1alpha1", "kind": "VGPUConfig"`
)

func TestClaimRequest(t *testing.T) {
	got, err := claimRequest(allocatedClaim([]resourceapi.DeviceRequestAllocationResult{
		result("gpu", 1, "10Gi", "30"),
		{Request: "other", Driver: "other.example.com", Pool: "node", Device: "x"}, // not ours
	}), "node")
	require.NoError(t, err)
	assert.Equal(t, agent.ClaimRequest{
		Claim: state.Claim{UID: "u1", Namespace: "ns", Name: "train", Pool: "node"},
		Pod:   "p", PodUID: "pod-uid",
		VGPUs: []agent.ClaimVGPU{{Card: 1, MemoryBytes: 10 * gib, Cores: 30, Request: "gpu", ShareID: "share-gpu"}},
	}, got)
}

// The driver's parameters: the class's, then the claim's over them, each
// for its requests; other drivers' left alone.
func TestClaimRequestConfig(t *testing.T) {
	results := []resourceapi.DeviceRequestAllocationResult{result("a", 0, "1Gi", "10"), result("b/sub", 1, "1Gi", "0")}
	got, err := claimRequest(allocatedClaim(results,
		opaque(fromClaim, "gpu.gpuslice.io", `{`+vgpuID+`, "priority": "high"}`),
		opaque(fromClass, "gpu.gpuslice.io", `{`+vgpuID+`, "priority": "low", "mode": "memory"}`),
		opaque(fromClaim, "gpu.gpuslice.io", `{`+vgpuID+`, "mode": "compute"}`, "b"),
		opaque(fromClaim, "other.example.com", `not ours: not read`),
	), "node")
	require.NoError(t, err)
	assert.Equal(t, quota.High, got.Priority, "the claim's priority over the class's")
	assert.Equal(t, placement.Memory, got.VGPUs[0].Mode, "the class's mode")
	assert.Equal(t, placement.Compute, got.VGPUs[1].Mode, "the claim's, for request b (and its subrequests)")
}

// Every refusal names the claim and the field at fault.
func TestClaimRequestRefusals(t *testing.T) {
	one := func(mod func(*resourceapi.DeviceRequestAllocationResult)) []resourceapi.DeviceRequestAllocationResult {
		r := result("gpu", 0, "1Gi", "0")
		mod(&r)
		return []resourceapi.DeviceRequestAllocationResult{r}
	}
	ok := one(func(*resourceapi.DeviceRequestAllocationResult) {})
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{"not allocated", &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train"}},
			"claim ns/train: not allocated"},
		{"no consumable capacity", allocatedClaim(one(func(r *resourceapi.DeviceRequestAllocationResult) {
			r.ConsumedCapacity, r.ShareID = nil, nil
		})), `claim ns/train: request "gpu" (device gpu-0): ` + gateHint},
		{"another node's pool", allocatedClaim(one(func(r *resourceapi.DeviceRequestAllocationResult) { r.Pool = "other" })),
			`request "gpu" (device gpu-0): allocated from pool "other", this node's is "node"`},
		{"a device not a card", allocatedClaim(one(func(r *resourceapi.DeviceRequestAllocationResult) { r.Device = "mig-0" })),
			`(device mig-0): not a device of this driver (want gpu-<index>)`},
		{"admin access", allocatedClaim(one(func(r *resourceapi.DeviceRequestAllocationResult) { r.AdminAccess = ptr.To(true) })),
			"adminAccess: a gpuslice vGPU is always isolated"},
		{"memory not whole MiB", allocatedClaim(one(func(r *resourceapi.DeviceRequestAllocationResult) {
			r.ConsumedCapacity["memory"] = resource.MustParse("1500Ki")
		})), `consumedCapacity.memory="1500Ki": want whole MiB, 1Mi-16Ti`},
		{"cores off the steps", allocatedClaim(one(func(r *resourceapi.DeviceRequestAllocationResult) {
			r.ConsumedCapacity["cores"] = resource.MustParse("33")
		})), `consumedCapacity.cores="33": want a percent 0-100 in steps of 5`},
		{"two vGPUs", allocatedClaim(one(func(r *resourceapi.DeviceRequestAllocationResult) {
			r.ConsumedCapacity["vgpus"] = resource.MustParse("2")
		})), `consumedCapacity.vgpus="2": every claim takes exactly 1`},
		{"two pods", func() *resourceapi.ResourceClaim {
			c := allocatedClaim(ok)
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "q", UID: "q"})
			return c
		}(), "claim ns/train: reserved for 2 pods: a gpuslice claim serves the containers of one pod"},
		{"no pod", func() *resourceapi.ResourceClaim {
			c := allocatedClaim(ok)
			c.Status.ReservedFor[0].Resource = "workloads"
			return c
		}(), "claim ns/train: reserved for 0 pods"},
		{"unknown parameter", allocatedClaim(ok, opaque(fromClaim, "other.example.com", `{}`),
			opaque(fromClaim, "gpu.gpuslice.io", `{`+vgpuID+`, "cores": 30}`)),
			"claim ns/train: spec.devices.config[1].opaque.parameters.cores: unknown field"},
		{"bad priority in the class", allocatedClaim(ok, opaque(fromClass, "gpu.gpuslice.io", `{`+vgpuID+`, "priority": "top"}`)),
			`claim ns/train: the device class's config[0].opaque.parameters.priority="top": want low or high`},
		{"priorities differ", allocatedClaim([]resourceapi.DeviceRequestAllocationResult{result("a", 0, "1Gi", "10"), result("b", 1, "1Gi", "10")},
			opaque(fromClaim, "gpu.gpuslice.io", `{`+vgpuID+`, "priority": "high"}`, "b")),
			`claim ns/train: its requests ask for priorities "low" and "high": one priority per claim`},
		{"none of ours", allocatedClaim([]resourceapi.DeviceRequestAllocationResult{{Request: "x", Driver: "other.example.com"}}),
			"claim ns/train: no device of gpu.gpuslice.io in its allocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := claimRequest(tc.claim, "node")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
