package placement

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/quota"
)

const gi = uint64(1) << 30

// cards of 16 GiB under one policy and max_inst.
func cards(n, policy, maxInst int) []Card {
	out := make([]Card, n)
	for i := range out {
		out[i] = Card{Index: i, MemoryBytes: 16 * gi, Policy: policy, MaxInst: maxInst}
	}
	return out
}

// mem is a memory vGPU of g GiB on card c.
func mem(c int, g uint64) VGPU {
	return VGPU{Owner: fmt.Sprint("m", c, g), Card: c, MemoryBytes: g * gi, Mode: Memory}
}

// cmp is a compute vGPU of g GiB and cores percent on card c.
func cmp(c int, g uint64, cores uint32) VGPU {
	return VGPU{Owner: fmt.Sprint("c", c, g, cores), Card: c, MemoryBytes: g * gi, Cores: cores, Mode: Compute}
}

// times repeats a vGPU n times.
func times(n int, v VGPU) []VGPU {
	out := make([]VGPU, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func join(vs ...[]VGPU) []VGPU {
	var out []VGPU
	for _, v := range vs {
		out = append(out, v...)
	}
	return out
}

// a is the request of annotations keyed by the short names memory,
// cores, priority and index.
type a map[string]string

func parse(t testing.TB, ann a) *quota.Request {
	pod := map[string]string{}
	for k, v := range ann {
		pod[quota.KeyPrefix+k] = v
	}
	r, err := quota.Parse(pod, "app", nil)
	require.NoError(t, err)
	require.NotNil(t, r)
	return r
}

// on is a placement of g GiB and cores percent on card c in mode m.
func on(c int, m Mode, g uint64, cores uint32) Placement {
	return Placement{Card: c, Mode: m, MemoryBytes: g * gi, Cores: cores}
}

func TestPlace(t *testing.T) {
	big := []Card{{Index: 0, MemoryBytes: 80 * gi, Policy: 1, MaxInst: 20}, {Index: 1, MemoryBytes: 16 * gi, Policy: 1, MaxInst: 20}}
	mixed := []Card{{Index: 0, MemoryBytes: 16 * gi, Policy: 1, MaxInst: 20}, {Index: 1, MemoryBytes: 8 * gi, Policy: 1, MaxInst: 20}}
	sparse := []Card{{Index: 4, MemoryBytes: 16 * gi, Policy: 1, MaxInst: 20}, {Index: 1, MemoryBytes: 16 * gi, Policy: 1, MaxInst: 20}}
	tests := []struct {
		name   string
		cards  []Card
		placed []VGPU
		req    a
		s      Strategy
		want   []Placement
		err    string
		reason Reason
		card   int // of the error
	}{
		// The mode a request takes, by policy.
		{name: "policy 0, memory", cards: cards(1, 0, 20), req: a{"memory": "4Gi"}, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "policy 0 refuses compute", cards: cards(1, 0, 20), req: a{"memory": "4Gi", "cores": "30"}, reason: Native,
			err: `gpuslice.io/gpu-cores="30": card 0 runs policy 0 (native): no compute isolation`},
		{name: "policy 0 everywhere", cards: cards(3, 0, 20), req: a{"memory": "4Gi", "cores": "30"}, reason: Native,
			err: `gpuslice.io/gpu-cores="30": cards 0-2 run policy 0 (native): no compute isolation`},
		{name: "policy 0 card skipped for compute", cards: []Card{{0, 16 * gi, 0, 20}, {1, 16 * gi, 1, 20}}, req: a{"memory": "4Gi", "cores": "30"}, want: []Placement{on(1, Compute, 4, 30)}},
		{name: "policy 1, cores 0: memory", cards: cards(1, 1, 20), req: a{"memory": "4Gi"}, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "policy 1, cores 30: compute", cards: cards(1, 1, 20), req: a{"memory": "4Gi", "cores": "30"}, want: []Placement{on(0, Compute, 4, 30)}},
		{name: "policy 2, cores 0: memory", cards: cards(1, 2, 20), req: a{"memory": "4Gi", "cores": "0"}, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "policy 3, cores 5: compute", cards: cards(1, 3, 20), req: a{"memory": "4Gi", "cores": "5"}, want: []Placement{on(0, Compute, 4, 5)}},
		{name: "policy 4, cores 100: compute", cards: cards(1, 4, 20), req: a{"memory": "4Gi", "cores": "100"}, want: []Placement{on(0, Compute, 4, 100)}},
		{name: "policy 6, cores 0: memory", cards: cards(1, 6, 20), req: a{"memory": "4Gi"}, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "policy 5, cores 0: compute of quota 0", cards: cards(1, 5, 20), req: a{"memory": "4Gi"}, want: []Placement{on(0, Compute, 4, 0)}},
		{name: "policy 5, cores 30: compute", cards: cards(1, 5, 20), req: a{"memory": "4Gi", "cores": "30"}, want: []Placement{on(0, Compute, 4, 30)}},
		{name: "policy 1, high priority", cards: cards(1, 1, 20), req: a{"memory": "4Gi", "cores": "30", "priority": "high"}, want: []Placement{on(0, Compute, 4, 30)}},

		// High priority under policy 5.
		{name: "hybrid refuses high priority", cards: cards(1, 5, 20), req: a{"memory": "4Gi", "cores": "30", "priority": "high"}, reason: HighPriority,
			err: `gpuslice.io/gpu-priority="high": card 0 runs policy 5 (hybrid), which has no high priority`},
		{name: "high priority goes to the non-hybrid card", cards: []Card{{0, 16 * gi, 5, 20}, {1, 16 * gi, 4, 20}}, req: a{"memory": "4Gi", "cores": "30", "priority": "high"}, want: []Placement{on(1, Compute, 4, 30)}},
		{name: "low priority on hybrid", cards: cards(1, 5, 20), req: a{"memory": "4Gi", "cores": "30", "priority": "low"}, want: []Placement{on(0, Compute, 4, 30)}},

		// One isolation mode per card, both ways.
		{name: "compute on a memory card", cards: cards(1, 1, 20), placed: []VGPU{mem(0, 1)}, req: a{"memory": "4Gi", "cores": "30"}, reason: ModeMismatch,
			err: `gpuslice.io/gpu-cores="30": card 0 runs memory-only vGPUs (one isolation mode per card)`},
		{name: "memory on a compute card", cards: cards(1, 1, 20), placed: []VGPU{cmp(0, 1, 10)}, req: a{"memory": "4Gi"}, reason: ModeMismatch,
			err: `gpuslice.io/gpu-cores (not set: 0): card 0 runs compute-isolated vGPUs (one isolation mode per card)`},
		{name: "cores 0 on a compute card", cards: cards(1, 4, 20), placed: []VGPU{cmp(0, 1, 10)}, req: a{"memory": "4Gi", "cores": "0"}, reason: ModeMismatch,
			err: `gpuslice.io/gpu-cores="0": card 0 runs compute-isolated vGPUs (one isolation mode per card)`},
		{name: "compute goes to the empty card", cards: cards(2, 1, 20), placed: []VGPU{mem(0, 1)}, req: a{"memory": "4Gi", "cores": "30"}, want: []Placement{on(1, Compute, 4, 30)}},
		{name: "memory goes to the memory card", cards: cards(2, 1, 20), placed: []VGPU{cmp(1, 1, 5)}, req: a{"memory": "4Gi"}, s: Spread, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "compute joins compute", cards: cards(1, 1, 20), placed: []VGPU{cmp(0, 1, 10)}, req: a{"memory": "4Gi", "cores": "10"}, want: []Placement{on(0, Compute, 4, 10)}},
		{name: "quota 0 joins compute under hybrid", cards: cards(1, 5, 20), placed: []VGPU{cmp(0, 1, 100)}, req: a{"memory": "4Gi"}, want: []Placement{on(0, Compute, 4, 0)}},
		{name: "mode mismatch both ways", cards: []Card{{0, 16 * gi, 1, 20}, {1, 16 * gi, 5, 20}}, placed: []VGPU{cmp(0, 1, 5), mem(1, 1)}, req: a{"memory": "4Gi"}, reason: ModeMismatch,
			err: `gpuslice.io/gpu-cores (not set: 0): card 0 runs compute-isolated vGPUs (one isolation mode per card), card 1 runs memory-only vGPUs (one isolation mode per card)`},

		// max_inst vGPUs per card.
		{name: "the 21st vGPU", cards: cards(1, 1, 20), placed: times(20, mem(0, 0)), req: a{"memory": "1Gi"}, reason: TooManyVGPUs,
			err: `gpuslice.io/gpu-memory="1Gi": card 0 has 20 vGPUs already (max_inst 20)`},
		{name: "the 20th vGPU", cards: cards(1, 1, 20), placed: times(19, mem(0, 0)), req: a{"memory": "1Gi"}, want: []Placement{on(0, Memory, 1, 0)}},
		{name: "the 21st compute vGPU", cards: cards(1, 1, 20), placed: times(20, cmp(0, 0, 5)), req: a{"memory": "1Gi", "cores": "5"}, reason: TooManyVGPUs,
			err: `gpuslice.io/gpu-memory="1Gi": card 0 has 20 vGPUs already (max_inst 20)`},
		{name: "the 21st quota-0 hybrid vGPU", cards: cards(1, 5, 20), placed: times(20, cmp(0, 0, 0)), req: a{"memory": "1Gi"}, reason: TooManyVGPUs,
			err: `gpuslice.io/gpu-memory="1Gi": card 0 has 20 vGPUs already (max_inst 20)`},
		{name: "full cards grouped", cards: []Card{{0, 16 * gi, 2, 20}, {1, 16 * gi, 2, 20}, {2, 16 * gi, 2, 10}}, placed: join(times(20, mem(0, 0)), times(20, mem(1, 0)), times(10, mem(2, 0))),
			req: a{"memory": "1Gi"}, reason: TooManyVGPUs,
			err: `gpuslice.io/gpu-memory="1Gi": cards 0-1 have 20 vGPUs already (max_inst 20), card 2 has 10 vGPUs already (max_inst 10)`},
		{name: "the 64th vGPU under policy 2", cards: cards(1, 2, 64), placed: times(63, cmp(0, 0, 30)), req: a{"memory": "1Gi", "cores": "30"}, want: []Placement{on(0, Compute, 1, 30)}},
		{name: "the 65th vGPU under policy 2", cards: cards(1, 2, 64), placed: times(64, cmp(0, 0, 30)), req: a{"memory": "1Gi", "cores": "30"}, reason: TooManyVGPUs,
			err: `gpuslice.io/gpu-memory="1Gi": card 0 has 64 vGPUs already (max_inst 64)`},

		// Quotas and units under 1, 4, 5, 6; none under 2 and 3.
		{name: "compute left", cards: cards(1, 1, 20), placed: []VGPU{cmp(0, 1, 50)}, req: a{"memory": "1Gi", "cores": "60"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="60": card 0 has 50 % of its compute left`},
		{name: "compute exactly left", cards: cards(1, 1, 20), placed: []VGPU{cmp(0, 1, 50)}, req: a{"memory": "1Gi", "cores": "50"}, want: []Placement{on(0, Compute, 1, 50)}},
		{name: "policy 4 sums quotas", cards: cards(1, 4, 20), placed: []VGPU{cmp(0, 1, 30), cmp(0, 1, 40)}, req: a{"memory": "1Gi", "cores": "35"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="35": card 0 has 30 % of its compute left`},
		{name: "policy 6 sums quotas", cards: cards(1, 6, 20), placed: []VGPU{cmp(0, 1, 100)}, req: a{"memory": "1Gi", "cores": "5"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="5": card 0 has 0 % of its compute left`},
		{name: "policy 5 sums quotas", cards: cards(1, 5, 20), placed: []VGPU{cmp(0, 1, 80), cmp(0, 1, 0)}, req: a{"memory": "1Gi", "cores": "25"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="25": card 0 has 20 % of its compute left`},
		{name: "policy 2 ignores quotas", cards: cards(1, 2, 20), placed: []VGPU{cmp(0, 1, 100), cmp(0, 1, 100)}, req: a{"memory": "1Gi", "cores": "100"}, want: []Placement{on(0, Compute, 1, 100)}},
		{name: "policy 3 ignores quotas", cards: cards(1, 3, 20), placed: []VGPU{cmp(0, 1, 50), cmp(0, 1, 50), cmp(0, 1, 50)}, req: a{"memory": "1Gi", "cores": "50"}, want: []Placement{on(0, Compute, 1, 50)}},
		{name: "memory vGPUs own no compute", cards: cards(1, 1, 20), placed: []VGPU{cmp(0, 1, 100)}, req: a{"memory": "1Gi", "cores": "5"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="5": card 0 has 0 % of its compute left`},
		{name: "compute most left", cards: cards(3, 1, 20), placed: []VGPU{cmp(0, 1, 60), cmp(1, 1, 50), cmp(2, 1, 50)}, req: a{"memory": "1Gi", "cores": "60"}, reason: NoCompute, card: 1,
			err: `gpuslice.io/gpu-cores="60": no card has that much compute left (most left: card 1, 50 %)`},
		{name: "compute goes where it fits", cards: cards(2, 1, 20), placed: []VGPU{cmp(0, 1, 60), cmp(1, 8, 30)}, req: a{"memory": "1Gi", "cores": "60"}, want: []Placement{on(1, Compute, 1, 60)}},

		// Units: max(1, q*max_inst/100), at most max_inst.
		{name: "max_inst 10: 5 % owns a whole unit", cards: cards(1, 1, 10), placed: join(times(5, cmp(0, 0, 5)), []VGPU{cmp(0, 0, 50)}), req: a{"memory": "1Gi", "cores": "5"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="5": card 0 has 0 of its 10 compute units left (a unit is 10 %; 5 % needs 1)`},
		{name: "max_inst 20: the same fits", cards: cards(1, 1, 20), placed: join(times(5, cmp(0, 0, 5)), []VGPU{cmp(0, 0, 50)}), req: a{"memory": "1Gi", "cores": "5"}, want: []Placement{on(0, Compute, 1, 5)}},
		{name: "max_inst 10: 15 % owns one unit", cards: cards(1, 1, 10), placed: times(3, cmp(0, 0, 15)), req: a{"memory": "1Gi", "cores": "55"}, want: []Placement{on(0, Compute, 1, 55)}},
		{name: "max_inst 10: units before quotas", cards: cards(1, 4, 10), placed: times(9, cmp(0, 0, 5)), req: a{"memory": "1Gi", "cores": "20"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="20": card 0 has 1 of its 10 compute units left (a unit is 10 %; 20 % needs 2)`},
		{name: "max_inst 10: the last unit", cards: cards(1, 4, 10), placed: times(9, cmp(0, 0, 5)), req: a{"memory": "1Gi", "cores": "15"}, want: []Placement{on(0, Compute, 1, 15)}},
		{name: "max_inst 20: 20 vGPUs of 5 %", cards: cards(1, 6, 20), placed: times(19, cmp(0, 0, 5)), req: a{"memory": "1Gi", "cores": "5"}, want: []Placement{on(0, Compute, 1, 5)}},
		{name: "max_inst 20: 5 % left", cards: cards(1, 6, 20), placed: join(times(18, cmp(0, 0, 5)), []VGPU{cmp(0, 0, 5)}), req: a{"memory": "1Gi", "cores": "10"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="10": card 0 has 5 % of its compute left`},
		{name: "max_inst 8: 5 % owns 12.5 %", cards: cards(1, 1, 8), placed: times(7, cmp(0, 0, 5)), req: a{"memory": "1Gi", "cores": "10"}, want: []Placement{on(0, Compute, 1, 10)}},
		{name: "max_inst 8: no unit left", cards: cards(1, 1, 8), placed: times(7, cmp(0, 0, 5)), req: a{"memory": "1Gi", "cores": "25"}, reason: NoCompute,
			err: `gpuslice.io/gpu-cores="25": card 0 has 1 of its 8 compute units left (a unit is 12.5 %; 25 % needs 2)`},
		{name: "hybrid quota 0 owns no unit", cards: cards(1, 5, 10), placed: join(times(5, cmp(0, 0, 0)), []VGPU{cmp(0, 0, 95)}), req: a{"memory": "1Gi", "cores": "5"}, want: []Placement{on(0, Compute, 1, 5)}},
		{name: "hybrid quota 0 beside 100 %", cards: cards(1, 5, 10), placed: join([]VGPU{cmp(0, 0, 100)}, times(8, cmp(0, 0, 0))), req: a{"memory": "1Gi"}, want: []Placement{on(0, Compute, 1, 0)}},

		// Memory.
		{name: "no card has that much", cards: cards(2, 1, 20), placed: []VGPU{mem(0, 8), mem(1, 4)}, req: a{"memory": "64Gi"}, reason: NoMemory, card: 1,
			err: `gpuslice.io/gpu-memory="64Gi": no card has that much free (largest free: card 1, 12288 MiB of 16384 MiB)`},
		{name: "exactly the free memory", cards: cards(2, 1, 20), placed: []VGPU{mem(0, 8), mem(1, 4)}, req: a{"memory": "12Gi"}, want: []Placement{on(1, Memory, 12, 0)}},
		{name: "one card short", cards: cards(1, 1, 20), placed: []VGPU{mem(0, 8)}, req: a{"memory": "8193Mi"}, reason: NoMemory,
			err: `gpuslice.io/gpu-memory="8193Mi": card 0 has 8192 MiB of 16384 MiB free`},
		{name: "overcommitted card", cards: cards(1, 1, 20), placed: []VGPU{mem(0, 12), mem(0, 8)}, req: a{"memory": "1Mi"}, reason: NoMemory,
			err: `gpuslice.io/gpu-memory="1Mi": card 0 has 0 MiB of 16384 MiB free`},
		{name: "vGPUs of unknown cards ignored", cards: cards(1, 1, 20), placed: []VGPU{mem(7, 16), cmp(7, 1, 100)}, req: a{"memory": "16Gi", "cores": "100"}, want: []Placement{on(0, Compute, 16, 100)}},

		// The most relevant reason first, then the others.
		{name: "memory, then mode", cards: cards(3, 1, 20), placed: []VGPU{cmp(0, 12, 10), cmp(1, 10, 10), mem(2, 1)}, req: a{"memory": "8Gi", "cores": "30"}, reason: NoMemory, card: 1,
			err: `gpuslice.io/gpu-memory="8Gi": not enough free memory on cards 0-1 (largest free: card 1, 6144 MiB of 16384 MiB); gpuslice.io/gpu-cores="30": card 2 runs memory-only vGPUs (one isolation mode per card)`},
		{name: "compute, full, hybrid, native", cards: []Card{{0, 16 * gi, 0, 20}, {1, 16 * gi, 5, 20}, {2, 16 * gi, 1, 2}, {3, 16 * gi, 1, 20}}, placed: []VGPU{cmp(2, 1, 5), cmp(2, 1, 5), cmp(3, 1, 90)},
			req: a{"memory": "1Gi", "cores": "30", "priority": "high"}, reason: NoCompute, card: 3,
			err: `gpuslice.io/gpu-cores="30": card 3 has 10 % of its compute left; gpuslice.io/gpu-memory="1Gi": card 2 has 2 vGPUs already (max_inst 2); gpuslice.io/gpu-priority="high": card 1 runs policy 5 (hybrid), which has no high priority; gpuslice.io/gpu-cores="30": card 0 runs policy 0 (native): no compute isolation`},

		// Strategies.
		{name: "binpack: least free left", cards: cards(3, 1, 20), placed: []VGPU{mem(0, 8), mem(1, 4)}, req: a{"memory": "4Gi"}, s: Binpack, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "spread: most free left", cards: cards(3, 1, 20), placed: []VGPU{mem(0, 8), mem(1, 4)}, req: a{"memory": "4Gi"}, s: Spread, want: []Placement{on(2, Memory, 4, 0)}},
		{name: "default is binpack", cards: cards(3, 1, 20), placed: []VGPU{mem(0, 4), mem(1, 8)}, req: a{"memory": "4Gi"}, want: []Placement{on(1, Memory, 4, 0)}},
		{name: "binpack tie: lowest index", cards: cards(3, 1, 20), req: a{"memory": "4Gi"}, s: Binpack, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "spread tie: lowest index", cards: cards(3, 1, 20), req: a{"memory": "4Gi"}, s: Spread, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "binpack tie, cards out of order", cards: sparse, req: a{"memory": "4Gi"}, s: Binpack, want: []Placement{on(1, Memory, 4, 0)}},
		{name: "spread tie, cards out of order", cards: sparse, req: a{"memory": "4Gi"}, s: Spread, want: []Placement{on(1, Memory, 4, 0)}},
		{name: "binpack: the smaller card", cards: big, req: a{"memory": "4Gi"}, s: Binpack, want: []Placement{on(1, Memory, 4, 0)}},
		{name: "spread: the bigger card", cards: big, req: a{"memory": "4Gi"}, s: Spread, want: []Placement{on(0, Memory, 4, 0)}},
		{name: "binpack skips what does not fit", cards: cards(3, 1, 20), placed: []VGPU{mem(0, 14), mem(1, 8)}, req: a{"memory": "4Gi"}, want: []Placement{on(1, Memory, 4, 0)}},

		// Pins.
		{name: "pin honoured", cards: cards(3, 1, 20), placed: []VGPU{mem(0, 8)}, req: a{"memory": "4Gi", "index": "2"}, want: []Placement{on(2, Memory, 4, 0)}},
		{name: "pin full, no other card", cards: cards(2, 1, 20), placed: []VGPU{mem(1, 12)}, req: a{"memory": "8Gi", "index": "1"}, reason: NoMemory, card: 1,
			err: `gpuslice.io/gpu-memory="8Gi": card 1 has 4096 MiB of 16384 MiB free`},
		{name: "pin of the wrong mode", cards: cards(2, 1, 20), placed: []VGPU{mem(1, 1)}, req: a{"memory": "1Gi", "cores": "10", "index": "1"}, reason: ModeMismatch, card: 1,
			err: `gpuslice.io/gpu-cores="10": card 1 runs memory-only vGPUs (one isolation mode per card)`},
		{name: "pin to a card the node lacks", cards: cards(2, 1, 20), req: a{"memory": "4Gi", "index": "3"}, reason: NoSuchCard, card: 3,
			err: `gpuslice.io/gpu-index="3": no card 3 on this node (cards 0-1)`},
		{name: "pin, one card on the node", cards: cards(1, 1, 20), req: a{"memory": "4Gi", "index": "1"}, reason: NoSuchCard, card: 1,
			err: `gpuslice.io/gpu-index="1": no card 1 on this node (card 0)`},
		{name: "pin, cards apart", cards: []Card{{0, gi, 1, 20}, {2, gi, 1, 20}, {3, gi, 1, 20}}, req: a{"memory": "4Gi", "index": "1"}, reason: NoSuchCard, card: 1,
			err: `gpuslice.io/gpu-index="1": no card 1 on this node (cards 0, 2-3)`},

		// Several cards.
		{name: "two cards", cards: cards(2, 1, 20), req: a{"memory": "4Gi,8Gi", "cores": "30"}, want: []Placement{on(0, Compute, 4, 30), on(1, Compute, 8, 30)}},
		{name: "two cards, binpack accounts", cards: cards(3, 1, 20), placed: []VGPU{mem(2, 8)}, req: a{"memory": "4Gi,4Gi"}, want: []Placement{on(2, Memory, 4, 0), on(0, Memory, 4, 0)}},
		{name: "two cards, spread", cards: cards(3, 1, 20), placed: []VGPU{mem(0, 8), mem(1, 2)}, req: a{"memory": "4Gi,4Gi"}, s: Spread, want: []Placement{on(2, Memory, 4, 0), on(1, Memory, 4, 0)}},
		{name: "two cards per-card cores", cards: cards(2, 5, 20), req: a{"memory": "4Gi,4Gi", "cores": "0,50"}, want: []Placement{on(0, Compute, 4, 0), on(1, Compute, 4, 50)}},
		{name: "two cards pinned", cards: cards(3, 1, 20), req: a{"memory": "4Gi,8Gi", "index": "2,0"}, want: []Placement{on(2, Memory, 4, 0), on(0, Memory, 8, 0)}},
		{name: "second card short", cards: mixed, req: a{"memory": "12Gi,12Gi"}, reason: NoMemory, card: 1,
			err: `gpuslice.io/gpu-memory="12Gi,12Gi" (2nd of 2 cards: 12Gi): card 1 has 8192 MiB of 8192 MiB free`},
		{name: "second card's compute", cards: cards(2, 1, 20), placed: []VGPU{cmp(1, 1, 80)}, req: a{"memory": "1Gi,1Gi", "cores": "30"}, reason: NoCompute, card: 1,
			err: `gpuslice.io/gpu-cores="30" (2nd of 2 cards): card 1 has 20 % of its compute left`},
		{name: "more cards than the node", cards: cards(2, 1, 20), req: a{"memory": "4Gi,4Gi,4Gi"}, reason: NoCards, card: -1,
			err: `gpuslice.io/gpu-memory="4Gi,4Gi,4Gi": asks for 3 cards, this node has 2`},
		{name: "no cards", req: a{"memory": "4Gi"}, reason: NoCards, card: -1,
			err: `gpuslice.io/gpu-memory="4Gi": this node has no card for gpuslice`},
		{name: "second pin unknown", cards: cards(2, 1, 20), req: a{"memory": "4Gi,4Gi", "index": "0,5"}, reason: NoSuchCard, card: 5,
			err: `gpuslice.io/gpu-index="0,5" (2nd of 2 cards: 5): no card 5 on this node (cards 0-1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := parse(t, tt.req)
			got, err := Place(tt.cards, tt.placed, req, tt.s)
			if tt.err == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.err, err.Error())
			assert.Nil(t, got)
			var pe *Error
			require.True(t, errors.As(err, &pe), "want a *placement.Error")
			assert.Equal(t, tt.reason, pe.Reason, "reason")
			assert.Equal(t, tt.card, pe.Card, "card")
		})
	}
}

// TestPlaceRefused: the error lists every card considered and why.
func TestPlaceRefused(t *testing.T) {
	cs := []Card{{0, 16 * gi, 0, 20}, {1, 16 * gi, 5, 20}, {2, 16 * gi, 1, 2}, {3, 16 * gi, 1, 20}, {4, gi, 1, 20}, {5, 16 * gi, 1, 20}}
	placed := []VGPU{cmp(2, 1, 5), cmp(2, 1, 5), cmp(3, 1, 90), mem(5, 1)}
	_, err := Place(cs, placed, parse(t, a{"memory": "2Gi", "cores": "30", "priority": "high"}), Spread)
	var pe *Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, NoMemory, pe.Reason)
	assert.Equal(t, quota.KeyMemory, pe.Key)
	assert.Equal(t, 4, pe.Card)
	assert.Equal(t, 0, pe.Item)
	assert.Equal(t, []Refusal{{0, Native}, {1, HighPriority}, {2, TooManyVGPUs}, {3, NoCompute}, {4, NoMemory}, {5, ModeMismatch}}, pe.Refused)
}

// TestPlaceInvalid: malformed input is refused before anything is placed.
func TestPlaceInvalid(t *testing.T) {
	ok := cards(2, 1, 20)
	one := &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi, Index: -1}}}
	tests := []struct {
		name  string
		cards []Card
		req   *quota.Request
		s     Strategy
		err   string
	}{
		{"strategy", ok, one, "pack", `placement strategy "pack": want binpack or spread`},
		{"policy", []Card{{0, gi, 7, 20}}, one, "", `card 0: policy 7: want 0-6 (node configuration)`},
		{"negative policy", []Card{{0, gi, -1, 20}}, one, "", `card 0: policy -1: want 0-6 (node configuration)`},
		{"max_inst 0", []Card{{0, gi, 1, 0}}, one, "", `card 0: max_inst 0: want 1-64 (node configuration)`},
		{"max_inst 65", []Card{{0, gi, 1, 65}}, one, "", `card 0: max_inst 65: want 1-64 (node configuration)`},
		{"card twice", []Card{{1, gi, 1, 20}, {1, gi, 1, 20}}, one, "", `card 1 listed twice (node configuration)`},
		{"negative index", []Card{{-1, gi, 1, 20}}, one, "", `card index -1: want 0 or more (node configuration)`},
		{"no request", ok, nil, "", `placement: the request asks for no card`},
		{"no cards asked", ok, &quota.Request{}, "", `placement: the request asks for no card`},
		{"memory 0", ok, &quota.Request{Cards: []quota.CardRequest{{Index: -1}}}, "", `gpuslice.io/gpu-memory="0": want a whole number of MiB, at least 1Mi`},
		{"memory not MiB", ok, &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi + 1, Index: -1}}}, "", `gpuslice.io/gpu-memory="1073741825": want a whole number of MiB, at least 1Mi`},
		{"cores 33", ok, &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi, Cores: 33, Index: -1}}}, "", `gpuslice.io/gpu-cores="33": want a percent 0-100 in steps of 5`},
		{"cores 105", ok, &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi, Cores: 105, Index: -1}}}, "", `gpuslice.io/gpu-cores="105": want a percent 0-100 in steps of 5`},
		{"index -2", ok, &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi, Index: -2}}}, "", `gpuslice.io/gpu-index="any": want a card index 0-31, each card of the request on its own`},
		{"index twice", ok, &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi, Index: 1}, {MemoryBytes: gi, Index: 1}}}, "", `gpuslice.io/gpu-index="1" (2nd of 2 cards): want a card index 0-31, each card of the request on its own`},
		{"high without cores", ok, &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi, Index: -1}}, Priority: quota.High}, "",
			`gpuslice.io/gpu-priority="high": ` + quota.HighNeedsCores},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Place(tt.cards, nil, tt.req, tt.s)
			assert.Nil(t, got)
			require.EqualError(t, err, tt.err)
			var pe *Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, Invalid, pe.Reason)
		})
	}
}

// TestPlaceMixedPins: in a request built in code, the pinned cards are
// placed first, so that an unpinned one does not take a pinned card.
func TestPlaceMixedPins(t *testing.T) {
	req := &quota.Request{Cards: []quota.CardRequest{{MemoryBytes: gi, Index: -1}, {MemoryBytes: gi, Index: 0}}}
	got, err := Place(cards(2, 1, 20), nil, req, Binpack)
	require.NoError(t, err)
	assert.Equal(t, []Placement{on(1, Memory, 1, 0), on(0, Memory, 1, 0)}, got)
}

// TestPlaceIsPure: Place changes neither its arguments nor depends on
// earlier calls.
func TestPlaceIsPure(t *testing.T) {
	cs := cards(2, 1, 20)
	placed := []VGPU{mem(0, 4)}
	req := parse(t, a{"memory": "4Gi,4Gi"})
	first, err := Place(cs, placed, req, Binpack)
	require.NoError(t, err)
	second, err := Place(cs, placed, req, Binpack)
	require.NoError(t, err)
	assert.Equal(t, first, second)
	assert.Equal(t, cards(2, 1, 20), cs)
	assert.Equal(t, []VGPU{mem(0, 4)}, placed)
}

// TestPlaceFillsACard: placing one vGPU after another, feeding each back,
// fills a policy 1 card to exactly max_inst vGPUs of 5 %.
func TestPlaceFillsACard(t *testing.T) {
	cs := cards(1, 1, 20)
	var placed []VGPU
	req := parse(t, a{"memory": "512Mi", "cores": "5"})
	for i := 0; i < 20; i++ {
		p, err := Place(cs, placed, req, Binpack)
		require.NoError(t, err, "vGPU %d", i+1)
		placed = append(placed, VGPU{Owner: fmt.Sprint(i), Card: p[0].Card, MemoryBytes: p[0].MemoryBytes, Cores: p[0].Cores, Mode: p[0].Mode})
	}
	_, err := Place(cs, placed, req, Binpack)
	assert.EqualError(t, err, `gpuslice.io/gpu-memory="512Mi": card 0 has 20 vGPUs already (max_inst 20)`)
	u := Usages(cs, placed)[0]
	assert.Equal(t, Usage{Card: cs[0], Mode: Compute, VGPUs: 20, MemoryBytes: 10 * gi, Cores: 100, Units: 20}, u)
}

// Several cards in one request: where the greedy order strands a later
// card, the search finds the assignment that fits them all.
func TestPlaceSearchesMultiCard(t *testing.T) {
	tests := []struct {
		name   string
		s      Strategy
		placed []VGPU
		ann    a
		want   []Placement
	}{
		{"spread: the big card first would not fit", Spread,
			[]VGPU{mem(0, 4), mem(1, 11)}, a{"memory": "4Gi,10Gi"},
			[]Placement{on(1, Memory, 4, 0), on(0, Memory, 10, 0)}},
		{"binpack: cores decide", Binpack,
			[]VGPU{cmp(0, 6, 45), cmp(1, 11, 10)}, a{"memory": "1Gi,1Gi", "cores": "50,60"},
			[]Placement{on(0, Compute, 1, 50), on(1, Compute, 1, 60)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(cards(2, PolicyFixed, 20), tc.placed, parse(t, tc.ann), tc.s)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	// Nothing fits: the greedy refusal, naming the card that did not fit.
	_, err := Place(cards(2, PolicyFixed, 20), []VGPU{mem(0, 10), mem(1, 11)}, parse(t, a{"memory": "6Gi,6Gi"}), Spread)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gpuslice.io/gpu-memory")
}
