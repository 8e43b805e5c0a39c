package placement

import (
	"fmt"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/quota"
)

// BenchmarkPlace places a 1 GiB, 5 % vGPU on 10 cards of 80 GiB (policy 5,
// max_inst 64) holding 0, 20 or 200 vGPUs (half of 5 %, half of quota 0),
// and, for the error path, on 10 full cards (max_inst 20, 200 vGPUs).
func BenchmarkPlace(b *testing.B) {
	req := &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi, Cores: 5, Index: -1}}}
	node := func(maxInst int) []Card {
		cs := make([]Card, 10)
		for i := range cs {
			cs[i] = Card{Index: i, MemoryBytes: 80 * gi, Policy: PolicyHybrid, MaxInst: maxInst}
		}
		return cs
	}
	spread := func(n int) []VGPU {
		vs := make([]VGPU, n)
		for i := range vs {
			vs[i] = VGPU{Owner: fmt.Sprint(i), Card: i % 10, MemoryBytes: gi, Cores: uint32(5 * (i / 10 % 2)), Mode: Compute}
		}
		return vs
	}
	for _, bc := range []struct {
		name   string
		cards  []Card
		placed []VGPU
		fits   bool
	}{
		{"placed=0", node(64), nil, true},
		{"placed=20", node(64), spread(20), true},
		{"placed=200", node(64), spread(200), true},
		{"placed=200/full", node(20), spread(200), false},
	} {
		for _, s := range []Strategy{Binpack, Spread} {
			b.Run(bc.name+"/"+string(s), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, err := Place(bc.cards, bc.placed, req, s)
					if (err == nil) != bc.fits {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
