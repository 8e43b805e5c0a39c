package admission

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/cel/environment"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpuslice/gpuslice/pkg/draapi"
)

// The claims are written in the form of the contract with the driver.
func TestClaimSpecContract(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  vgpuRequest
		want string
	}{
		{
			name: "compute, high priority",
			req:  vgpuRequest{MemoryBytes: 4 * gib, Cores: 30, Cards: 1, Priority: "high"},
			want: `{"devices":{"requests":[{"name":"vgpu","exactly":{"deviceClassName":"gpu.gpuslice.io",` +
				`"selectors":[{"cel":{"expression":"device.attributes['gpu.gpuslice.io'].mode in ['unused', 'compute']"}}],` +
				`"allocationMode":"ExactCount","count":1,"capacity":{"requests":{"cores":"30","memory":"4Gi"}}}}],` +
				`"config":[{"requests":["vgpu"],"opaque":{"driver":"gpu.gpuslice.io","parameters":` +
				`{"apiVersion":"gpu.gpuslice.io/v1alpha1","kind":"VGPUConfig","priority":"high","mode":"compute"}}}]}}`,
		},
		{
			name: "memory only, two whole cards of 16 GiB",
			req:  vgpuRequest{MemoryBytes: 16 * gib, Cards: 2, CardMemory: 16 * gib},
			want: `{"devices":{"requests":[` +
				`{"name":"vgpu-0","exactly":{"deviceClassName":"gpu.gpuslice.io","selectors":[` +
				`{"cel":{"expression":"device.attributes['gpu.gpuslice.io'].mode in ['unused', 'memory']"}},` +
				`{"cel":{"expression":"device.attributes['gpu.gpuslice.io'].memory == 17179869184"}}],` +
				`"allocationMode":"ExactCount","count":1,"capacity":{"requests":{"cores":"0","memory":"16Gi"}}}},` +
				`{"name":"vgpu-1","exactly":{"deviceClassName":"gpu.gpuslice.io","selectors":[` +
				`{"cel":{"expression":"device.attributes['gpu.gpuslice.io'].mode in ['unused', 'memory']"}},` +
				`{"cel":{"expression":"device.attributes['gpu.gpuslice.io'].memory == 17179869184"}}],` +
				`"allocationMode":"ExactCount","count":1,"capacity":{"requests":{"cores":"0","memory":"16Gi"}}}}],` +
				`"config":[{"requests":["vgpu-0","vgpu-1"],"opaque":{"driver":"gpu.gpuslice.io","parameters":` +
				`{"apiVersion":"gpu.gpuslice.io/v1alpha1","kind":"VGPUConfig","mode":"memory"}}}]}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.req.claimSpec())
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// A template's name is the request's: the same for the same request, told
// apart from every other, and a valid object name.
func TestTemplateNames(t *testing.T) {
	reqs := []vgpuRequest{
		{MemoryBytes: 4 * gib, Cores: 30, Cards: 1},
		{MemoryBytes: 4 * gib, Cores: 35, Cards: 1},
		{MemoryBytes: 4 * gib, Cards: 1},
		{MemoryBytes: 8 * gib, Cores: 30, Cards: 1},
		{MemoryBytes: 4 * gib, Cores: 30, Cards: 1, Priority: "high"},
		{MemoryBytes: 4 * gib, Cores: 30, Cards: 1, Priority: "low"},
		{MemoryBytes: 4 * gib, Cards: 1, CardMemory: 8 * gib},
		{MemoryBytes: 4 * gib, Cards: 1, CardMemory: 16 * gib},
		{MemoryBytes: 16 * gib, Cards: 2, CardMemory: 16 * gib},
		{MemoryBytes: 2048 * gib, Cores: 100, Cards: 1, Priority: "high"},
	}
	readable := regexp.MustCompile(`^gpuslice-(\dx)?\d+mi-(c\d+|mem)(-high|-low)?-[0-9a-f]{10}$`)
	seen := map[string]int{}
	for i, r := range reqs {
		name := r.template("team").Name
		if again := r.template("other").Name; again != name {
			t.Errorf("request %d: named %s, then %s", i, name, again)
		}
		if j, dup := seen[name]; dup {
			t.Errorf("requests %d and %d share the name %s", j, i, name)
		}
		seen[name] = i
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || !readable.MatchString(name) {
			t.Errorf("request %d: name %s: %v", i, name, errs)
		}
	}
	if got := reqs[0].template("team").Name; got[:len("gpuslice-4096mi-c30-")] != "gpuslice-4096mi-c30-" {
		t.Errorf("name %s does not read as the request", got)
	}
}

// The claims' selectors, compiled and evaluated as the scheduler does,
// keep a vGPU off cards of the other isolation mode and, for a size taken
// from a card's memory, off cards of another memory.
func TestSelectorsOnCards(t *testing.T) {
	card := func(mode string, memory int64) dracel.Device {
		return dracel.Device{Driver: draapi.DriverName, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"mode": {StringValue: &mode}, "memory": {IntValue: &memory}}}
	}
	compute := vgpuRequest{MemoryBytes: 4 * gib, Cores: 30, Cards: 1}
	memory := vgpuRequest{MemoryBytes: 8 * gib, Cards: 1, CardMemory: 16 * gib}
	for _, tc := range []struct {
		req  vgpuRequest
		card dracel.Device
		want bool
	}{
		{compute, card("unused", 16*gib), true},
		{compute, card("compute", 16*gib), true},
		{compute, card("memory", 16*gib), false},
		{memory, card("unused", 16*gib), true},
		{memory, card("memory", 16*gib), true},
		{memory, card("compute", 16*gib), false},
		{memory, card("unused", 32*gib), false},
	} {
		got := true
		for _, s := range tc.req.claimSpec().Devices.Requests[0].Exactly.Selectors {
			env := environment.NewExpressions
			c := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true}).CompileCELExpression(s.CEL.Expression, dracel.Options{EnvType: &env})
			if c.Error != nil {
				t.Fatalf("%s: %v", s.CEL.Expression, c.Error)
			}
			ok, _, err := c.DeviceMatches(context.Background(), tc.card)
			if err != nil {
				t.Fatalf("%s: %v", s.CEL.Expression, err)
			}
			got = got && ok
		}
		if got != tc.want {
			t.Errorf("%s on a %s card of %d bytes: %v, want %v", tc.req.mode(), *tc.card.Attributes["mode"].StringValue,
				*tc.card.Attributes["memory"].IntValue, got, tc.want)
		}
	}
}
