package manifests

import (
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	gs "github.com/gpuslice/gpuslice/pkg/admission"

	"github.com/gpuslice/gpuslice/pkg/draapi"
)

// exact is a request of one device of a class, asking for capacities
// given as "NAME=QUANTITY".
func exact(name, class string, capacity ...string) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1, Capacity: capacities(capacity)}}
}

func capacities(capacity []string) *resourcev1.CapacityRequirements {
	if len(capacity) == 0 {
		return nil
	}
	c := &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{}}
	for _, kv := range capacity {
		k, v, _ := strings.Cut(kv, "=")
		c.Requests[resourcev1.QualifiedName(k)] = resource.MustParse(v)
	}
	return c
}

// opaque is a configuration of a driver with parameters (JSON), for the
// named requests (all when none).
func opaque(driver, params string, requests ...string) resourcev1.DeviceClaimConfiguration {
	return resourcev1.DeviceClaimConfiguration{Requests: requests, DeviceConfiguration: resourcev1.DeviceConfiguration{
		Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}
}

func claimOf(requests []resourcev1.DeviceRequest, configs ...resourcev1.DeviceClaimConfiguration) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests, Config: configs}}}
}

func templateOf(name string, c *resourcev1.ResourceClaim) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Labels: map[string]string{gs.LabelManagedBy: gs.ManagedBy}},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: c.Spec},
	}
}

const params = `{"apiVersion":"gpu.gpuslice.io/v1alpha1","kind":"VGPUConfig"`

