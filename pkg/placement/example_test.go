package placement_test

import (
	"fmt"

	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/quota"
)

func ExamplePlace() {
	const gi = 1 << 30
	cards := []placement.Card{
		{Index: 0, MemoryBytes: 16 * gi, Policy: placement.PolicyFixed, MaxInst: 20},
		{Index: 1, MemoryBytes: 16 * gi, Policy: placement.PolicyFixed, MaxInst: 20},
	}
	placed := []placement.VGPU{
		{Owner: "a", Card: 0, MemoryBytes: 8 * gi, Mode: placement.Memory},
		{Owner: "b", Card: 1, MemoryBytes: 4 * gi, Cores: 50, Mode: placement.Compute},
	}
	for _, ann := range []map[string]string{
		{"gpuslice.io/gpu-memory": "4Gi", "gpuslice.io/gpu-cores": "30"},
		{"gpuslice.io/gpu-memory": "4Gi"},
		{"gpuslice.io/gpu-memory": "4Gi", "gpuslice.io/gpu-cores": "60"},
	} {
		req, _ := quota.Parse(ann, "app", nil)
		p, err := placement.Place(cards, placed, req, placement.Binpack)
		fmt.Println(p, err)
	}
	// Output:
	// [card 1 compute 4Gi 30%] <nil>
	// [card 0 memory 4Gi 0%] <nil>
	// [] gpuslice.io/gpu-cores="60": card 1 has 50 % of its compute left; card 0 runs memory-only vGPUs (one isolation mode per card)
}
