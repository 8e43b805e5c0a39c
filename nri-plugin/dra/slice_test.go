package dra

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/draapi"
	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/simgpu"
)

func simCard(i, policy int) agent.Card {
	return agent.Card{Index: i, UUID: simgpu.UUID(i), Model: "gpuslice simulated GPU", Minor: i,
		MemoryBytes: 16 << 30, Policy: policy, MaxInst: 20, DriverVersion: simgpu.DriverVersion}
}

func TestDevices(t *testing.T) {
	cards := []agent.Card{simCard(0, 1), simCard(1, 4)}
	cards[1].MemoryBytes += 1000 // not whole MiB: published rounded down
	cards[1].MaxInst = 10
	devs := devices(cards, map[int]placement.Mode{1: placement.Compute})
	require.Len(t, devs, 2)

	d := devs[0]
	assert.Equal(t, "gpu-0", d.Name)
	require.NotNil(t, d.AllowMultipleAllocations)
	assert.True(t, *d.AllowMultipleAllocations)
	assert.Equal(t, map[string]any{
		"index": int64(0), "uuid": simgpu.UUID(0), "productName": "gpuslice simulated GPU",
		"memory": int64(16 << 30), "driverVersion": simgpu.DriverVersion, "policy": int64(1),
		"maxInst": int64(20), "mode": "unused",
	}, attributes(d))
	assert.Equal(t, "compute", *devs[1].Attributes[draapi.AttrMode].StringValue)
	assert.Equal(t, int64(16<<30), *devs[1].Attributes[draapi.AttrMemory].IntValue)

	want := map[string]string{"memory": "16Gi", "cores": "100", "vgpus": "20"}
	for name, c := range d.Capacity {
		assert.Equal(t, want[string(name)], c.Value.String(), name)
	}
	mem := d.Capacity[draapi.CapacityMemory].RequestPolicy
	assert.Equal(t, "16Gi", mem.Default.String(), "no memory asked: the whole card's")
	assert.Equal(t, "1Mi", mem.ValidRange.Min.String())
	assert.Equal(t, "1Mi", mem.ValidRange.Step.String())
	assert.Nil(t, mem.ValidRange.Max)
	cores := d.Capacity[draapi.CapacityCores].RequestPolicy
	assert.Equal(t, "0", cores.Default.String())
	assert.Equal(t, []string{"0", "100", "5"}, []string{cores.ValidRange.Min.String(),
		cores.ValidRange.Max.String(), cores.ValidRange.Step.String()})
	vgpus := d.Capacity[draapi.CapacityVGPUs].RequestPolicy
	assert.Equal(t, "1", vgpus.Default.String())
	require.Len(t, vgpus.ValidValues, 1)
	assert.Equal(t, "1", vgpus.ValidValues[0].String(), "every claim takes one vGPU")
	ten := devs[1].Capacity[draapi.CapacityVGPUs].Value
	assert.Equal(t, "10", ten.String())

	for _, dev := range devs {
		for name, c := range dev.Capacity {
			assert.NoError(t, checkPolicy(c), "%s %s", dev.Name, name)
		}
	}
}

// A card's mode: its vGPUs', or while it has none the only one its policy
// runs.
func TestModeName(t *testing.T) {
	for _, tc := range []struct {
		policy int
		mode   placement.Mode
		want   string
	}{
		{1, placement.None, "unused"}, {1, placement.Memory, "memory"}, {1, placement.Compute, "compute"},
		{0, placement.None, "memory"}, {0, placement.Memory, "memory"},
		{5, placement.None, "compute"}, {5, placement.Compute, "compute"},
	} {
		assert.Equal(t, tc.want, modeName(tc.policy, tc.mode), "policy %d, %s", tc.policy, tc.mode)
	}
}

func attributes(d resourceapi.Device) map[string]any {
	out := map[string]any{}
	for k, a := range d.Attributes {
		switch {
		case a.IntValue != nil:
			out[string(k)] = *a.IntValue
		case a.StringValue != nil:
			out[string(k)] = *a.StringValue
		}
	}
	return out
}

// checkPolicy holds a capacity's request policy to the API server's rules
// (k8s.io/kubernetes v1.37.2, pkg/apis/resource/validation:
// validateRequestPolicy and what it calls), so that a slice the API server
// would refuse fails here first; the end-to-end tests publish it for real.
func checkPolicy(c resourceapi.DeviceCapacity) error {
	p := c.RequestPolicy
	switch {
	case p == nil:
		return nil
	case len(p.ValidValues) > 0 && p.ValidRange != nil:
		return errorf("validValues and validRange both set")
	case (len(p.ValidValues) > 0 || p.ValidRange != nil) && p.Default == nil:
		return errorf("default required with validValues or validRange")
	case len(p.ValidValues) > 10:
		return errorf("more than 10 validValues")
	}
	if len(p.ValidValues) > 0 {
		found := false
		for i, v := range p.ValidValues {
			if i > 0 && p.ValidValues[i-1].Cmp(v) > 0 {
				return errorf("validValues not ascending")
			}
			if v.Cmp(c.Value) > 0 {
				return errorf("a valid value over the capacity")
			}
			found = found || v.Cmp(*p.Default) == 0
		}
		if !found {
			return errorf("default not a valid value")
		}
	}
	r := p.ValidRange
	if r == nil {
		return nil
	}
	switch {
	case r.Min == nil:
		return errorf("validRange.min required")
	case r.Min.Cmp(c.Value) > 0, p.Default.Cmp(*r.Min) < 0:
		return errorf("min over the capacity, or default under min")
	case r.Max != nil && (r.Min.Cmp(*r.Max) > 0 || r.Max.Cmp(c.Value) > 0 || p.Default.Cmp(*r.Max) > 0):
		return errorf("max out of order")
	}
	if r.Step != nil {
		step, lo := r.Step.Value(), r.Min.Value()
		switch {
		case step <= 0:
			return errorf("step not positive")
		case lo+step > c.Value.Value():
			return errorf("min + step over the capacity")
		case (p.Default.Value()-lo)%step != 0:
			return errorf("default not min + n steps")
		case r.Max != nil && (r.Max.Value()-lo)%step != 0:
			return errorf("max not min + n steps")
		}
	}
	return nil
}

func errorf(s string) error { return errors.New(s) }

// The contract's memory policy had no default; the API server refuses a
// range without one (validateValidRequestValues: "required when
// validRange is defined"), so the slice gives the whole card's.
func TestMemoryPolicyNeedsADefault(t *testing.T) {
	c := device(simCard(0, 1), placement.None).Capacity[draapi.CapacityMemory]
	require.NoError(t, checkPolicy(c))
	c.RequestPolicy = c.RequestPolicy.DeepCopy()
	c.RequestPolicy.Default = nil
	assert.EqualError(t, checkPolicy(c), "default required with validValues or validRange")
}