func TestClaimPolicy(t *testing.T) {
	l := load(t)
	vgpu := func(capacity ...string) []resourcev1.DeviceRequest {
		return []resourcev1.DeviceRequest{exact("vgpu", draapi.DeviceClassName, capacity...)}
	}
	ours := func(p string, requests ...string) resourcev1.DeviceClaimConfiguration {
		return opaque(draapi.DriverName, p, requests...)
	}
	alternatives := []resourcev1.DeviceRequest{{Name: "vgpu", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "big", DeviceClassName: draapi.DeviceClassName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
			Capacity: capacities([]string{"memory=8Gi", "cores=30"})},
		{Name: "small", DeviceClassName: draapi.DeviceClassName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
			Capacity: capacities([]string{"memory=4Gi", "cores=7"})},
	}}}
	bigOnly := []resourcev1.DeviceRequest{{Name: "vgpu", FirstAvailable: alternatives[0].FirstAvailable[:1]}}
	two := []resourcev1.DeviceRequest{exact("a", draapi.DeviceClassName, "memory=4Gi", "cores=30"), exact("b", draapi.DeviceClassName, "memory=4Gi")}
	const fields = `"; the fields are apiVersion, kind, priority (low or high) and mode (memory or compute)`
	for _, tc := range []struct {
		name string
		obj  runtime.Object
		want string
	}{
		{"the contract's form", claimOf(vgpu("memory=4Gi", "cores=30"), ours(params+`,"priority":"high","mode":"compute"}`)), ""},
		{"no configuration", claimOf(vgpu("memory=10Gi", "cores=30")), ""},
		{"memory only", claimOf(vgpu("memory=4096Mi", "cores=0"), ours(params+`,"mode":"memory"}`)), ""},
		{"a quota-0 compute vGPU", claimOf(vgpu("memory=4Gi"), ours(params+`,"mode":"compute"}`)), ""},
		{"another driver's devices and parameters", claimOf([]resourcev1.DeviceRequest{exact("nic", "nic.example.com")},
			opaque("nic.example.com", `{"anything":1}`)), ""},
		{"no requests at all", claimOf(nil), ""},
		{"alternatives, each valid", claimOf(bigOnly), ""},
		{"a configuration of another request", claimOf(two, ours(params+`,"mode":"memory"}`, "b")), ""},
		{"not our kind", claimOf(vgpu("memory=4Gi"), opaque("nic.example.com", `{}`), ours(`{"apiVersion":"v1","kind":"VGPUConfig"}`)),
			`spec.devices.config[1].opaque.parameters: want apiVersion gpu.gpuslice.io/v1alpha1 and kind VGPUConfig`},
		{"no kind", claimOf(vgpu("memory=4Gi"), ours(`{"apiVersion":"gpu.gpuslice.io/v1alpha1"}`)),
			`spec.devices.config[0].opaque.parameters: want apiVersion gpu.gpuslice.io/v1alpha1 and kind VGPUConfig`},
		{"an unknown field", claimOf(vgpu("memory=4Gi"), ours(params+`,"cores":30,"memory":"4Gi"}`)),
			`spec.devices.config[0].opaque.parameters: unknown field "cores` + fields},
		{"a priority neither low nor high", claimOf(vgpu("memory=4Gi", "cores=30"), ours(params+`,"priority":"urgent"}`)),
			`spec.devices.config[0].opaque.parameters.priority: want low or high`},
		{"a priority that is a number", claimOf(vgpu("memory=4Gi", "cores=30"), ours(params+`,"priority":1}`)),
			`spec.devices.config[0].opaque.parameters.priority: want low or high`},
		{"a mode neither memory nor compute", claimOf(vgpu("memory=4Gi"), ours(params+`,"mode":"shared"}`)),
			`spec.devices.config[0].opaque.parameters.mode: want memory or compute`},
		{"no memory: the whole card", claimOf(vgpu("cores=30")), ""},
		{"memory not whole MiB", claimOf(vgpu("memory=1.5Mi")),
			`spec.devices.requests "vgpu": capacity.requests.memory=1536Ki: want whole MiB from 1Mi to 16Ti (none: the whole card)`},
		{"memory in decimal units", claimOf(vgpu("memory=4G")),
			`spec.devices.requests "vgpu": capacity.requests.memory=4G: want whole MiB from 1Mi to 16Ti (none: the whole card)`},
		{"memory 0", claimOf(vgpu("memory=0")),
			`spec.devices.requests "vgpu": capacity.requests.memory=0: want whole MiB from 1Mi to 16Ti (none: the whole card)`},
		{"memory over 16Ti", claimOf(vgpu("memory=32Ti")),
			`spec.devices.requests "vgpu": capacity.requests.memory=32Ti: want whole MiB from 1Mi to 16Ti (none: the whole card)`},
		{"cores 33", claimOf(vgpu("memory=4Gi", "cores=33")), `spec.devices.requests "vgpu": capacity.requests.cores=33: want 0-100 in steps of 5`},
		{"cores 120", claimOf(vgpu("memory=4Gi", "cores=120")), `spec.devices.requests "vgpu": capacity.requests.cores=120: want 0-100 in steps of 5`},
		{"two wrong requests: the first by name", claimOf([]resourcev1.DeviceRequest{exact("b", draapi.DeviceClassName, "memory=1Gi", "cores=33"),
			exact("a", draapi.DeviceClassName, "memory=1Gi", "cores=7")}),
			`spec.devices.requests "a": capacity.requests.cores=7: want 0-100 in steps of 5`},
		{"an alternative with cores 7", claimOf(alternatives),
			`spec.devices.requests "vgpu/small": capacity.requests.cores=7: want 0-100 in steps of 5`},
		{"mode memory with cores", claimOf(vgpu("memory=4Gi", "cores=30"), ours(params+`,"mode":"memory"}`)),
			`spec.devices.config[0].opaque.parameters.mode: memory with capacity.requests.cores=30 in request "vgpu": ` +
				`a memory-only vGPU has no compute quota; use mode compute, or cores 0`},
		{"mode memory for the request with cores", claimOf(two, ours(params+`,"mode":"memory"}`, "a")),
			`spec.devices.config[0].opaque.parameters.mode: memory with capacity.requests.cores=30 in request "a": ` +
				`a memory-only vGPU has no compute quota; use mode compute, or cores 0`},
		{"mode memory for a request's alternatives", claimOf(bigOnly, ours(params+`,"mode":"memory"}`, "vgpu")),
			`spec.devices.config[0].opaque.parameters.mode: memory with capacity.requests.cores=30 in request "vgpu/big": ` +
				`a memory-only vGPU has no compute quota; use mode compute, or cores 0`},
		{"high priority without cores", claimOf(vgpu("memory=4Gi"), ours(params+`,"priority":"high"}`)),
			`spec.devices.config[0].opaque.parameters.priority: high for request "vgpu" without cores: ` +
				`high priority is for vGPUs with compute; ask for capacity.requests.cores above 0`},
		{"a template", templateOf("t", claimOf(vgpu("memory=4Gi"), ours(`{"kind":"VGPUConfig"}`))),
			`spec.spec.devices.config[0].opaque.parameters: want apiVersion gpu.gpuslice.io/v1alpha1 and kind VGPUConfig`},
		{"a template's request", templateOf("t", claimOf(vgpu("memory=4Gi", "cores=3"))),
			`spec.spec.devices.requests "vgpu": capacity.requests.cores=3: want 0-100 in steps of 5`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.admit(t, "gpuslice-vgpu-claims", tc.obj, "user"); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// The webhook's identity creates only the webhook's kind of template;
// others are not bound by that policy.
func TestWebhookTemplatesPolicy(t *testing.T) {
	l := load(t)
	good := claimOf([]resourcev1.DeviceRequest{exact("vgpu", draapi.DeviceClassName, "memory=4Gi")})
	admin := claimOf([]resourcev1.DeviceRequest{exact("vgpu", draapi.DeviceClassName, "memory=4Gi")})
	yes := true
	admin.Spec.Devices.Requests[0].Exactly.AdminAccess = &yes
	unlabelled := templateOf("gpuslice-x", good)
	unlabelled.Labels = nil
	const (
		named = "the gpuslice webhook creates only ResourceClaimTemplates named gpuslice-* and labelled app.kubernetes.io/managed-by=gpuslice-webhook"
		class = "the gpuslice webhook creates only ResourceClaimTemplates of gpu.gpuslice.io devices, without admin access"
	)
	for _, tc := range []struct {
		name string
		obj  *resourcev1.ResourceClaimTemplate
		user string
		want string
	}{
		{"the webhook's own", templateOf("gpuslice-4096mi-mem-0123456789", good), webhookUser, ""},
		{"another name", templateOf("mine", good), webhookUser, named},
		{"no label", unlabelled, webhookUser, named},
		{"other devices", templateOf("gpuslice-x", claimOf([]resourcev1.DeviceRequest{exact("gpu", "gpu.nvidia.com")})), webhookUser, class},
		{"admin access", templateOf("gpuslice-x", admin), webhookUser, class},
		{"alternatives", templateOf("gpuslice-x", claimOf([]resourcev1.DeviceRequest{{Name: "vgpu",
			FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "a", DeviceClassName: draapi.DeviceClassName}}}})), webhookUser, class},
		{"a user's template", templateOf("mine", claimOf([]resourcev1.DeviceRequest{exact("gpu", "gpu.nvidia.com")})), "alice", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.admit(t, "gpuslice-webhook-templates", tc.obj, tc.user); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
