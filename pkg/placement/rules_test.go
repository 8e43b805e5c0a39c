package placement

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnits(t *testing.T) {
	tests := []struct {
		cores   uint32
		maxInst int
		want    int
	}{
		{0, 20, 0},
		{5, 20, 1},
		{30, 20, 6},
		{100, 20, 20},
		{5, 10, 1},  // 0.5 rounds up to the minimum of one
		{15, 10, 1}, // 1.5 rounds down
		{25, 10, 2},
		{95, 10, 9},
		{100, 10, 10},
		{5, 64, 3},
		{100, 64, 64},
		{5, 1, 1},
		{100, 1, 1},
		{10, 8, 1},
		{25, 8, 2},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Units(tt.cores, tt.maxInst), "%d %% at max_inst %d", tt.cores, tt.maxInst)
	}
}

func TestModeOn(t *testing.T) {
	type want struct {
		mode Mode
		ok   bool
	}
	for _, tt := range []struct {
		policy     int
		zero, some want // cores 0, cores above 0
	}{
		{0, want{Memory, true}, want{Memory, false}},
		{1, want{Memory, true}, want{Compute, true}},
		{2, want{Memory, true}, want{Compute, true}},
		{3, want{Memory, true}, want{Compute, true}},
		{4, want{Memory, true}, want{Compute, true}},
		{5, want{Compute, true}, want{Compute, true}},
		{6, want{Memory, true}, want{Compute, true}},
	} {
		for cores, w := range map[uint32]want{0: tt.zero, 5: tt.some, 100: tt.some} {
			m, ok := ModeOn(tt.policy, cores)
			assert.Equal(t, w, want{m, ok}, "policy %d cores %d", tt.policy, cores)
		}
	}
}

func TestQuotas(t *testing.T) {
	want := map[int]bool{0: false, 1: true, 2: false, 3: false, 4: true, 5: true, 6: true}
	for p, q := range want {
		assert.Equal(t, q, Quotas(p), "policy %d", p)
	}
}

func TestParseStrategy(t *testing.T) {
	for in, want := range map[string]Strategy{"": Binpack, "binpack": Binpack, "spread": Spread} {
		s, err := ParseStrategy(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, s, in)
	}
	for _, in := range []string{"Binpack", "pack", "most-free", " spread"} {
		_, err := ParseStrategy(in)
		assert.EqualError(t, err, `placement strategy "`+in+`": want binpack or spread`)
	}
}

func TestNames(t *testing.T) {
	assert.Equal(t, "none", None.String())
	assert.Equal(t, "memory", Memory.String())
	assert.Equal(t, "compute", Compute.String())
	assert.Equal(t, "Mode(9)", Mode(9).String())
	assert.Equal(t, "card 3 compute 1536Mi 25%", Placement{Card: 3, Mode: Compute, MemoryBytes: 1536 << 20, Cores: 25}.String())
	assert.Equal(t, "native", PolicyName(0))
	assert.Equal(t, "hybrid", PolicyName(5))
	assert.Equal(t, "weighted weak", PolicyName(6))
	assert.Equal(t, "policy(7)", PolicyName(7))
	assert.Equal(t, "no memory", NoMemory.String())
	assert.Equal(t, "isolation mode", ModeMismatch.String())
	assert.Equal(t, "Reason(0)", Reason(0).String())
	for r := Invalid; r <= NoMemory; r++ {
		assert.NotContains(t, r.String(), "Reason(", "%d", int(r))
	}
}

func TestCardsWord(t *testing.T) {
	for want, idx := range map[string][]int{
		"card 3":          {3},
		"cards 0-1":       {1, 0},
		"cards 0, 2":      {2, 0},
		"cards 0, 2-4, 7": {7, 4, 3, 2, 0},
		"cards 0-9":       {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
	} {
		assert.Equal(t, want, cardsWord(idx))
	}
}

func TestUsages(t *testing.T) {
	cs := []Card{{0, 16 * gi, 1, 10}, {1, 16 * gi, 5, 20}, {2, 16 * gi, 2, 20}, {3, 16 * gi, 0, 20}}
	placed := []VGPU{
		cmp(0, 4, 5), cmp(0, 4, 15), // 2 units at max_inst 10
		cmp(1, 2, 0), cmp(1, 2, 30), // quota 0 owns nothing
		cmp(2, 1, 100), cmp(2, 1, 100), // policy 2 counts no quota
		mem(3, 20), // over the card's memory
		mem(9, 1),  // no such card
	}
	got := Usages(cs, placed)
	require.Len(t, got, 4)
	assert.Equal(t, Usage{Card: cs[0], Mode: Compute, VGPUs: 2, MemoryBytes: 8 * gi, Cores: 20, Units: 2}, got[0])
	assert.Equal(t, Usage{Card: cs[1], Mode: Compute, VGPUs: 2, MemoryBytes: 4 * gi, Cores: 30, Units: 6}, got[1])
	assert.Equal(t, Usage{Card: cs[2], Mode: Compute, VGPUs: 2, MemoryBytes: 2 * gi}, got[2])
	assert.Equal(t, Usage{Card: cs[3], Mode: Memory, VGPUs: 1, MemoryBytes: 20 * gi}, got[3])
	assert.Equal(t, 8*gi, got[0].FreeBytes())
	assert.Equal(t, uint64(0), got[3].FreeBytes())
	assert.Equal(t, uint32(80), got[0].FreeCores())
	assert.Equal(t, uint32(70), got[1].FreeCores())
	assert.Equal(t, uint32(0), got[2].FreeCores(), "policy 2 counts no quota")
	assert.Equal(t, Usage{Card: Card{Index: 5}}, Usages([]Card{{Index: 5}}, nil)[5])
}
