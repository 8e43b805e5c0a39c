package dra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/draapi"
	"github.com/gpuslice/gpuslice/pkg/placement"
)

const mib = 1 << 20

// devices is the ResourceSlice's view of the node's cards: one device per
// card, shared by many claims, each consuming its memory, its cores and
// one of the card's vGPUs, so that the scheduler itself refuses a claim
// the card cannot take; modes is each card's isolation mode now.
func devices(cards []agent.Card, modes map[int]placement.Mode) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(cards))
	for _, c := range cards {
		out = append(out, device(c, modes[c.Index]))
	}
	return out
}

func device(c agent.Card, mode placement.Mode) resourceapi.Device {
	// Whole MiB, as a claim's memory: the range's steps start at 1Mi.
	memory := int64(c.MemoryBytes / mib * mib)
	return resourceapi.Device{
		Name:                     deviceName(c.Index),
		AllowMultipleAllocations: ptr.To(true),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			draapi.AttrIndex:         {IntValue: ptr.To(int64(c.Index))},
			draapi.AttrUUID:          {StringValue: ptr.To(c.UUID)},
			draapi.AttrProductName:   {StringValue: ptr.To(c.Model)},
			draapi.AttrMemory:        {IntValue: ptr.To(memory)},
			draapi.AttrDriverVersion: {StringValue: ptr.To(c.DriverVersion)},
			draapi.AttrPolicy:        {IntValue: ptr.To(int64(c.Policy))},
			draapi.AttrMaxInst:       {IntValue: ptr.To(int64(c.MaxInst))},
			draapi.AttrMode:          {StringValue: ptr.To(modeName(c.Policy, mode))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			// Whole MiB from 1Mi, as the annotations accept. The API
			// server wants a default with a range: a claim that names
			// no memory takes the whole card's, isolated all the same.
			draapi.CapacityMemory: {Value: quantity(memory, resource.BinarySI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default: quantityPtr(memory, resource.BinarySI),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{
						Min: quantityPtr(mib, resource.BinarySI), Step: quantityPtr(mib, resource.BinarySI)}}},
			// Percent in steps of 5; none by default (memory isolation).
			draapi.CapacityCores: {Value: quantity(100, resource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default: quantityPtr(0, resource.DecimalSI),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{
						Min: quantityPtr(0, resource.DecimalSI), Max: quantityPtr(100, resource.DecimalSI),
						Step: quantityPtr(5, resource.DecimalSI)}}},
			// max_inst vGPUs, one a claim, whatever it asks.
			draapi.CapacityVGPUs: {Value: quantity(int64(c.MaxInst), resource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:     quantityPtr(1, resource.DecimalSI),
					ValidValues: []resource.Quantity{quantity(1, resource.DecimalSI)}}},
		},
	}
}

// modeName is the mode attribute of a card: its vGPUs' mode, or, while it
// has none, the only mode its policy runs (policy 0 memory-only vGPUs,
// policy 5 compute ones), else unused.
func modeName(policy int, m placement.Mode) string {
	switch {
	case m == placement.Memory || (m == placement.None && policy == placement.PolicyNative):
		return draapi.ModeMemory
	case m == placement.Compute || (m == placement.None && policy == placement.PolicyHybrid):
		return draapi.ModeCompute
	}
	return draapi.ModeUnused
}

func deviceName(index int) string { return fmt.Sprintf("%s%d", draapi.DevicePrefix, index) }

func quantity(v int64, f resource.Format) resource.Quantity { return *resource.NewQuantity(v, f) }

func quantityPtr(v int64, f resource.Format) *resource.Quantity { return resource.NewQuantity(v, f) }
